// Parser tests: every shipped program parses and lowers; malformed programs report the exact
// line:column and say what was found and what was expected.
#include <gtest/gtest.h>

#include <string>

#include "dsl/parser.h"
#include "ir/lower_program.h"
#include "kernels/program_library.h"

namespace orthojit {
namespace {

TEST(Parser, EveryShippedProgramLoads) {
  ASSERT_GE(kernels::shipped_programs().size(), 8u);
  for (const auto& shipped : kernels::shipped_programs()) {
    SCOPED_TRACE(std::string(shipped.name));
    const dsl::Program program = ir::load_program(shipped.source, std::string(shipped.path));
    EXPECT_EQ(program.name, shipped.name);  // file name and program name agree
    EXPECT_FALSE(program.steps.empty());
    EXPECT_FALSE(program.step_body.empty());
  }
}

TEST(Parser, ShippedCoefficientsAreThePublishedOnes) {
  const auto jordan = kernels::load_program_by_name_or_path("jordan_ns5");
  ASSERT_EQ(jordan.steps.size(), 5u);
  for (const auto& t : jordan.steps) EXPECT_EQ(t, (dsl::Triple{3.4445, -4.7750, 2.0315}));
  EXPECT_EQ(jordan.policy.storage, ScalarType::BF16);
  EXPECT_DOUBLE_EQ(jordan.normalization.eps, 1e-7);

  const auto polar = kernels::load_program_by_name_or_path("polar_express5");
  ASSERT_EQ(polar.steps.size(), 5u);
  EXPECT_EQ(polar.steps[0], (dsl::Triple{8.156554524902461, -22.48329292557795, 15.878769915207462}));
  EXPECT_EQ(polar.steps[4], (dsl::Triple{2.3465413258596377, -1.7097828382687081, 0.42323551169305323}));
  EXPECT_DOUBLE_EQ(polar.normalization.safety, 1.02);
  EXPECT_DOUBLE_EQ(polar.normalization.eps, 1e-6);

  const auto deepseek = kernels::load_program_by_name_or_path("deepseek_v4");
  ASSERT_EQ(deepseek.steps.size(), 10u);
  EXPECT_EQ(deepseek.steps[7], (dsl::Triple{3.4445, -4.7750, 2.0315}));
  EXPECT_EQ(deepseek.steps[8], (dsl::Triple{2.0, -1.5, 0.5}));
  EXPECT_EQ(deepseek.steps[9], (dsl::Triple{2.0, -1.5, 0.5}));

  // Safety scaling (a/s, b/s^3, c/s^5).
  const auto gram = kernels::load_program_by_name_or_path("gram_polar_express5");
  EXPECT_EQ(gram.policy.storage, ScalarType::F16);
  EXPECT_DOUBLE_EQ(gram.steps[1].a, 4.042929935166739 / 1.05);
  EXPECT_DOUBLE_EQ(gram.steps[1].b, -2.808917465908714 / (1.05 * 1.05 * 1.05));
  EXPECT_DOUBLE_EQ(gram.steps[1].c, 0.5000178451051316 / (1.05 * 1.05 * 1.05 * 1.05 * 1.05));
}

TEST(Parser, ScheduleForms) {
  const std::string body = " step { A = X @ X.T; X = a * X + b * A @ X + c * A @ A @ X; } }";
  auto table = dsl::parse_program("orthogonalizer t { coefficients [ (1, 2, 3), (4, 5, 6), ]; steps 2;" + body);
  ASSERT_EQ(table.steps.size(), 2u);
  EXPECT_EQ(table.steps[1], (dsl::Triple{4, 5, 6}));
  auto repeated = dsl::parse_program("orthogonalizer t { coefficients (1.5, -0.5, 0) repeat 3;" + body);
  EXPECT_EQ(repeated.steps.size(), 3u);
  auto stepped = dsl::parse_program("orthogonalizer t { steps 4; coefficients classical;" + body);
  EXPECT_EQ(stepped.steps.size(), 4u);
  auto scaled = dsl::parse_program("orthogonalizer t { coefficients (2, -1, 0.5) repeat 1 scaled 2;" + body);
  EXPECT_EQ(scaled.steps[0], (dsl::Triple{1.0, -0.125, 0.5 / 32}));
  auto comments = dsl::parse_program("// a comment\northogonalizer t { # another\n coefficients jordan repeat 2; // trailing\n" + body);
  EXPECT_EQ(comments.steps.size(), 2u);
}

struct Malformed {
  const char* name;
  const char* text;
  int line, column;
  const char* message_part;
};

// Each case: the program, and the exact line:column the error must name.
const Malformed kMalformed[] = {
    {"missing_header", "program x {}", 1, 1, "expected the program header 'orthogonalizer NAME {', found 'program'"},
    {"missing_name", "orthogonalizer {", 1, 16, "expected the program name, found '{'"},
    {"unknown_section", "orthogonalizer x {\n  precisionn { }\n}", 2, 3, "found 'precisionn'"},
    {"unknown_type", "orthogonalizer x {\n  precision { storage = bf8; }\n}", 2, 25, "unknown type 'bf8'; expected bf16, f16, f32 or f64"},
    {"narrow_accumulate", "orthogonalizer x {\n  precision { accumulate = bf16; }\n}", 2, 28, "the accumulate type must be f32 or f64, found bf16"},
    {"missing_semicolon_in_precision", "orthogonalizer x {\n  precision { storage = bf16 }\n}", 2, 30, "expected ';' after the storage type, found '}'"},
    {"bad_normalize_argument", "orthogonalizer x {\n  normalize frobenius(safety = 1.0, epsilon = 1e-7);\n}", 2, 37,
     "unknown normalization argument 'epsilon'"},
    {"negative_eps", "orthogonalizer x {\n  normalize frobenius(eps = -1e-7);\n}", 2, 29, "eps must be a positive finite number"},
    {"aol_with_safety", "orthogonalizer x {\n  normalize aol(safety = 1.02);\n}", 2, 17,
     "unknown aol argument 'safety'; aol takes only 'eps'"},
    {"unknown_norm", "orthogonalizer x {\n  normalize spectral();\n}", 2, 13, "unknown normalization 'spectral'; expected 'frobenius' or 'aol'"},
    {"unknown_set", "orthogonalizer x {\n  coefficients jordann repeat 5;\n}", 2, 16, "unknown coefficient set 'jordann'; expected one of: jordan,"},
    {"triple_with_two_numbers", "orthogonalizer x {\n  coefficients (3.4445, -4.7750) repeat 5;\n}", 2, 32,
     "expected ',' after b; a triple has three coefficients (a, b, c), found ')'"},
    {"table_length_mismatch", "orthogonalizer x {\n  steps 5;\n  coefficients [(1,2,3), (4,5,6), (7,8,9), (1,1,1)];\n  step { X = X; }\n}", 3, 16,
     "the coefficient table has 4 triples but the program declares 'steps 5;'"},
    {"repeat_on_table", "orthogonalizer x {\n  coefficients polar_express_5 repeat 5;\n}", 2, 32, "'repeat' applies to a single triple, but this schedule has 5 triples"},
    {"no_step_count", "orthogonalizer x {\n  coefficients (1, 2, 3);\n  step { X = X; }\n}", 2, 16, "the schedule has a single triple and no step count"},
    {"missing_semicolon_in_step", "orthogonalizer x {\n  coefficients jordan repeat 5;\n  step {\n    A = X @ X.T\n    X = a * X;\n  }\n}", 5, 5,
     "expected ';' or an operator (+ - * @ .T) after the expression, found 'X'"},
    {"dangling_operator", "orthogonalizer x {\n  coefficients jordan repeat 5;\n  step {\n    X = a * X + ;\n  }\n}", 4, 17,
     "expected an operand (a name such as X, A, a, I, a number, or '('), found ';'"},
    {"unbalanced_parenthesis", "orthogonalizer x {\n  coefficients jordan repeat 5;\n  step {\n    X = (a * X;\n  }\n}", 4, 15, "expected ')' to close '(' at"},
    {"bad_character", "orthogonalizer x {\n  coefficients jordan repeat 5;\n  step {\n    X = a * X $ X;\n  }\n}", 4, 15, "unexpected character '$'"},
    // A pasted UTF-8 '×' (0xc3 0x97): the byte in hexadecimal.
    {"non_ascii_byte", "orthogonalizer x {\n  coefficients jordan repeat 5;\n  step {\n    X = a * X \xc3\x97 X;\n  }\n}", 4, 15, "unexpected character '\\xc3'"},
    {"duplicate_section", "orthogonalizer x {\n  coefficients jordan repeat 5;\n  coefficients jordan repeat 3;\n}", 3, 3,
     "duplicate 'coefficients' section; the first one is at <string>:2:3"},
    {"missing_step_block", "orthogonalizer x {\n  coefficients jordan repeat 5;\n}", 3, 1, "program 'x' has no 'step { ... }' block"},
    {"missing_coefficients", "orthogonalizer x {\n  step { X = X; }\n}", 3, 1, "program 'x' has no 'coefficients' section"},
    {"restart_out_of_range", "orthogonalizer x {\n  coefficients jordan repeat 3;\n  gram_restarts [3];\n  step { X = X; }\n}", 3, 3,
     "gram restart at step 3 is outside 1..2"},
    {"trailing_text", "orthogonalizer x {\n  coefficients jordan repeat 2;\n  step { X = X; }\n}\nextra", 5, 1, "expected end of file"},
    {"number_glued_to_name", "orthogonalizer x {\n  coefficients jordan repeat 2;\n  step { X = 2X; }\n}", 3, 15, "unexpected 'X' right after number 2"},
    // 1e400 was read as an infinity: every output NaN, exit status 0.
    {"number_beyond_double", "orthogonalizer x {\n  coefficients (1e400, -4.775, 2.0315) repeat 2;\n  step { X = X; }\n}", 2, 17,
     "number 1e400 is beyond the range of a double"},
    {"step_number_beyond_double", "orthogonalizer x {\n  coefficients jordan repeat 2;\n  step { X = 1e400 * X; }\n}", 3, 14,
     "number 1e400 is beyond the range of a double"},
    {"empty_step", "orthogonalizer x {\n  coefficients jordan repeat 2;\n  step { }\n}", 3, 10, "the step block is empty"},
    {"safety_below_one", "orthogonalizer x {\n  coefficients jordan repeat 2 scaled 0.9;\n}", 2, 39, "safety factor must be a finite number >= 1, found 0.9"},
};

// Names the case in ctest's output instead of a byte dump.
void PrintTo(const Malformed& test, std::ostream* out) { *out << test.name; }

class MalformedProgram : public ::testing::TestWithParam<Malformed> {};

TEST_P(MalformedProgram, ReportsExactLocation) {
  const Malformed& test = GetParam();
  try {
    ir::load_program(test.text, "<string>");
    FAIL() << "no error for " << test.name;
  } catch (const CompileError& error) {
    EXPECT_EQ(error.location().file, "<string>");
    EXPECT_EQ(error.location().line, test.line) << error.what();
    EXPECT_EQ(error.location().column, test.column) << error.what();
    EXPECT_NE(error.message().find(test.message_part), std::string::npos) << "message: " << error.what();
    const std::string where = "<string>:" + std::to_string(test.line) + ":" + std::to_string(test.column) + ": error: ";
    EXPECT_EQ(std::string(error.what()).rfind(where, 0), 0u) << error.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, MalformedProgram, ::testing::ValuesIn(kMalformed),
                         [](const ::testing::TestParamInfo<Malformed>& param_info) { return std::string(param_info.param.name); });

// Expressions are walked recursively after parsing, so the parser bounds their depth (256) with
// an error instead of a stack overflow (fuzz_dsl found one: 4000 nested negations under ASan;
// 100000, or a chain of 200000 additions, crashed the release CLI).
TEST(Parser, BoundsTheDepthOfExpressions) {
  auto program = [](const std::string& expression) {
    return "orthogonalizer x {\n  coefficients jordan repeat 1;\n  step {\n    X = " + expression + ";\n  }\n}";
  };
  auto chain = [](int terms) {
    std::string text = "X";
    for (int i = 1; i < terms; ++i) text += " + X";
    return text;
  };
  auto error_of = [&](const std::string& expression) -> std::string {
    try {
      ir::load_program(program(expression), "<string>");
    } catch (const CompileError& error) {
      return error.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(chain(256)), "");  // 255 additions: 256 levels
  // the 256th "+" (column 11 + 4·255) makes the 257th level
  EXPECT_NE(error_of(chain(257)).find("<string>:4:1031: error: the expression nests more than 256 levels of operators here"), std::string::npos)
      << error_of(chain(257));
  EXPECT_NE(error_of(chain(200000)).find("nests more than 256 levels of operators"), std::string::npos);
  EXPECT_EQ(error_of(std::string(255, '-') + "X"), "");
  EXPECT_NE(error_of(std::string(100000, '-') + "X").find("levels of '-' or parentheses"), std::string::npos);
  EXPECT_NE(error_of(std::string(100000, '(') + "X" + std::string(100000, ')')).find("levels of '-' or parentheses"), std::string::npos);
  std::string transposes = "X";
  for (int i = 0; i < 300; ++i) transposes += ".T";
  EXPECT_NE(error_of(transposes).find("levels of operators"), std::string::npos);
}

TEST(Parser, NeverCrashesOnTruncations) {
  // Every prefix of a valid program is either valid or a CompileError, never anything else.
  const std::string text(kernels::find_shipped_program("polar_express5")->source);
  for (size_t length = 0; length < text.size(); ++length) {
    try {
      ir::load_program(text.substr(0, length));
    } catch (const CompileError&) {
    }
  }
}

}  // namespace
}  // namespace orthojit
