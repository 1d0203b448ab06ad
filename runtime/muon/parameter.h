// A parameter as the trainer owns it: the optimizer reads its gradient and updates its data in
// place, never copies or frees either. What the optimizer should do with it (Muon or AdamW, how a
// 3-D/4-D tensor becomes matrices, per-head or QKV split) is decided by the rules in
// parameter_tagging.h unless the trainer says so explicitly here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/scalar_type.h"

namespace orthojit::runtime {

enum class DType { F32, BF16, F16 };
const char* to_string(DType type);
std::optional<DType> parse_dtype(const std::string& text);  // "f32" | "bf16" | "f16" (also float32, bfloat16, float16)
int dtype_bytes(DType type);
// The compiler's name of the same storage type.
inline ScalarType scalar_type(DType type) { return type == DType::F32 ? ScalarType::F32 : type == DType::BF16 ? ScalarType::BF16 : ScalarType::F16; }

// How a tensor of 3 or more dimensions becomes matrices for Muon.
enum class MatrixLayout {
  Auto,      // the optimizer's setting (OptimizerSettings::tensor_layout)
  Flatten,   // (d0, d1·d2·…): one matrix (Moonlight's g.view(g.size(0), -1))
  Batch,     // d0 matrices of (d1, d2·…): experts, orthogonalized in one batched call
  Trailing,  // DeepSpeed's and Keller Jordan's muon_update: a 4-D conv filter is one (d0, d1·d2·d3)
             // matrix; any other tensor is a batch of its trailing (d[-2], d[-1]) matrices over the
             // leading dimensions (their batched Newton–Schulz works on the last two dims)
};
const char* to_string(MatrixLayout layout);
std::optional<MatrixLayout> parse_matrix_layout(const std::string& text);  // "auto" | "flatten" | "batch" (or "experts") | "trailing"

struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  void* data = nullptr;        // row-major, owned by the trainer, updated in place
  DType grad_dtype = DType::F32;
  const void* grad = nullptr;  // row-major, same shape; null: no gradient this step (skipped)
  bool requires_grad = true;   // false: not optimized at all

  // Explicit choices; unset = the rules.
  std::optional<bool> use_muon;
  MatrixLayout layout = MatrixLayout::Auto;
  // QKV split: the matrix's rows in consecutive blocks of these sizes (summing to the rows), each
  // orthogonalized on its own (e.g. {q, k, v} of a fused projection).
  std::vector<int64_t> row_splits;
  // Per-head split ("Muon Split"): each row block (the whole matrix, or each of row_splits) cut
  // into blocks of `head_rows` rows, each orthogonalized on its own. 0: no split.
  int64_t head_rows = 0;

  int64_t elements() const;
};

// A shape for messages: "(4, 6)".
std::string shape_text(const std::vector<int64_t>& shape);

}  // namespace orthojit::runtime
