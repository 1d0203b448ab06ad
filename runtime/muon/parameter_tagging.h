// Which parameters Muon takes, and as which matrices.
//
// Tagging rules (a preset property, OptimizerSettings::tagging):
//   deepspeed  Muon iff ndim >= 2 and the lower-cased name contains neither "embed" nor "lm_head"
//              (DeepSpeed's set_optimizer_flags, deepspeed/runtime/zero/muon/muon_optimizer.py;
//              also the keller and torch presets, whose sources leave tagging to the user)
//   moonlight  Muon iff ndim >= 2 and the name, case-sensitive, contains neither "embed_tokens"
//              nor "lm_head" (MoonshotAI/Moonlight examples/toy_train.py, get_optimizer): a
//              parameter named "embed.weight" goes to Muon there
// Only parameters that require gradients are optimized at all. An explicit Parameter::use_muon
// overrides the rule, but a Muon-tagged tensor with fewer than 2 dimensions is an error.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/muon/parameter.h"

namespace orthojit::runtime {

enum class TaggingRule { DeepSpeed, Moonlight };
const char* to_string(TaggingRule rule);
std::optional<TaggingRule> parse_tagging_rule(const std::string& text);  // "deepspeed" | "moonlight"

bool default_use_muon(const std::string& name, const std::vector<int64_t>& shape, TaggingRule rule = TaggingRule::DeepSpeed);

// Where the lr adjustment of a 4-D conv filter under MatrixLayout::Trailing comes from.
//   kernel  the 4-D tensor's last two dims, sqrt(max(1, kh/kw)): what DeepSpeed's and Keller
//           Jordan's muon_update compute (`update *= max(1, grad.size(-2) / grad.size(-1))**0.5`
//           on the 4-D gradient after viewing it as (out, in·kh·kw) for Newton–Schulz)
//   matrix  the (out, in·kh·kw) matrix that is orthogonalized (a documented departure)
enum class ConvScale { Kernel, Matrix };
const char* to_string(ConvScale scale);
std::optional<ConvScale> parse_conv_scale(const std::string& text);  // "kernel" | "matrix"

// A contiguous block of a parameter's matrix view that is orthogonalized on its own.
struct MatrixBlock {
  int64_t row_offset = 0, rows = 0;
};

// How Muon sees one parameter: `batch` matrices of rows x cols (experts), each cut into row
// blocks (QKV and per-head splits; one block covering all rows when there is no split).
struct MatrixPlan {
  int64_t batch = 1, rows = 0, cols = 0;
  std::vector<MatrixBlock> blocks;
  // When set (> 0), every block's lr adjustment is taken from this shape instead of the block's
  // own (rows, cols): ConvScale::Kernel on a 4-D filter.
  int64_t scale_rows = 0, scale_cols = 0;
};

// The (rows, cols) the lr adjustment of `block` is computed from.
std::pair<int64_t, int64_t> scale_shape(const MatrixPlan& plan, const MatrixBlock& block);

// How Muon sees a parameter. `layout` is used where the parameter's own layout is Auto; a 2-D
// parameter is one matrix under every layout. Throws std::invalid_argument naming the
// parameter: a Muon tensor with ndim < 2, row splits that do not sum to the rows, a head size
// that does not divide a block, a zero dimension.
MatrixPlan plan_matrices(const Parameter& parameter, MatrixLayout layout, ConvScale conv_scale = ConvScale::Kernel);

}  // namespace orthojit::runtime
