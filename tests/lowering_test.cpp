// Lowering (semantic) tests: type and shape errors name the statement's line:column and say what
// was found and expected; the C++ builder produces the same IR as the DSL text.
#include <gtest/gtest.h>

#include "dsl/parser.h"
#include "dsl/program_builder.h"
#include "ir/lower_program.h"
#include "ir/printer.h"
#include "kernels/program_library.h"

namespace orthojit {
namespace {

std::string program_with_step(const std::string& step) {
  return "orthogonalizer t {\n  coefficients jordan repeat 2;\n  step {\n" + step + "  }\n}\n";
}

struct SemanticCase {
  const char* name;
  const char* step;  // lines 4.. of the program
  int line, column;
  const char* message_part;
};

const SemanticCase kSemantic[] = {
    {"unknown_name", "    X = a * X + B @ X;\n", 4, 17, "unknown name 'B'; names defined here: I, X, a, b, c"},
    {"inner_dimension_mismatch", "    A = X @ X;\n", 4, 11, "shapes do not match for '@': m x n @ m x n (inner dimensions n and m differ)"},
    {"sum_shape_mismatch", "    A = X @ X.T;\n    X = A + X;\n", 5, 11, "shapes do not match for '+': m x m and m x n"},
    {"matrix_times_matrix", "    A = X * X;\n", 4, 11, "'*' multiplies by a scalar, but both operands are matrices"},
    {"matmul_with_scalar", "    X = a @ X;\n", 4, 11, "'@' needs two matrices, found a scalar @ a matrix (m x n)"},
    {"scalar_plus_matrix", "    X = a + X;\n", 4, 11, "cannot add a scalar and a matrix (m x n)"},
    {"identity_plus_rectangular", "    X = X + I;\n", 4, 11, "of I and a m x n matrix: I is square"},
    {"x_changes_shape", "    X = X @ X.T;\n", 4, 5, "X must stay m x n across a step, but this statement gives m x m"},
    {"assigns_scalar", "    s = a * b;\n    X = X;\n", 4, 5, "'s' is assigned a scalar"},
    {"assigns_coefficient", "    a = X;\n", 4, 5, "cannot assign to the coefficient 'a'"},
    {"identity_alone", "    Z = 2 * I;\n    X = X;\n", 4, 5, "cannot infer the size of I"},
    {"never_assigns_x", "    A = X @ X.T;\n", 3, 3, "the step block never assigns X"},
    {"transpose_scalar", "    X = a.T * X;\n", 4, 10, "'.T' needs a matrix, found a scalar"},
};

void PrintTo(const SemanticCase& test, std::ostream* out) { *out << test.name; }

class SemanticError : public ::testing::TestWithParam<SemanticCase> {};

TEST_P(SemanticError, NamesTheStatement) {
  const SemanticCase& test = GetParam();
  try {
    ir::load_program(program_with_step(test.step), "t.oj");
    FAIL() << "no error";
  } catch (const CompileError& error) {
    EXPECT_EQ(error.location().file, "t.oj");
    EXPECT_EQ(error.location().line, test.line) << error.what();
    EXPECT_EQ(error.location().column, test.column) << error.what();
    EXPECT_NE(error.message().find(test.message_part), std::string::npos) << error.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SemanticError, ::testing::ValuesIn(kSemantic),
                         [](const ::testing::TestParamInfo<SemanticCase>& param_info) { return std::string(param_info.param.name); });

TEST(Lowering, UnrollsStepsWithConstantCoefficients) {
  const auto program = kernels::load_program_by_name_or_path("polar_express5");
  const ir::Function function = ir::lower_program(program);
  ASSERT_EQ(function.steps.size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    EXPECT_EQ(function.steps[k].triple, program.steps[k]);
    EXPECT_EQ(function.node(function.steps[k].output).shape.to_string(), "m x n");
  }
  // Step k's input is step k-1's output: one chain.
  for (size_t k = 1; k < 5; ++k) EXPECT_EQ(function.steps[k].input, function.steps[k - 1].output);
}

TEST(Lowering, IdentityFoldsIntoTheUser) {
  const auto program = ir::load_program(program_with_step("    A = X @ X.T;\n    Z = b * A + (a + 1) * I;\n    X = Z @ X;\n"));
  const ir::Function function = ir::lower_program(program);
  bool found = false;
  for (const auto& node : function.nodes)
    if (node.kind == ir::OpKind::LinComb && node.gamma != 0.0) {
      EXPECT_DOUBLE_EQ(node.gamma, 3.4445 + 1);
      found = true;
    }
  EXPECT_TRUE(found);
}

TEST(Builder, ProducesTheSameIrAsTheText) {
  using namespace dsl::build;
  const E A = name("A"), B = name("B");
  const dsl::Program built = dsl::ProgramBuilder("jordan_ns5")
                                 .precision({ScalarType::BF16, ScalarType::F32, ScalarType::F32})
                                 .normalize({1.0, 1e-7, dsl::Normalization::Mode::Add})
                                 .coefficients_named("jordan", 5)
                                 .let("A", X() & X().T())
                                 .let("B", b() * A + ((c() * A) & A))
                                 .let("X", a() * X() + (B & X()))
                                 .build();
  const dsl::Program parsed = kernels::load_program_by_name_or_path("jordan_ns5");
  EXPECT_EQ(built.steps, parsed.steps);
  EXPECT_EQ(built.gram_restarts, parsed.gram_restarts);
  // Same IR, node for node (the printer shows ops, operands, coefficients, shapes and names).
  EXPECT_EQ(ir::print_function(ir::lower_program(built)), ir::print_function(ir::lower_program(parsed)));
}

TEST(Builder, ReportsErrorsAtBuilder) {
  using namespace dsl::build;
  auto builder = dsl::ProgramBuilder("bad").coefficients({1.5, -0.5, 0.0}, 3).let("X", X() & X());
  try {
    ir::lower_program(builder.build());
    FAIL();
  } catch (const CompileError& error) {
    EXPECT_EQ(error.location().file, "<builder>");
    EXPECT_NE(error.message().find("shapes do not match for '@'"), std::string::npos);
  }
  EXPECT_THROW(dsl::ProgramBuilder("bad").coefficients_named("nope", 5), CompileError);
  EXPECT_THROW(dsl::ProgramBuilder("bad").coefficients_named("polar_express_5", 4), CompileError);
}

}  // namespace
}  // namespace orthojit
