// CUDA C++ generation (see cuda_codegen.h).
#include "cuda/cuda_codegen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "cuda/codegen_vocabulary.h"
#include "cuda/elementwise_codegen.h"
#include "cuda/hopper_codegen.h"
#include "cuda/mma_product_codegen.h"
#include "cuda/orthojit_hopper_layout.cuh"

namespace orthojit::cuda {
namespace {

// Shared prologue of the element-wise kernels: z, the element index range of this thread.
std::string elementwise_loop(int64_t rows, int64_t cols) {
  std::ostringstream out;
  out << "  const long long z = blockIdx.z;\n"
      << "  constexpr long long ROWS = " << ll(rows) << ", COLS = " << ll(cols) << ";\n"
      << "  for (long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < ROWS * COLS;"
      << " e += static_cast<long long>(gridDim.x) * blockDim.x) {\n"
      << "    const long long i = e / COLS, j = e % COLS;\n";
  return out.str();
}

std::string element(const View& view, const std::string& pointer) {
  return pointer + "[z * " + ll(view.matrix_stride) + " + i * " + ll(view.row_stride) + " + j * " + ll(view.col_stride) + "]";
}

int64_t elementwise_blocks(int64_t elements) { return std::clamp<int64_t>((elements + 1023) / 1024, 1, 4096); }

// The norm's scale (ir/norm_scale.h) at the start of a normalize kernel: thread 0 takes the
// largest |x| of the matrix from the per-block maxima at `max_offset` and every thread reads
// oj::norm_scale of it as `scale`.
std::string normalize_scale(const ir::Node& node, int64_t blocks, int64_t max_offset) {
  const char* acc = node.norm_type == ScalarType::F64 ? "double" : "float";
  std::ostringstream code;
  code << "  __shared__ float scale_shared;\n"
       << "  if (threadIdx.x == 0) {\n"
       << "    " << acc << " largest = 0;\n"
       << "    for (int b = 0; b < " << blocks << "; ++b) largest = fmax(largest, partials[" << ll(max_offset) << " + blockIdx.z * " << ll(blocks) << " + b]);\n"
       << "    scale_shared = oj::norm_scale(largest);\n"
       << "  }\n  __syncthreads();\n  const float scale = scale_shared;\n";
  return code.str();
}

// The start of a normalize's last kernel: thread 0 sums the matrix's partials in block order
// (the same in every block: deterministic), forms the denominator of the scaled values in the
// norm type (‖x·s‖·safety + eps·s: the unscaled one times s), and every thread reads it as
// `denominator`, with `scale`.
std::string normalize_denominator(const ir::Node& node, int64_t blocks, int64_t partial_offset, int64_t max_offset) {
  const bool f64 = node.norm_type == ScalarType::F64;
  const char* acc = f64 ? "double" : "float";
  const dsl::Normalization& norm = node.normalization;
  std::ostringstream code;
  code << normalize_scale(node, blocks, max_offset)
       << "  __shared__ float denominator_shared;\n"
       << "  if (threadIdx.x == 0) {\n"
       << "    " << acc << " total = 0;\n"
       << "    for (int b = 0; b < " << blocks << "; ++b) total += partials[" << ll(partial_offset) << " + blockIdx.z * " << ll(blocks) << " + b];\n"
       << "    const " << acc << " norm = sqrt(total) * (" << acc << ")" << accumulator_literal(norm.safety, f64) << ";\n"
       << "    const " << acc << " eps = (" << acc << ")" << accumulator_literal(norm.eps, f64) << " * scale;\n"
       << "    denominator_shared = (float)(" << (norm.mode == dsl::Normalization::Mode::Add ? rounded_add("norm", "eps", f64) : "(norm > eps ? norm : eps)") << ");\n"
       << "  }\n  __syncthreads();\n  const float denominator = denominator_shared;\n";
  return code.str();
}

// A Muon step's normalize with the momentum fused in (fuse_update_rules.cpp): `g` is the
// gradient's view (one pointer per matrix: z does not move it); M lies like g. The first kernel
// computes M and U, writes M and takes U's largest |value| per block; the second recomputes U from
// g and the new M (the same bits) and reduces the squares of U·scale per block; the third sums the
// partials, recomputes U and stores U·scale / denominator in X's type.
void emit_momentum_normalize(std::ostringstream& source, CudaProgram& program, const ir::Node& node, size_t index, const View& g, const View& out,
                             int64_t& partials, int64_t batch) {
  const std::string name = "normalize_" + std::to_string(index);
  const bool f64 = node.norm_type == ScalarType::F64;
  const char* acc = f64 ? "double" : "float";
  const int64_t rows = node.shape.rows.size, cols = node.shape.cols.size, elements = rows * cols;
  const int64_t blocks = std::clamp<int64_t>((elements + 2047) / 2048, 1, 256);
  const int64_t partial_offset = partials, max_offset = partials + blocks * batch;
  partials += 2 * blocks * batch;
  const std::string offset = "    const long long off = i * " + ll(g.row_stride) + " + j * " + ll(g.col_stride) + ";\n";
  // Inside the element loop (z is defined there); loop-invariant, so hoisted by the compiler.
  const std::string pointers = "    const oj::u64* io = args + z * " + std::to_string(ir::kMuonStepWords) +
                               ";\n    const grad_elem* g = reinterpret_cast<const grad_elem*>(io[0]);\n"
                               "    float* m = reinterpret_cast<float*>(io[1]);\n    const double beta = oj::f64_from_bits(io[3]);\n";
  source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "_max(const oj::u64* __restrict__ args, " << acc
         << "* __restrict__ partials) {\n"
         << "  __shared__ " << acc << " scratch[256];\n  " << acc << " largest = 0;\n"
         << elementwise_loop(rows, cols) << pointers << offset
         << "    const double gi = static_cast<double>(static_cast<float>(grad_load(g[off])));\n"
         << "    const float next = oj_momentum_next(gi, m[off], beta);\n    m[off] = next;\n"
         << "    largest = fmax(largest, (" << acc << ")fabsf(oj_update_value(gi, next, beta)));\n  }\n"
         << "  largest = oj::block_max<" << acc << ", 256>(largest, scratch);\n"
         << "  if (threadIdx.x == 0) partials[" << ll(max_offset) << " + z * " << ll(blocks) << " + blockIdx.x] = largest;\n}\n\n";
  program.launches.push_back({name + "_max", {blocks, 1, batch}, 256, 256 * (f64 ? 8 : 4), {{Slot::Kind::StepArgs, -1}, {Slot::Kind::NormPartials, -1}},
                              "normalize %" + std::to_string(index) + " with the Muon momentum: M, U and its largest values"});
  source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "_partial(const oj::u64* __restrict__ args, " << acc
         << "* __restrict__ partials) {\n"
         << normalize_scale(node, blocks, max_offset)
         << "  __shared__ " << acc << " scratch[256];\n  " << acc << " sum = 0;\n"
         << elementwise_loop(rows, cols) << pointers << offset
         << "    const double gi = static_cast<double>(static_cast<float>(grad_load(g[off])));\n"
         << "    const " << acc << " v = oj_update_value(gi, m[off], beta) * scale;\n    sum = " << rounded_add_product("sum", "v", "v", f64) << ";\n  }\n"
         << "  sum = oj::block_sum<" << acc << ", 256>(sum, scratch);\n"
         << "  if (threadIdx.x == 0) partials[" << ll(partial_offset) << " + z * " << ll(blocks) << " + blockIdx.x] = sum;\n}\n\n";
  program.launches.push_back({name + "_partial", {blocks, 1, batch}, 256, 256 * (f64 ? 8 : 4), {{Slot::Kind::StepArgs, -1}, {Slot::Kind::NormPartials, -1}},
                              "normalize %" + std::to_string(index) + " with the Muon momentum: U recomputed, sums of scaled squares"});
  source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "_scale(const oj::u64* __restrict__ args, const " << acc
         << "* __restrict__ partials, " << storage_tag(node.type) << "::storage* __restrict__ out) {\n"
         << normalize_denominator(node, blocks, partial_offset, max_offset)
         << elementwise_loop(rows, cols) << pointers << offset
         << "    const double gi = static_cast<double>(static_cast<float>(grad_load(g[off])));\n"
         << "    " << element(out, "out") << " = " << storage_tag(node.type) << "::store(oj_update_value(gi, m[off], beta) * scale / denominator);\n  }\n}\n\n";
  program.launches.push_back({name + "_scale", {elementwise_blocks(elements), 1, batch}, 256, 8,
                              {{Slot::Kind::StepArgs, -1}, {Slot::Kind::NormPartials, -1}, out.slot},
                              "normalize %" + std::to_string(index) + " with the Muon momentum: U recomputed, scaled and cast"});
}

}  // namespace

std::string TileConfig::label() const {
  if (sm90a) return bn == sm90a_wide_tile().bn ? "sm90a/n256" : splits > 1 ? "sm90a/k" + std::to_string(splits) : "sm90a";
  return std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk) + "/" + std::to_string(warps_m) + "x" + std::to_string(warps_n);
}

std::string TileConfig::invalid_reason() const {
  if (sm90a) {
    if (bm != sm90a_tile().bm || (bn != sm90a_tile().bn && bn != sm90a_wide_tile().bn) || bk != sm90a_tile().bk)
      return "the sm_90a tile is 128x128x64 (sm90a_tile()) or 128x256x64 (sm90a_wide_tile())";
    if (bn == sm90a_wide_tile().bn && splits != 1) return "the 128x256 sm_90a tile does not split K";
    if (splits < 1 || splits > kMaxSplits) return "split-K takes 1 to " + std::to_string(kMaxSplits) + " splits, not " + std::to_string(splits);
    return "";
  }
  if (splits != 1) return "split-K runs on the sm_90a tile only";
  if (bm <= 0 || bn <= 0 || bk <= 0 || warps_m <= 0 || warps_n <= 0) return "tile sizes and warp counts must be positive";
  if (bk % 16 != 0) return "BK must be a multiple of 16 (the MMA's k)";
  if (bm % (16 * warps_m) != 0) return "BM must be a multiple of 16·warps_m (the warp tile's rows are whole 16-row MMAs)";
  if (bn % (8 * warps_n) != 0) return "BN must be a multiple of 8·warps_n (the warp tile's columns are whole 8-column MMAs)";
  if (threads() > 1024) return "more than 1024 threads per CTA";
  if (shared_bytes() > 48 * 1024) return "static shared memory above 48 KiB";
  const int fragments = (bm / warps_m / 16) * (bn / warps_n / 8);
  if (fragments * 4 > 128) return "more than 128 accumulator registers per thread (spills)";
  return "";
}

TileConfig sm90a_wide_tile() {
  TileConfig tile = sm90a_tile();
  tile.bn = static_cast<int>(oj::hopper::kWideTileN);
  return tile;
}

TileConfig sm90a_tile(int splits) {
  namespace h = oj::hopper;
  TileConfig tile{static_cast<int>(h::kTileM), static_cast<int>(h::kTileN), static_cast<int>(h::kTileK), 3, 4};
  tile.sm90a = true;
  tile.splits = splits;
  return tile;
}

std::vector<TileConfig> tile_configs() {
  return {{128, 128, 32, 2, 4}, {64, 64, 32, 2, 2}, {128, 64, 32, 2, 2}, {64, 128, 32, 2, 2}, {128, 128, 64, 2, 4}, {32, 32, 32, 1, 2}};
}

TileConfig default_tile_config(int64_t m, int64_t n, bool triangular, int64_t batch, int multiprocessors) {
  const TileConfig small{64, 64, 32, 2, 2}, large{128, 128, 32, 2, 4};
  if (m * n <= 512 * 512) return small;
  const int64_t tiles_m = (m + large.bm - 1) / large.bm, tiles_n = (n + large.bn - 1) / large.bn;
  const int64_t ctas = (triangular ? tiles_m * (tiles_m + 1) / 2 : tiles_m * tiles_n) * batch;
  return ctas >= multiprocessors ? large : small;
}

CudaProgram generate_cuda(const ir::Function& function, const CodegenOptions& options) {
  if (function.buffers.empty() && function.nodes.size() > 2) throw std::invalid_argument("cuda backend: the IR has no buffer plan (run every pass first)");
  CudaProgram program;
  program.batch = function.batch;
  program.input_elements = function.input_shape.elements();
  for (const auto& buffer : function.buffers) program.buffer_bytes.push_back(buffer.elements * static_cast<int64_t>(size_in_bytes(buffer.type)) * function.batch);

  std::ostringstream source;
  source << "// Generated by orthojit from the scheduled IR of '" << function.name << "' (" << function.input_shape.to_string() << " x "
         << function.batch << ", " << ir::to_string(function.strategy.kind) << ").\n"
         << "#include \"orthojit_device.cuh\"\n\n";
  const std::optional<ir::MuonStepSpec>& muon = function.muon_step;
  // Per node: the fused update it carries in its epilogue (the node making the last X), with the
  // parameter's strides in this node's frame (the user's row-major matrix, transposed when the
  // update reads the last X through the orientation's transpose).
  std::vector<bool> carries_update(function.nodes.size(), false);
  int64_t param_row_stride = 0, param_col_stride = 0;
  if (muon) {
    program.muon_step = true;
    program.step_args_bytes = function.batch * ir::kMuonStepWords * 8;
    source << "// Muon step: " << muon->describe() << "\n"
           << storage_access_functions("grad", muon->grad, "the gradient") << storage_access_functions("param", muon->param, "the parameter")
           << muon_device_functions(muon->ema, muon->nesterov) << "\n";
    for (const ir::Node& node : function.nodes) {
      if (node.kind != ir::OpKind::Update || !node.fused) continue;
      ir::NodeId root = node.operands[0];
      bool transposed = false;
      while (function.node(root).kind == ir::OpKind::Transpose) {
        transposed = !transposed;
        root = function.node(root).operands[0];
      }
      carries_update[static_cast<size_t>(root)] = true;
      param_row_stride = transposed ? 1 : function.input_shape.cols.size;
      param_col_stride = transposed ? function.input_shape.cols.size : 1;
    }
  }
  // Statements that write value `v` (f32, already in the producer's arithmetic) of element (i, j)
  // of the last X into the parameter, rounded to X's storage type first (what an orthogonalizer's
  // output would hold); `io` points at the matrix's argument words.
  auto update_store = [&](const ir::Node& node, const std::string& indent) {
    std::ostringstream code;
    code << indent << "const float o = " << storage_tag(node.type) << "::load(" << storage_tag(node.type) << "::store(v));\n"
         << indent << "param_elem* p = reinterpret_cast<param_elem*>(io[2]);\n"
         << indent << "const long long pi = static_cast<long long>(i) * " << ll(param_row_stride) << " + static_cast<long long>(j) * "
         << ll(param_col_stride) << ";\n"
         << indent << "p[pi] = param_store(oj_parameter_next(param_load(p[pi]), oj::f64_from_bits(io[5]), oj::f64_from_bits(io[4]), o));\n";
    return code.str();
  };
  if (muon) source << "typedef " << storage_element_type(muon->param) << " param_elem;\ntypedef " << storage_element_type(muon->grad) << " grad_elem;\n\n";
  std::vector<View> views(function.nodes.size());
  int gemm_index = 0;
  int64_t partials = 0;
  int workspace_buffer = -1;  // split-K's f32 partials (one buffer, as large as the largest product needs)
  for (size_t index = 0; index < function.nodes.size(); ++index) {
    const ir::Node& node = function.nodes[index];
    const int64_t rows = node.shape.rows.size, cols = node.shape.cols.size;
    View& out = views[index];
    out.rows = rows;
    out.cols = cols;
    out.row_stride = cols;
    out.col_stride = 1;
    out.matrix_stride = rows * cols;
    out.type = node.type;
    if (node.buffer >= 0) {
      out.slot = {Slot::Kind::Buffer, node.buffer};
      out.matrix_stride = function.buffers[static_cast<size_t>(node.buffer)].elements;
    }
    const std::string name = std::string(ir::to_string(node.kind)) + "_" + std::to_string(index);
    auto operand = [&](size_t k) -> const View& { return views[static_cast<size_t>(node.operands[k])]; };
    auto pointer_type = [](const View& view) { return std::string("const ") + storage_tag(view.type) + "::storage*"; };
    switch (node.kind) {
      case ir::OpKind::Input:
        if (muon) {  // the gradient, one pointer per matrix in the argument block
          out.slot = {Slot::Kind::StepArgs, -1};
          out.matrix_stride = 0;
          break;
        }
        out.slot = {Slot::Kind::Input, -1};
        out.type = ScalarType::F32;
        out.matrix_stride = rows * cols;
        break;
      case ir::OpKind::Momentum:
        if (!node.fused) throw std::invalid_argument("cuda backend: a Muon step's momentum must be fused into its normalize (run fuse_update_rules)");
        out = operand(0);  // its normalize reads g, and M laid out like g, through this view
        break;
      case ir::OpKind::Update: {
        if (node.fused) break;  // in the epilogue of the op that makes the last X
        const View& x = operand(0);
        source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "(" << pointer_type(x) << " __restrict__ x, const oj::u64* __restrict__ args) {\n"
               << elementwise_loop(rows, cols) << "    const oj::u64* io = args + z * " << ir::kMuonStepWords << ";\n"
               << "    param_elem* p = reinterpret_cast<param_elem*>(io[2]);\n"
               << "    const float o = " << storage_tag(x.type) << "::load(" << element(x, "x") << ");\n"
               << "    p[e] = param_store(oj_parameter_next(param_load(p[e]), oj::f64_from_bits(io[5]), oj::f64_from_bits(io[4]), o));\n  }\n}\n\n";
        program.launches.push_back({name, {elementwise_blocks(rows * cols), 1, function.batch}, 256, 0, {x.slot, {Slot::Kind::StepArgs, -1}},
                                    "update %" + std::to_string(index)});
        break;
      }
      case ir::OpKind::Transpose: out = operand(0).transposed(); break;
      case ir::OpKind::Normalize: {
        if (node.normalization.kind == dsl::Normalization::Kind::Aol)
          throw std::invalid_argument("cuda backend: the program normalizes with AOL (normalize aol), which the generated kernels do not implement; run it on the cpu or ref backend");
        const View& x = operand(0);
        if (function.node(node.operands[0]).kind == ir::OpKind::Momentum) {
          emit_momentum_normalize(source, program, node, index, x, out, partials, function.batch);
          break;
        }
        const bool f64 = node.norm_type == ScalarType::F64;
        const char* acc = f64 ? "double" : "float";
        const int64_t elements = rows * cols;
        const int64_t blocks = std::clamp<int64_t>((elements + 2047) / 2048, 1, 256);
        const int64_t partial_offset = partials, max_offset = partials + blocks * function.batch;
        partials += 2 * blocks * function.batch;
        // Pass 1: the largest |x| per block (the norm's scale, ir/norm_scale.h).
        source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "_max(" << pointer_type(x) << " __restrict__ x, " << acc
               << "* __restrict__ partials) {\n"
               << "  __shared__ " << acc << " scratch[256];\n"
               << "  " << acc << " largest = 0;\n"
               << elementwise_loop(rows, cols) << "    largest = fmax(largest, (" << acc << ")fabsf(" << storage_tag(x.type) << "::load(" << element(x, "x")
               << ")));\n  }\n"
               << "  largest = oj::block_max<" << acc << ", 256>(largest, scratch);\n"
               << "  if (threadIdx.x == 0) partials[" << ll(max_offset) << " + z * " << ll(blocks) << " + blockIdx.x] = largest;\n}\n\n";
        program.launches.push_back({name + "_max", {blocks, 1, function.batch}, 256, 256 * (f64 ? 8 : 4), {x.slot, {Slot::Kind::NormPartials, -1}},
                                    "normalize %" + std::to_string(index) + " largest values"});
        // Pass 2: partial sums of the scaled squares, one per block, fixed order.
        source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "_partial(" << pointer_type(x) << " __restrict__ x, " << acc
               << "* __restrict__ partials) {\n"
               << normalize_scale(node, blocks, max_offset)
               << "  __shared__ " << acc << " scratch[256];\n"
               << "  " << acc << " sum = 0;\n"
               << elementwise_loop(rows, cols) << "    const " << acc << " v = " << storage_tag(x.type) << "::load(" << element(x, "x") << ") * scale;\n"
               << "    sum = " << rounded_add_product("sum", "v", "v", f64) << ";\n  }\n"
               << "  sum = oj::block_sum<" << acc << ", 256>(sum, scratch);\n"
               << "  if (threadIdx.x == 0) partials[" << ll(partial_offset) << " + z * " << ll(blocks) << " + blockIdx.x] = sum;\n}\n\n";
        program.launches.push_back({name + "_partial", {blocks, 1, function.batch}, 256, 256 * (f64 ? 8 : 4), {x.slot, {Slot::Kind::NormPartials, -1}},
                                    "normalize %" + std::to_string(index) + " sums of squares"});
        // Pass 3: every block sums the partials in the same order, then scales and casts.
        source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "_scale(" << pointer_type(x) << " __restrict__ x, const " << acc
               << "* __restrict__ partials, " << storage_tag(node.type) << "::storage* __restrict__ out) {\n"
               << normalize_denominator(node, blocks, partial_offset, max_offset)
               << elementwise_loop(rows, cols) << "    " << element(out, "out") << " = " << storage_tag(node.type) << "::store(" << storage_tag(x.type)
               << "::load(" << element(x, "x") << ") * scale / denominator);\n  }\n}\n\n";
        program.launches.push_back({name + "_scale", {elementwise_blocks(elements), 1, function.batch}, 256, 8,
                                    {x.slot, {Slot::Kind::NormPartials, -1}, out.slot}, "normalize %" + std::to_string(index) + " scale and cast"});
        break;
      }
      case ir::OpKind::LinComb: {
        source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "(";
        std::vector<Slot> args;
        for (size_t k = 0; k < node.operands.size(); ++k) {
          source << pointer_type(operand(k)) << " __restrict__ t" << k << ", ";
          args.push_back(operand(k).slot);
        }
        source << (carries_update[index] ? std::string("const oj::u64* __restrict__ args") : std::string(storage_tag(node.type)) + "::storage* __restrict__ out")
               << ") {\n" << elementwise_loop(rows, cols) << "    float v = i == j ? " << literal(node.gamma)
               << " : 0.0f;\n";
        for (size_t k = 0; k < node.operands.size(); ++k)
          source << "    v = "
                 << rounded_add_product("v", literal(node.coefficients[k]), std::string(storage_tag(operand(k).type)) + "::load(" + element(operand(k), "t" + std::to_string(k)) + ")")
                 << ";\n";
        if (carries_update[index]) {
          source << "    const oj::u64* io = args + z * " << ir::kMuonStepWords << ";\n" << update_store(node, "    ") << "  }\n}\n\n";
          args.push_back({Slot::Kind::StepArgs, -1});
        } else {
          source << "    " << element(out, "out") << " = " << storage_tag(node.type) << "::store(v);\n  }\n}\n\n";
          args.push_back(out.slot);
        }
        program.launches.push_back({name, {elementwise_blocks(rows * cols), 1, function.batch}, 256, 0, args, "lincomb %" + std::to_string(index)});
        break;
      }
      case ir::OpKind::Output: {
        const View& x = operand(0);
        out.slot = {Slot::Kind::Output, -1};
        out.type = ScalarType::F32;
        out.matrix_stride = rows * cols;
        program.output_elements = rows * cols;
        source << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "(" << pointer_type(x) << " __restrict__ x, float* __restrict__ out) {\n"
               << elementwise_loop(rows, cols) << "    " << element(out, "out") << " = " << storage_tag(x.type) << "::load(" << element(x, "x") << ");\n  }\n}\n\n";
        program.launches.push_back({name, {elementwise_blocks(rows * cols), 1, function.batch}, 256, 0, {x.slot, out.slot}, "output %" + std::to_string(index)});
        break;
      }
      case ir::OpKind::Gemm: {
        const View& a = operand(0);
        const View& b = operand(1);
        const bool has_c = node.operands.size() == 3;
        const int64_t m = a.rows, k = a.cols, n = b.cols;
        if (a.type != b.type || (a.type != ScalarType::BF16 && a.type != ScalarType::F16))
          throw std::invalid_argument("the cuda backend runs products on 16-bit operands (bf16 or f16 storage, f32 accumulate); this program stores " +
                                      std::string(to_string(a.type)) + " (use --precision bf16 or f16, or the cpu backend)");
        const bool triangular = node.symmetric && function.strategy.triangular_products && m == n;
        const TileConfig fallback = default_tile_config(m, n, triangular, function.batch, options.multiprocessors);
        TileConfig tile = static_cast<size_t>(gemm_index) < options.gemm_tiles.size() ? options.gemm_tiles[static_cast<size_t>(gemm_index)].value_or(fallback) : fallback;
        const int product_index = gemm_index++;
        if (const std::string reason = tile.invalid_reason(); !reason.empty()) throw std::invalid_argument("tile " + tile.label() + ": " + reason);
        ProductRequest product;
        product.kernel = name;
        product.a = a;
        product.b = b;
        product.has_c = has_c;
        if (has_c) product.c = operand(2);
        product.d = out;
        product.m = m;
        product.n = n;
        product.k = k;
        product.batch = function.batch;
        product.triangular = triangular;
        product.fused_update = carries_update[index];
        product.alpha = node.alpha;
        product.beta = node.beta;
        product.gamma = node.gamma;
        if (options.hopper_products || tile.sm90a) {
          HopperProductRequest request;
          static_cast<ProductRequest&>(request) = product;
          request.tile_n = tile.sm90a ? tile.bn : static_cast<int>(oj::hopper::kTileN);
          const std::string reason = hopper_ineligible_reason(request);
          if (reason.empty() && tile.splits > 1) {
            // Split-K: each split's partial product on the tile into the f32 workspace (rows padded
            // to 16 bytes for TMA), then one element-wise kernel sums the splits in order and applies
            // α, β·C and γ·I. A triangular product's partials are mirrored, so the sum is exactly
            // symmetric too.
            const int splits = tile.splits;
            if (!split_k_valid(k, splits))
              throw std::invalid_argument("product " + std::to_string(product_index) + " (gemm %" + std::to_string(index) + "): " + std::to_string(splits) +
                                          " splits of K = " + std::to_string(k) + " (" + std::to_string((k + 63) / 64) +
                                          " K tiles of 64) would leave a split without K tiles");
            const int64_t pitch = (n + 3) / 4 * 4;
            if (workspace_buffer < 0) {
              workspace_buffer = static_cast<int>(program.buffer_bytes.size());
              program.buffer_bytes.push_back(0);
            }
            int64_t& workspace_bytes = program.buffer_bytes[static_cast<size_t>(workspace_buffer)];
            workspace_bytes = std::max(workspace_bytes, function.batch * splits * m * pitch * 4);
            View split_partials;
            split_partials.col_stride = 1;
            split_partials.type = ScalarType::F32;
            split_partials.rows = m;
            split_partials.cols = n;
            split_partials.row_stride = pitch;
            split_partials.matrix_stride = m * pitch;
            split_partials.slot = {Slot::Kind::Buffer, workspace_buffer};
            HopperProductRequest partial = request;
            partial.kernel = name + "_splitk_partial";
            partial.d = split_partials;
            partial.has_c = false;
            partial.alpha = 1;
            partial.beta = 0;
            partial.gamma = 0;
            partial.splits = splits;
            Launch launch = emit_hopper_product(source, partial);
            launch.summary = "gemm %" + std::to_string(index) + " " + launch.summary;
            launch.product = product_index;
            launch.tile = tile;
            program.launches.push_back(launch);
            source << "// " << name << ": the sum of " << splits << " split-K partial products, then alpha, beta*C and gamma*I\n"
                   << "extern \"C\" __global__ void __launch_bounds__(256) " << name << "(const float* __restrict__ w, "
                   << (has_c ? pointer_type(operand(2)) + " __restrict__ c, " : std::string()) << storage_tag(out.type) << "::storage* __restrict__ out) {\n"
                   << elementwise_loop(m, n) << "    float sum = 0.0f;\n#pragma unroll\n"
                   << "    for (int s = 0; s < " << splits << "; ++s) sum += w[(z * " << splits << " + s) * " << ll(m * pitch) << " + i * " << ll(pitch) << " + j];\n"
                   << "    float v = " << rounded_product(literal(node.alpha), "sum") << ";\n";
            std::vector<Slot> args = {split_partials.slot};
            if (has_c) {
              source << "    v = " << rounded_add_product("v", literal(node.beta), std::string(storage_tag(operand(2).type)) + "::load(" + element(operand(2), "c") + ")") << ";\n";
              args.push_back(operand(2).slot);
            }
            if (node.gamma != 0) source << "    if (i == j) v += " << literal(node.gamma) << ";\n";
            source << "    " << element(out, "out") << " = " << storage_tag(out.type) << "::store(v);\n  }\n}\n\n";
            args.push_back(out.slot);
            program.launches.push_back({name, {elementwise_blocks(m * n), 1, function.batch}, 256, 0, args,
                                        "gemm %" + std::to_string(index) + " split-K: the sum of " + std::to_string(splits) + " partial products and the epilogue"});
            break;
          }
          if (reason.empty()) {
            Launch launch = emit_hopper_product(source, request);
            launch.summary = "gemm %" + std::to_string(index) + " " + launch.summary;
            launch.product = product_index;
            launch.tile = tile.sm90a ? tile : sm90a_tile();
            program.launches.push_back(launch);
            break;
          }
          if (tile.sm90a)
            throw std::invalid_argument("product " + std::to_string(product_index) + " (gemm %" + std::to_string(index) + ", " + std::to_string(m) + "x" +
                                        std::to_string(n) + "x" + std::to_string(k) + ") was given the sm_90a tile, which cannot run it: " + reason);
        }
        if (triangular && tile.bm != tile.bn) tile = fallback;  // triangular scheduling needs square tiles
        MmaProductRequest request;
        static_cast<ProductRequest&>(request) = product;
        request.tile = tile;
        if (request.fused_update) request.update_statements = update_store(node, "    ");
        request.vector_epilogue = options.vector_epilogue;
        request.multiprocessors = options.multiprocessors;
        Launch launch = emit_mma_product(source, request);
        launch.summary = "gemm %" + std::to_string(index) + " " + launch.summary;
        launch.product = product_index;
        program.launches.push_back(launch);
        break;
      }
    }
  }
  program.norm_partials_bytes = partials * 8;
  program.source = source.str();
  return program;
}

}  // namespace orthojit::cuda
