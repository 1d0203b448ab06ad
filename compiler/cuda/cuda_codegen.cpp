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
#include "cuda/orthojit_hopper_layout.cuh"
#include "cuda/shared_layout.h"
#include "cuda/tile_schedule.h"

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
       << "    denominator_shared = (float)(" << (norm.mode == dsl::Normalization::Mode::Add ? "norm + eps" : "(norm > eps ? norm : eps)") << ");\n"
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
         << "    const " << acc << " v = oj_update_value(gi, m[off], beta) * scale;\n    sum += v * v;\n  }\n"
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
  if (sm90a) return splits > 1 ? "sm90a/k" + std::to_string(splits) : "sm90a";
  return std::to_string(bm) + "x" + std::to_string(bn) + "x" + std::to_string(bk) + "/" + std::to_string(warps_m) + "x" + std::to_string(warps_n);
}

std::string TileConfig::invalid_reason() const {
  if (sm90a) {
    if (bm != sm90a_tile().bm || bn != sm90a_tile().bn || bk != sm90a_tile().bk) return "the sm_90a tile is 128x128x64 (sm90a_tile())";
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
               << "    sum += v * v;\n  }\n"
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
          source << "    v += " << literal(node.coefficients[k]) << " * " << storage_tag(operand(k).type) << "::load(" << element(operand(k), "t" + std::to_string(k))
                 << ");\n";
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
        if (options.hopper_products || tile.sm90a) {
          HopperProductRequest request;
          request.kernel = name;
          request.a = a;
          request.b = b;
          request.has_c = has_c;
          if (has_c) request.c = operand(2);
          request.d = out;
          request.m = m;
          request.n = n;
          request.k = k;
          request.batch = function.batch;
          request.triangular = triangular;
          request.fused_update = carries_update[index];
          request.alpha = node.alpha;
          request.beta = node.beta;
          request.gamma = node.gamma;
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
                   << "    float v = " << literal(node.alpha) << " * sum;\n";
            std::vector<Slot> args = {split_partials.slot};
            if (has_c) {
              source << "    v += " << literal(node.beta) << " * " << storage_tag(operand(2).type) << "::load(" << element(operand(2), "c") << ");\n";
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
            launch.tile = sm90a_tile();
            program.launches.push_back(launch);
            break;
          }
          if (tile.sm90a)
            throw std::invalid_argument("product " + std::to_string(product_index) + " (gemm %" + std::to_string(index) + ", " + std::to_string(m) + "x" +
                                        std::to_string(n) + "x" + std::to_string(k) + ") was given the sm_90a tile, which cannot run it: " + reason);
        }
        if (triangular && tile.bm != tile.bn) tile = fallback;  // triangular scheduling needs square tiles
        const int64_t tiles_m = (m + tile.bm - 1) / tile.bm, tiles_n = (n + tile.bn - 1) / tile.bn;
        const View c = has_c ? operand(2) : View{};
        // 32-bit index arithmetic when every per-matrix offset fits (64-bit addresses cost registers:
        // 255 and spills for the 128x128 tile, against well under 200 with int offsets).
        const bool narrow = std::max({a.matrix_stride, b.matrix_stride, out.matrix_stride, c.matrix_stride, m * k, k * n, m * n}) < (int64_t{1} << 31);
        auto idx = [&](int64_t value) { return narrow ? std::to_string(value) : ll(value); };
        const char* mma = a.type == ScalarType::BF16 ? "oj::mma_bf16" : "oj::mma_f16";
        const bool a_k_contiguous = a.col_stride == 1;
        const bool b_k_contiguous = b.row_stride == 1;
        const int wm = tile.bm / tile.warps_m, wn = tile.bn / tile.warps_n;
        // Global -> registers -> shared, written out where used (not as lambdas: arrays captured by
        // reference end up in local memory). Each thread moves chunks of V consecutive elements
        // along the operand's contiguous dimension: 16-byte loads (V = 8) when extents and strides
        // allow, else pairs, else single values. A chunk is wholly inside or outside the matrix.
        auto vector_width = [&](const View& view, bool k_contiguous, int64_t contiguous_extent) {
          const int64_t other_stride = k_contiguous ? (view.col_stride == 1 ? view.row_stride : view.col_stride)
                                                    : (view.row_stride == 1 ? view.col_stride : view.row_stride);
          for (int width : {8, 2})
            if (contiguous_extent % width == 0 && other_stride % width == 0 && view.matrix_stride % width == 0) return width;
          return 1;
        };
        const int va = vector_width(a, a_k_contiguous, a_k_contiguous ? k : m);
        const int vb = vector_width(b, b_k_contiguous, b_k_contiguous ? k : n);
        // The shared tiles, who moves which chunk and every index formula of a shared access
        // (shared_layout.h: the same formulas tests/cuda_bank_conflict_test.cpp checks for bank
        // conflicts).
        // A triangular product writes its mirrored tile through shared memory (the mirror tile of
        // shared_layout.h) where D is 16-bit and row-major in whole 16-byte chunks and the tile
        // reuses the cp.async stages; elsewhere each element's mirror is a 2-byte store.
        const bool mirror_layout = triangular && options.vector_epilogue && !carries_update[index] && is_16bit(node.type) && out.col_stride == 1 &&
                                   out.row_stride % 8 == 0 && out.matrix_stride % 8 == 0 && n % 8 == 0 && (wn / 8) % 2 == 0 && tile.bm % 16 == 0;
        GemmSharedPlan plan = gemm_shared_plan(tile, a_k_contiguous, b_k_contiguous, va, vb, mirror_layout);
        if (plan.mirror && !(plan.pipelined && mirror_fits(plan))) plan = gemm_shared_plan(tile, a_k_contiguous, b_k_contiguous, va, vb);
        const bool shared_mirror = plan.mirror;
        // The persistent schedule of a triangular product (tile_schedule.h): about one wave of
        // CTAs, each taking work items (matrix, upper tile) in the grouped order.
        const int64_t work_items = triangular ? tiles_m * (tiles_m + 1) / 2 * function.batch : 0;
        // One wave: the CTAs one SM holds at once (registers estimated at 128 per thread, about
        // what ptxas reports for these kernels; more CTAs than fit only queue behind the first).
        const int64_t persistent_grid = triangular ? persistent_ctas(work_items, options.multiprocessors,
                                                                     resident_ctas_per_sm(tile.threads(), plan.pipelined ? plan.stages * plan.stage_bytes : plan.stage_bytes, 128))
                                                   : 0;
        const TriangularOrder order{static_cast<int>(tiles_m), triangular_group(static_cast<int>(tiles_m), persistent_grid)};
        if (work_items >= (int64_t{1} << 31)) throw std::invalid_argument("gemm %" + std::to_string(index) + ": " + std::to_string(work_items) + " tiles in one launch (at most 2^31 - 1)");
        source << "// " << node.name << " = " << node.alpha << "·A·B" << (has_c ? " + " + std::to_string(node.beta) + "·C" : "")
               << (node.gamma != 0 ? " + " + std::to_string(node.gamma) + "·I" : "") << ": " << m << "x" << n << "x" << k
               << (triangular ? ", triangular (persistent, bands of " + std::to_string(order.group) + " tile rows" + (shared_mirror ? ", mirror through shared memory)" : ")") : "")
               << ", tile " << tile.label() << "\n"
               << "extern \"C\" __global__ void __launch_bounds__(" << tile.threads() << ") " << name << "(const oj::u16* __restrict__ a_all, const oj::u16* __restrict__ b_all, "
               << (has_c ? pointer_type(c) : std::string("const float*")) << " __restrict__ c_all, "
               << (carries_update[index] ? std::string("const oj::u64* __restrict__ args") : std::string(storage_tag(node.type)) + "::storage* __restrict__ d_all") << ") {\n"
               << "  constexpr int M = " << m << ", N = " << n << ", K = " << k << ";\n"
               << "  constexpr int BM = " << tile.bm << ", BN = " << tile.bn << ", BK = " << tile.bk << ", WM = " << wm << ", WN = " << wn
               << ", WARPS_N = " << tile.warps_n << ", THREADS = " << tile.threads() << ";\n"
               << "  constexpr int FM = WM / 16, FN = WN / 8;\n"
               << "  const int tid = threadIdx.x;\n" << definitions_code(plan.thread, "  ");
        // The per-tile part goes into `body`: once per CTA, or once per work item of the
        // persistent loop.
        std::ostringstream body;
        body << "  const oj::u16* __restrict__ a = a_all + z * " << ll(a.matrix_stride) << ";\n"
             << "  const oj::u16* __restrict__ b = b_all + z * " << ll(b.matrix_stride) << ";\n"
             << (has_c ? "  const auto* __restrict__ c = c_all + z * " + ll(c.matrix_stride) + ";\n" : "")
             << (carries_update[index] ? "  const oj::u64* io = args + z * " + std::to_string(ir::kMuonStepWords) + ";\n"
                                       : "  auto* __restrict__ d = d_all + z * " + ll(out.matrix_stride) + ";\n")
             << "  const int row0 = ti * BM, col0 = tj * BN;\n"
             << "  float acc[FM][FN][4];\n"
             << "#pragma unroll\n  for (int x = 0; x < FM; ++x)\n#pragma unroll\n    for (int y = 0; y < FN; ++y)\n"
             << "#pragma unroll\n      for (int q = 0; q < 4; ++q) acc[x][y][q] = 0.0f;\n";
        auto register_type = [](int width) { return width == 8 ? "uint4" : width == 2 ? "oj::u32" : "oj::u16"; };
        auto zero = [](int width) { return width == 8 ? "make_uint4(0u, 0u, 0u, 0u)" : width == 2 ? "0u" : "(oj::u16)0"; };
        // Which chunk thread-chunk e moves (row, col of the stored tile), then where that lies in
        // the operand: rows of a k-contiguous operand run along m (A) or n (B), else along k.
        auto chunk_position = [&](const SharedAccess& store, bool k_contiguous, const char* origin, const std::string& k0) {
          return definitions_code(store.locals, "      ") + "      const int gr = " + origin + " + " + (k_contiguous ? "row" : "col") + ", gk = " + k0 + " + " +
                 (k_contiguous ? "col" : "row") + ";\n";
        };
        auto chunk_loop = [&](const SharedAccess& store) {
          return "#pragma unroll\n    for (int s = 0; s < " + std::to_string(store.loops.front().second.size()) + "; ++s) {\n";
        };
        auto operand_load = [&](const SharedAccess& store, const char* regs, const char* pointer, int width, bool k_contiguous, const char* origin,
                                const char* extent, int64_t row_stride_of_rows, int64_t stride_of_k, const std::string& k0) {
          return chunk_loop(store) + chunk_position(store, k_contiguous, origin, k0) + "      " + regs + "[s] = (gr < " + extent + " && gk < K) ? *reinterpret_cast<const " +
                 register_type(width) + "*>(&" + pointer + "[gr * " + idx(row_stride_of_rows) + " + gk * " + idx(stride_of_k) + "]) : " + zero(width) + ";\n    }\n";
        };
        auto operand_store = [&](const SharedAccess& store, const char* regs, const char* shared, int width) {
          return chunk_loop(store) + definitions_code(store.locals, "      ") + "      *reinterpret_cast<" + register_type(width) + "*>(&" + shared + "[" +
                 store.row.code() + "][" + store.col.code() + "]) = " + regs + "[s];\n    }\n";
        };
        auto load_code = [&](const std::string& k0) {
          return operand_load(plan.a_store, "ra", "a", va, a_k_contiguous, "row0", "M", a.row_stride, a.col_stride, k0) +
                 operand_load(plan.b_store, "rb", "b", vb, b_k_contiguous, "col0", "N", b.col_stride, b.row_stride, k0);
        };
        const std::string store_code = operand_store(plan.a_store, "ra", "As", va) + operand_store(plan.b_store, "rb", "Bs", vb);
        if ((tile.bm * tile.bk / va) % tile.threads() != 0 || (tile.bn * tile.bk / vb) % tile.threads() != 0)
          throw std::invalid_argument("tile " + tile.label() + ": the tile's chunks do not divide evenly among its threads");
        // Shared tiles as loaded (shared_layout.h): rows along the operand's contiguous dimension,
        // padded by 8 halves; fragments by 32-bit loads where k runs along the rows, by
        // ldmatrix.trans where it runs down the columns.
        const std::string a_shape = plan.as.shape(), b_shape = plan.bs.shape();
        const int stage_bytes = plan.stage_bytes, stages = plan.stages;
        // The cp.async pipeline (sm_80+): 16-byte chunks go from global straight into shared
        // memory, `stages` k-tiles in flight, one barrier per k-tile. It needs 16-byte chunks
        // of both operands along their rows and two stages within the 48 KiB of static shared
        // memory; otherwise registers stage one tile ahead.
        const bool pipelined = plan.pipelined;
        if (pipelined) {
          auto issue = [&](const SharedAccess& store, const char* shared, bool k_contiguous, const char* pointer, const char* origin, const char* extent,
                           int64_t row_stride_of_rows, int64_t stride_of_k) {
            // Outside the matrix: a valid address and a source size of 0 (cp.async zero-fills).
            return chunk_loop(store) + chunk_position(store, k_contiguous, origin, "k0") + "      const bool inside = gr < " + extent + " && gk < K;\n" +
                   "      oj::cp_async_16(&" + shared + "[stage][" + store.row.code() + "][" + store.col.code() + "], &" + pointer + "[inside ? gr * " +
                   idx(row_stride_of_rows) + " + gk * " + idx(stride_of_k) + " : 0], inside);\n    }\n";
          };
          // Written out at both places it is used (a lambda capturing the shared arrays by
          // reference would put them behind a local-memory pointer).
          auto issue_tile = [&](const std::string& which, const std::string& indent) {
            return indent + "{\n" + indent + "  const int stage = (" + which + ") % STAGES, k0 = (" + which + ") * BK;\n" +
                   issue(plan.a_store, "As_stages", a_k_contiguous, "a", "row0", "M", a.row_stride, a.col_stride) +
                   issue(plan.b_store, "Bs_stages", b_k_contiguous, "b", "col0", "N", b.col_stride, b.row_stride) + indent + "}\n";
          };
          // One block of shared memory for the stages (and, after the main loop, the mirror tile).
          const int a_elements = plan.as.rows * plan.as.pitch, b_elements = plan.bs.rows * plan.bs.pitch;
          source << "  constexpr int STAGES = " << stages << ", TILES = (K + BK - 1) / BK;\n"
                 << "  __shared__ __align__(128) oj::u16 shared_tiles[STAGES * " << a_elements + b_elements << "];\n"
                 << "  auto& As_stages = *reinterpret_cast<oj::u16 (*)[STAGES]" << a_shape << ">(shared_tiles);\n"
                 << "  auto& Bs_stages = *reinterpret_cast<oj::u16 (*)[STAGES]" << b_shape << ">(shared_tiles + STAGES * " << a_elements << ");\n";
          body << "  // k-tile t goes into stage t % STAGES.\n"
               << "#pragma unroll\n  for (int pre = 0; pre < STAGES - 1; ++pre) {\n    if (pre < TILES)\n" << issue_tile("pre", "    ")
               << "    oj::cp_async_commit();\n  }\n"
               // Unrolled by two: ptxas (NVRTC 13, sm_90) spilled a register or two here both with
               // its own partial unrolling and with none, in some of the shipped shapes; by two it
               // spilled in none (tests/cuda_codegen_test.cpp checks every generated kernel). Inside
               // the persistent loop of a triangular product, by two spilled 8-12 bytes (168
               // registers) on the 40x40x136 X·Xᵀ of a gram schedule, not unrolled none.
               << (triangular ? "#pragma unroll 1\n" : "#pragma unroll 2\n") << "  for (int tile = 0; tile < TILES; ++tile) {\n"
               << "    oj::cp_async_wait<STAGES - 2>();  // this thread's copies of `tile` landed\n"
               << "    __syncthreads();  // everyone's did, and everyone finished computing tile - 1, whose stage is refilled next\n"
               << "    if (tile + STAGES - 1 < TILES)\n" << issue_tile("tile + STAGES - 1", "    ")
               << "    oj::cp_async_commit();  // an empty group at the end keeps the count\n"
               << "    auto& As = As_stages[tile % STAGES];\n    auto& Bs = Bs_stages[tile % STAGES];\n";
        } else {
          source << "  __shared__ __align__(16) oj::u16 As" << a_shape << ";\n  __shared__ __align__(16) oj::u16 Bs" << b_shape << ";\n";
          body << "  " << register_type(va) << " ra[BM * BK / " << va << " / THREADS];\n  " << register_type(vb) << " rb[BN * BK / " << vb << " / THREADS];\n";
          body << "  {\n" << load_code("0") << "  }\n"
               << "  for (int k0 = 0; k0 < K; k0 += BK) {\n"
               << "    __syncthreads();  // everyone is done reading the previous tile\n"
               << store_code << "    __syncthreads();\n"
               << "    if (k0 + BK < K) {  // the next tile's loads overlap this tile's MMAs\n" << load_code("(k0 + BK)") << "    }\n";
        }
        const SharedAccess &ar = plan.a_read, &br = plan.b_read;
        body << "#pragma unroll\n    for (int kk = 0; kk < BK; kk += 16) {\n"
             << "      oj::u32 af[FM][4], bf[FN][2];\n"
             << "#pragma unroll\n      for (int x = 0; x < FM; ++x)"
             << (a_k_contiguous ? "\n#pragma unroll\n        for (int q = 0; q < 4; ++q) af[x][q] = *reinterpret_cast<const oj::u32*>(&As[" + ar.row.code() + "][" +
                                      ar.col.code() + "]);\n"
                                : " oj::ldmatrix_x4_trans(af[x], &As[" + ar.row.code() + "][" + ar.col.code() + "]);\n")
             << (b_k_contiguous ? "#pragma unroll\n      for (int y = 0; y < FN; ++y)\n#pragma unroll\n        for (int q = 0; q < 2; ++q) bf[y][q] = *reinterpret_cast<const oj::u32*>(&Bs[" +
                                      br.row.code() + "][" + br.col.code() + "]);\n"
                 : plan.b_ldmatrix_x4 ? "#pragma unroll\n      for (int y = 0; y < FN; y += 2) oj::ldmatrix_x4_trans(&bf[y][0], &Bs[" + br.row.code() + "][" + br.col.code() + "]);\n"
                                      : "#pragma unroll\n      for (int y = 0; y < FN; ++y) oj::ldmatrix_x2_trans(bf[y], &Bs[" + br.row.code() + "][" + br.col.code() + "]);\n")
             << "#pragma unroll\n      for (int x = 0; x < FM; ++x)\n#pragma unroll\n        for (int y = 0; y < FN; ++y) " << mma << "(acc[x][y], af[x], bf[y]);\n"
             << "    }\n  }\n";
        // Epilogue: α·acc + β·C + γ·I, rounded once to D's type; a triangular product stores the
        // upper element and its mirror (diagonal tiles too), so D is exactly symmetric.
        const bool vector_d = shared_mirror || (options.vector_epilogue && !triangular && !carries_update[index] && is_16bit(node.type) && out.col_stride == 1 &&
                                                out.row_stride % 8 == 0 && out.matrix_stride % 8 == 0 && n % 8 == 0 && (wn / 8) % 2 == 0);
        if (vector_d) {
          // 16-byte accesses: the accumulator gives lane (g, t) columns 2t, 2t + 1 of rows g and
          // g + 8 of each 8-column fragment; quad_transpose swaps the quad's pairs of two
          // fragments (slot s: fragment y + s/2, row half s%2) so that lane t holds all 8 columns
          // of one row chunk (fragment y + t/2, row g + 8·(t%2)): one 16-byte C load and one
          // 16-byte D store instead of eight 2-byte ones. The per-element arithmetic is the
          // scalar epilogue's, so D's bits are the same.
          const bool vector_c = has_c && is_16bit(c.type) && c.col_stride == 1 && c.row_stride % 8 == 0 && c.matrix_stride % 8 == 0;
          if (shared_mirror)
            body << "  __syncthreads();  // every warp has read its last stage: the stage memory holds the mirror tile now\n"
                 << "  auto& Ms = *reinterpret_cast<oj::u16 (*)[BN][BM]>(shared_tiles);\n";
          body << "#pragma unroll\n  for (int x = 0; x < FM; ++x)\n#pragma unroll\n    for (int y = 0; y < FN; y += 2) {\n"
               << "      oj::u32 lo[4], hi[4];\n"
               << "#pragma unroll\n      for (int s = 0; s < 4; ++s) {\n"
               << "        lo[s] = __float_as_uint(acc[x][y + s / 2][(s % 2) * 2]);\n"
               << "        hi[s] = __float_as_uint(acc[x][y + s / 2][(s % 2) * 2 + 1]);\n      }\n"
               << "      oj::quad_transpose(lo);  // every lane of the warp takes part\n      oj::quad_transpose(hi);\n"
               << "      const int i = row0 + wrow + x * 16 + g + (t % 2) * 8, j0 = col0 + wcol + (y + t / 2) * 8;\n";
          if (shared_mirror)
            body << "      oj::u32 dw[4] = {0u, 0u, 0u, 0u};\n"
                 << "      if (i < M && j0 < N) {  // N % 8 == 0: a chunk is wholly inside or outside\n";
          else
            body << "      if (i >= M || j0 >= N) continue;  // N % 8 == 0: a chunk is wholly inside or outside\n      {\n      oj::u32 dw[4];\n";
          if (vector_c)
            body << "      const uint4 cv = *reinterpret_cast<const uint4*>(&c[i * " << idx(c.row_stride) << " + j0]);\n"
                 << "      const oj::u32 cw[4] = {cv.x, cv.y, cv.z, cv.w};\n";
          body << "#pragma unroll\n      for (int w = 0; w < 4; ++w) {\n"
               << "        oj::u32 packed = 0;\n"
               << "#pragma unroll\n        for (int h = 0; h < 2; ++h) {\n"
               << "          const int j = j0 + 2 * w + h;\n"
               << "          float v = " << literal(node.alpha) << " * __uint_as_float(h ? hi[w] : lo[w]);\n";
          if (has_c) {
            if (vector_c)
              body << "          v += " << literal(node.beta) << " * " << storage_tag(c.type) << "::load(static_cast<oj::u16>(h ? cw[w] >> 16 : cw[w] & 0xffffu));\n";
            else
              body << "          v += " << literal(node.beta) << " * " << storage_tag(c.type) << "::load(c[i * " << idx(c.row_stride) << " + j * " << idx(c.col_stride) << "]);\n";
          }
          if (node.gamma != 0) body << "          if (i == j) v += " << literal(node.gamma) << ";\n";
          else body << "          (void)j;\n";
          body << "          packed |= static_cast<oj::u32>(" << storage_tag(node.type) << "::store(v)) << (16 * h);\n        }\n"
               << "        dw[w] = packed;\n      }\n";
          if (shared_mirror) {
            // The upper triangle: whole chunks off the diagonal tile or at or above the diagonal,
            // element by element where a chunk crosses it (the diagonal tile's lower half is the
            // mirror's).
            body << "      if (ti != tj || j0 >= i) {\n"
                 << "        *reinterpret_cast<uint4*>(&d[i * " << idx(out.row_stride) << " + j0]) = make_uint4(dw[0], dw[1], dw[2], dw[3]);\n"
                 << "      } else if (j0 + 7 >= i) {\n"
                 << "#pragma unroll\n        for (int w = 0; w < 8; ++w)\n"
                 << "          if (j0 + w >= i) d[i * " << idx(out.row_stride) << " + j0 + w] = static_cast<oj::u16>(dw[w / 2] >> (16 * (w % 2)));\n"
                 << "      }\n      }\n";
            const SharedAccess& ms = plan.mirror_store;
            body << "      // Ms[jl][il] = D[row0 + il][col0 + jl] (the swizzled mirror tile, shared_layout.h)\n"
                 << "#pragma unroll\n      for (int w = 0; w < 8; ++w) {\n" << definitions_code(ms.locals, "        ")
                 << "        Ms[" << ms.row.code() << "][" << ms.col.code() << "] = static_cast<oj::u16>(dw[w / 2] >> (16 * (w % 2)));\n      }\n    }\n";
            const SharedAccess& mr = plan.mirror_read;
            body << "  __syncthreads();  // the mirror tile is complete\n"
                 << "  // The lower triangle: row col0 + mr of D takes columns row0 + mc .. + 7 from Ms's row mr.\n"
                 << "#pragma unroll\n  for (int s = 0; s < " << mr.loops.front().second.size() << "; ++s) {\n" << definitions_code(mr.locals, "    ")
                 << "    const int jr = col0 + mr, ic = row0 + mc;\n"
                 << "    if (jr >= N || ic >= M) continue;\n"
                 << "    const uint4 chunk = *reinterpret_cast<const uint4*>(&Ms[" << mr.row.code() << "][" << mr.col.code() << "]);\n"
                 << "    if (ti != tj || ic + 7 < jr) {\n"
                 << "      *reinterpret_cast<uint4*>(&d[jr * " << idx(out.row_stride) << " + ic]) = chunk;\n"
                 << "    } else {\n"
                 << "      const oj::u32 words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};\n"
                 << "#pragma unroll\n      for (int h = 0; h < 8; ++h)\n"
                 << "        if (ic + h < jr) d[jr * " << idx(out.row_stride) << " + ic + h] = static_cast<oj::u16>(words[h / 2] >> (16 * (h % 2)));\n"
                 << "    }\n  }\n";
          } else {
            body << "      *reinterpret_cast<uint4*>(&d[i * " << idx(out.row_stride) << " + j0]) = make_uint4(dw[0], dw[1], dw[2], dw[3]);\n"
                 << "      }\n    }\n";
          }
        } else {
          body << "#pragma unroll\n  for (int x = 0; x < FM; ++x)\n#pragma unroll\n    for (int y = 0; y < FN; ++y)\n#pragma unroll\n      for (int q = 0; q < 4; ++q) {\n"
               << "        const int i = row0 + wrow + x * 16 + g + (q / 2) * 8, j = col0 + wcol + y * 8 + 2 * t + (q % 2);\n"
               << "        if (i >= M || j >= N" << (triangular ? " || i > j" : "") << ") continue;\n"
               << "        float v = " << literal(node.alpha) << " * acc[x][y][q];\n"
               << (has_c ? "        v += " + literal(node.beta) + " * " + storage_tag(c.type) + "::load(c[i * " + idx(c.row_stride) + " + j * " + idx(c.col_stride) + "]);\n" : "")
               << (node.gamma != 0 ? "        if (i == j) v += " + literal(node.gamma) + ";\n" : "");
          if (carries_update[index]) {
            if (triangular) throw std::logic_error("cuda codegen: a fused Muon update on a triangular product");
            body << update_store(node, "        ") << "      }\n";
          } else {
            body << "        const auto stored = " << storage_tag(node.type) << "::store(v);\n"
                 << "        d[i * " << idx(out.row_stride) << " + j * " << idx(out.col_stride) << "] = stored;\n"
                 << (triangular ? "        if (i != j) d[j * " + idx(out.row_stride) + " + i * " + idx(out.col_stride) + "] = stored;\n" : "")
                 << "      }\n";
          }
        }
        if (triangular) {
          // Indented one level into the work loop.
          std::string indented;
          std::istringstream lines(body.str());
          for (std::string line; std::getline(lines, line);) indented += (line.empty() || line[0] == '#' ? "" : "  ") + line + "\n";
          source << "  constexpr int TILES_T = " << order.tiles << ", GROUP = " << order.group << ", UPPER = " << order.upper_tiles()
                 << ", WORK = " << work_items << ";\n"
                 << "  for (int work = blockIdx.x; work < WORK; work += gridDim.x) {\n"
                 << "    const long long z = work / UPPER;\n"
                 << "    int ti, tj;\n    oj::grouped_upper_tile(work % UPPER, TILES_T, GROUP, ti, tj);\n"
                 << indented
                 << "    __syncthreads();  // the next work item's loads reuse the shared memory\n  }\n}\n\n";
        } else {
          source << "  const long long z = blockIdx.z;\n  const int ti = blockIdx.y, tj = blockIdx.x;\n" << body.str() << "}\n\n";
        }
        Launch launch;
        launch.kernel = name;
        if (triangular) {
          launch.grid[0] = persistent_grid;
        } else {
          launch.grid[0] = tiles_n;
          launch.grid[1] = tiles_m;
          launch.grid[2] = function.batch;
        }
        launch.block = tile.threads();
        launch.shared_bytes = pipelined ? stages * stage_bytes : stage_bytes;
        launch.args = {a.slot, b.slot, has_c ? c.slot : Slot{Slot::Kind::Buffer, -1}, carries_update[index] ? Slot{Slot::Kind::StepArgs, -1} : out.slot};
        launch.summary = "gemm %" + std::to_string(index) + " " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " tile " + tile.label() +
                         (triangular ? std::string(" triangular, persistent") + (shared_mirror ? ", shared-memory mirror" : "") : std::string()) + (pipelined ? ", cp.async x" + std::to_string(stages) : ", register-staged");
        launch.product = product_index;
        launch.m = m;
        launch.n = n;
        launch.k = k;
        launch.triangular = triangular;
        launch.tile = tile;
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
