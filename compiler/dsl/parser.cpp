// Recursive-descent parser for the orthogonalizer DSL.
#include "dsl/parser.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "dsl/coefficient_sets.h"
#include "dsl/lexer.h"

namespace orthojit::dsl {
namespace {

std::string join_names(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + std::string(names[i]);
  return out;
}

// The shortest spelling that reads back as the same double (0.9, not 0.90000000000000002).
std::string format_number(double value) {
  std::string text;
  for (int precision = 6; precision <= 17; ++precision) {
    std::ostringstream out;
    out.precision(precision);
    out << value;
    text = out.str();
    if (std::strtod(text.c_str(), nullptr) == value) break;
  }
  return text;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Program parse() {
    Program program;
    expect_keyword("orthogonalizer", "the program header 'orthogonalizer NAME {'");
    program.location = previous().location;
    program.name = expect_identifier("the program name").text;
    expect_punct("{", "'{' after the program name");
    std::map<std::string, SourceLocation> seen;
    std::optional<int> declared_steps;
    SourceLocation steps_location;
    struct ScheduleText {
      SourceLocation location;
      std::vector<Triple> triples;
      std::optional<int> repeat;
      SourceLocation repeat_location;
      std::string set_name;
      double safety = 1.0;
    };
    std::optional<ScheduleText> schedule;
    bool have_step = false;

    while (!at_punct("}")) {
      const Token& item = peek();
      if (item.kind != Token::Kind::Identifier)
        fail(item, "a section (precision, normalize, coefficients, steps, gram_restarts, step) or '}'");
      auto [it, inserted] = seen.emplace(item.text, item.location);
      if (!inserted && item.text != "}")
        throw CompileError(item.location, "duplicate '" + item.text + "' section; the first one is at " +
                                              it->second.to_string());
      if (item.text == "precision") {
        advance();
        parse_precision(program.policy);
      } else if (item.text == "normalize") {
        advance();
        parse_normalize(program.normalization);
      } else if (item.text == "coefficients") {
        advance();
        ScheduleText text;
        text.location = peek().location;
        if (at_punct("[")) {
          advance();
          do {
            if (at_punct("]")) break;  // trailing comma
            text.triples.push_back(parse_triple());
          } while (accept_punct(","));
          expect_punct("]", "',' or ']' in the coefficient table");
          if (text.triples.empty()) throw CompileError(text.location, "the coefficient table is empty; expected at least one (a, b, c) triple");
        } else if (at_punct("(")) {
          text.triples.push_back(parse_triple());
        } else if (peek().kind == Token::Kind::Identifier) {
          const Token& name = advance();
          const NamedCoefficientSet* set = find_coefficient_set(name.text);
          if (!set) {
            std::vector<std::string_view> names;
            for (const auto& known : named_coefficient_sets()) names.push_back(known.name);
            throw CompileError(name.location, "unknown coefficient set '" + name.text + "'; expected one of: " + join_names(names));
          }
          text.triples = set->triples;
          text.set_name = name.text;
        } else {
          fail(peek(), "a coefficient set name, a triple '(a, b, c)' or a table '[ (a, b, c), ... ]'");
        }
        if (at_keyword("repeat")) {
          text.repeat_location = advance().location;
          const Token& count = expect_integer("the repeat count");
          text.repeat = static_cast<int>(count.number);
          if (text.triples.size() != 1)
            throw CompileError(text.repeat_location, "'repeat' applies to a single triple, but this schedule has " +
                                                         std::to_string(text.triples.size()) + " triples (one per step)");
        }
        if (at_keyword("scaled")) {
          advance();
          const Token& factor = peek();
          text.safety = parse_signed_number("the safety factor after 'scaled'");
          if (!(text.safety >= 1.0) || !std::isfinite(text.safety))
            throw CompileError(factor.location, "safety factor must be a finite number >= 1, found " + format_number(text.safety));
        }
        expect_punct(";", "';' after the coefficient schedule (or 'repeat N' / 'scaled S')");
        schedule = text;
      } else if (item.text == "steps") {
        advance();
        steps_location = peek().location;
        declared_steps = static_cast<int>(expect_integer("the number of steps").number);
        expect_punct(";", "';' after 'steps N'");
      } else if (item.text == "gram_restarts") {
        advance();
        program.gram_restarts.clear();
        expect_punct("[", "'[' to open the restart list, e.g. gram_restarts [2];");
        if (!at_punct("]")) {
          do {
            const Token& step = expect_integer("a step index at which gram restarts");
            program.gram_restarts.push_back(static_cast<int>(step.number));
          } while (accept_punct(","));
        }
        expect_punct("]", "',' or ']' in the restart list");
        expect_punct(";", "';' after the restart list");
      } else if (item.text == "step") {
        advance();
        program.step_location = item.location;
        parse_step(program);
        have_step = true;
      } else {
        fail(item, "a section (precision, normalize, coefficients, steps, gram_restarts, step) or '}'");
      }
    }
    const Token& close = advance();
    if (peek().kind != Token::Kind::End)
      fail(peek(), "end of file after the closing '}' of program '" + program.name + "'");

    if (!schedule)
      throw CompileError(close.location, "program '" + program.name + "' has no 'coefficients' section");
    if (!have_step)
      throw CompileError(close.location, "program '" + program.name + "' has no 'step { ... }' block");

    // Expand the schedule to one triple per step and check the counts agree.
    int step_count = 0;
    if (schedule->triples.size() == 1) {
      if (schedule->repeat && declared_steps && *schedule->repeat != *declared_steps)
        throw CompileError(schedule->repeat_location, "'repeat " + std::to_string(*schedule->repeat) +
                                                          "' disagrees with 'steps " + std::to_string(*declared_steps) +
                                                          ";' at " + steps_location.to_string());
      if (!schedule->repeat && !declared_steps)
        throw CompileError(schedule->location, "the schedule has a single triple and no step count; expected 'repeat N' after it or a 'steps N;' section");
      step_count = schedule->repeat ? *schedule->repeat : *declared_steps;
    } else {
      step_count = static_cast<int>(schedule->triples.size());
      if (declared_steps && *declared_steps != step_count)
        throw CompileError(schedule->location, "the coefficient table has " + std::to_string(step_count) +
                                                   " triples but the program declares 'steps " + std::to_string(*declared_steps) +
                                                   ";' (at " + steps_location.to_string() + "); expected " +
                                                   std::to_string(*declared_steps) + " triples or a single repeated triple");
    }
    if (step_count < 1 || step_count > 1000)
      throw CompileError(schedule->location, "the number of steps must be between 1 and 1000, found " + std::to_string(step_count));
    for (int step = 0; step < step_count; ++step) {
      const Triple& raw = schedule->triples.size() == 1 ? schedule->triples[0] : schedule->triples[static_cast<size_t>(step)];
      program.steps.push_back(scale_for_safety(raw, schedule->safety));
    }
    if (!seen.count("gram_restarts")) program.gram_restarts = default_gram_restarts(step_count);
    program.coefficient_set = schedule->set_name;
    program.coefficient_safety = schedule->safety;
    for (int restart : program.gram_restarts)
      if (restart < 1 || restart >= step_count)
        throw CompileError(seen["gram_restarts"], "gram restart at step " + std::to_string(restart) +
                                                      " is outside 1.." + std::to_string(step_count - 1) +
                                                      " (steps are numbered from 0; a restart happens before the step)");
    return program;
  }

 private:
  void parse_precision(PrecisionPolicy& policy) {
    expect_punct("{", "'{' after 'precision'");
    while (!accept_punct("}")) {
      const Token& key = expect_identifier("'storage', 'accumulate', 'norm' or '}'");
      ScalarType* field = nullptr;
      if (key.text == "storage") field = &policy.storage;
      else if (key.text == "accumulate") field = &policy.accumulate;
      else if (key.text == "norm") field = &policy.norm;
      else throw CompileError(key.location, "unknown precision setting '" + key.text + "'; expected 'storage', 'accumulate' or 'norm'");
      expect_punct("=", "'=' after '" + key.text + "'");
      const Token& value = expect_identifier("a type (bf16, f16, f32, f64)");
      auto type = parse_scalar_type(value.text);
      if (!type) throw CompileError(value.location, "unknown type '" + value.text + "'; expected bf16, f16, f32 or f64");
      if (key.text != "storage" && is_16bit(*type))
        throw CompileError(value.location, "the " + key.text + " type must be f32 or f64, found " + value.text +
                                               " (16-bit types are for storage only)");
      *field = *type;
      expect_punct(";", "';' after the " + key.text + " type");
    }
    if (static_cast<int>(policy.accumulate) < static_cast<int>(policy.storage))
      throw CompileError(previous().location, "accumulate type " + std::string(to_string(policy.accumulate)) +
                                                  " is narrower than the storage type " + std::string(to_string(policy.storage)));
  }

  void parse_normalize(Normalization& normalization) {
    const Token& kind = expect_identifier("the norm ('frobenius' or 'aol')");
    if (kind.text != "frobenius" && kind.text != "aol")
      throw CompileError(kind.location, "unknown normalization '" + kind.text + "'; expected 'frobenius' or 'aol' (AOL's row rescaling)");
    const bool aol = kind.text == "aol";
    if (aol) normalization.kind = Normalization::Kind::Aol;
    expect_punct("(", "'(' after '" + kind.text + "'");
    if (!at_punct(")")) {
      do {
        const Token& key = expect_identifier(aol ? "'eps'" : "'safety', 'eps' or 'mode'");
        if (aol && key.text != "eps")
          throw CompileError(key.location, "unknown aol argument '" + key.text + "'; aol takes only 'eps' (the floor of each row's Σ|X·Xᵀ|)");
        expect_punct("=", "'=' after '" + key.text + "'");
        if (key.text == "safety" || key.text == "eps") {
          const Token& value_token = peek();
          double value = parse_signed_number("a number for " + key.text);
          if (key.text == "safety" && !(value >= 1.0 && std::isfinite(value)))
            throw CompileError(value_token.location, "safety must be a finite number >= 1, found " + format_number(value));
          if (key.text == "eps" && !(value > 0.0 && std::isfinite(value)))
            throw CompileError(value_token.location, "eps must be a positive finite number, found " + format_number(value));
          (key.text == "safety" ? normalization.safety : normalization.eps) = value;
        } else if (key.text == "mode") {
          const Token& mode = expect_identifier("'add' or 'clamp'");
          if (mode.text == "add") normalization.mode = Normalization::Mode::Add;
          else if (mode.text == "clamp") normalization.mode = Normalization::Mode::Clamp;
          else throw CompileError(mode.location, "unknown normalization mode '" + mode.text + "'; expected 'add' (X/(|X|*s+eps)) or 'clamp' (X/max(|X|*s, eps))");
        } else {
          throw CompileError(key.location, "unknown normalization argument '" + key.text + "'; expected 'safety', 'eps' or 'mode'");
        }
      } while (accept_punct(","));
    }
    expect_punct(")", "',' or ')' in the normalization arguments");
    expect_punct(";", "';' after the normalization");
  }

  Triple parse_triple() {
    expect_punct("(", "'(' to open an (a, b, c) triple");
    Triple triple;
    triple.a = parse_signed_number("the coefficient a");
    expect_punct(",", "',' after a; a triple has three coefficients (a, b, c)");
    triple.b = parse_signed_number("the coefficient b");
    expect_punct(",", "',' after b; a triple has three coefficients (a, b, c)");
    triple.c = parse_signed_number("the coefficient c");
    expect_punct(")", "')' after c; a triple has exactly three coefficients (a, b, c)");
    return triple;
  }

  void parse_step(Program& program) {
    expect_punct("{", "'{' after 'step'");
    while (!accept_punct("}")) {
      Statement statement;
      const Token& target = expect_identifier("a statement 'NAME = expression;' or '}'");
      statement.location = target.location;
      statement.target = target.text;
      expect_punct("=", "'=' after '" + target.text + "'");
      statement.value = parse_expression();
      expect_punct(";", "';' or an operator (+ - * @ .T) after the expression");
      program.step_body.push_back(std::move(statement));
    }
    if (program.step_body.empty())
      throw CompileError(previous().location, "the step block is empty; expected at least one statement assigning X");
  }

  // expression := term (('+' | '-') term)*
  ExprPtr parse_expression() {
    ExprPtr lhs = parse_term();
    while (at_punct("+") || at_punct("-")) {
      const Token& op = advance();
      lhs = binary(op.text == "+" ? Expr::Kind::Add : Expr::Kind::Subtract, op.location, lhs, parse_term());
    }
    return lhs;
  }
  // term := unary (('@' | '*') unary)*
  ExprPtr parse_term() {
    ExprPtr lhs = parse_unary();
    while (at_punct("@") || at_punct("*")) {
      const Token& op = advance();
      lhs = binary(op.text == "@" ? Expr::Kind::MatMul : Expr::Kind::ScalarMultiply, op.location, lhs, parse_unary());
    }
    return lhs;
  }
  // unary := '-' unary | postfix
  ExprPtr parse_unary() {
    if (at_punct("-")) {
      const Token& op = advance();
      const NestingGuard guard(*this, op);
      auto node = std::make_shared<Expr>();
      node->kind = Expr::Kind::Negate;
      node->location = op.location;
      node->lhs = parse_unary();
      return bounded(std::move(node));
    }
    return parse_postfix();
  }
  // postfix := primary ('.T')*
  ExprPtr parse_postfix() {
    ExprPtr value = parse_primary();
    while (at_punct(".T")) {
      const Token& op = advance();
      auto node = std::make_shared<Expr>();
      node->kind = Expr::Kind::Transpose;
      node->location = op.location;
      node->lhs = value;
      value = bounded(std::move(node));
    }
    return value;
  }
  // primary := NAME | NUMBER | '(' expression ')'
  ExprPtr parse_primary() {
    const Token& token = peek();
    auto node = std::make_shared<Expr>();
    node->location = token.location;
    if (token.kind == Token::Kind::Identifier) {
      advance();
      node->kind = Expr::Kind::Name;
      node->name = token.text;
      return node;
    }
    if (token.kind == Token::Kind::Number) {
      advance();
      node->kind = Expr::Kind::Number;
      node->number = token.number;
      return node;
    }
    if (accept_punct("(")) {
      const NestingGuard guard(*this, token);
      ExprPtr inner = parse_expression();
      expect_punct(")", "')' to close '(' at " + token.location.to_string());
      return inner;
    }
    fail(token, "an operand (a name such as X, A, a, I, a number, or '(')");
  }

  static ExprPtr binary(Expr::Kind kind, const SourceLocation& location, ExprPtr lhs, ExprPtr rhs) {
    auto node = std::make_shared<Expr>();
    node->kind = kind;
    node->location = location;
    node->lhs = std::move(lhs);
    node->rhs = std::move(rhs);
    return bounded(std::move(node));
  }

  // Expressions are walked recursively (lowering, printing, freeing the tree), so their depth is
  // bounded here, where a clear error can still be given: a chain of 200000 additions or 100000
  // nested negations overflowed the stack (found by fuzz_dsl). Real steps are a few levels deep.
  static constexpr int kMaxExpressionDepth = 256;

  static ExprPtr bounded(std::shared_ptr<Expr> node) {
    node->depth = 1 + std::max(node->lhs ? node->lhs->depth : 0, node->rhs ? node->rhs->depth : 0);
    if (node->depth > kMaxExpressionDepth)
      throw CompileError(node->location, "the expression nests more than " + std::to_string(kMaxExpressionDepth) +
                                             " levels of operators here; split it into several statements");
    return node;
  }

  // Bounds the parser's own recursion ('-' and '(' nest before any node is built).
  struct NestingGuard {
    NestingGuard(Parser& parser, const Token& at) : parser_(parser) {
      if (++parser_.nesting_ > kMaxExpressionDepth)
        throw CompileError(at.location, "the expression nests more than " + std::to_string(kMaxExpressionDepth) +
                                            " levels of '-' or parentheses here; split it into several statements");
    }
    ~NestingGuard() { --parser_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;
    Parser& parser_;
  };
  int nesting_ = 0;

  double parse_signed_number(const std::string& what) {
    double sign = 1.0;
    if (at_punct("-") || at_punct("+")) sign = advance().text == "-" ? -1.0 : 1.0;
    const Token& token = peek();
    if (token.kind != Token::Kind::Number) fail(token, what);
    advance();
    return sign * token.number;
  }

  const Token& expect_integer(const std::string& what) {
    const Token& token = peek();
    if (token.kind != Token::Kind::Number || token.number != std::floor(token.number) || token.number < 0 ||
        token.text.find_first_of(".eE") != std::string::npos || token.number > 1e6)
      fail(token, what + " (a non-negative integer)");
    return advance();
  }

  const Token& peek() const { return tokens_[position_]; }
  const Token& previous() const { return tokens_[position_ == 0 ? 0 : position_ - 1]; }
  const Token& advance() {
    const Token& token = tokens_[position_];
    if (token.kind != Token::Kind::End) ++position_;
    return token;
  }
  bool at_punct(std::string_view text) const { return peek().kind == Token::Kind::Punct && peek().text == text; }
  bool at_keyword(std::string_view text) const { return peek().kind == Token::Kind::Identifier && peek().text == text; }
  bool accept_punct(std::string_view text) {
    if (!at_punct(text)) return false;
    advance();
    return true;
  }
  void expect_punct(std::string_view text, const std::string& expected) {
    if (!accept_punct(text)) fail(peek(), expected);
  }
  void expect_keyword(std::string_view text, const std::string& expected) {
    if (!at_keyword(text)) fail(peek(), expected);
    advance();
  }
  const Token& expect_identifier(const std::string& expected) {
    if (peek().kind != Token::Kind::Identifier) fail(peek(), expected);
    return advance();
  }
  [[noreturn]] void fail(const Token& found, const std::string& expected) const {
    throw CompileError(found.location, "expected " + expected + ", found " + found.describe());
  }

  std::vector<Token> tokens_;
  size_t position_ = 0;
};

}  // namespace

Program parse_program(std::string_view text, const std::string& file_name) {
  return Parser(tokenize(text, file_name)).parse();
}

}  // namespace orthojit::dsl
