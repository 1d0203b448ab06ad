// The fully fused small-matrix kernel (see fused_small_codegen.h).
#include "cuda/fused_small_codegen.h"

#include "cuda/codegen_vocabulary.h"
#include "cuda/elementwise_codegen.h"
#include "ir/muon_step.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace orthojit::cuda {
namespace {

// Largest per-matrix element count of a buffer that must live in shared memory (an m x m value).
constexpr int64_t kSquareBufferElements = kFusedSmallMaxRows * kFusedSmallMaxRows;

// A shared-memory row pitch (in elements) for a value with `cols` columns: the smallest p >= cols
// with p ≡ 8 (mod 16). Then the 8 rows g = 0..7 that one MMA fragment load touches start at 32-bit
// words (p/2)·g ≡ 4·odd·g (mod 32): distinct multiples of 4, so the 4 lanes t of each row fill the
// 32 banks without conflicts (an unpadded 128-column row would put all 8 rows on the same banks).
int64_t shared_pitch(int64_t cols) { return cols + ((8 - cols % 16) + 16) % 16; }

// A node's value as the fused kernel addresses it: element (i, j) at base[i·row_stride + j·col_stride],
// `base` a per-matrix pointer declared at the top of the kernel (global pointers already offset by
// the matrix index, shared ones pointing into the dynamic shared memory).
struct View : StridedMatrix {
  std::string base;
  bool even_base = true;          // base is 4-byte aligned for 16-bit values (pairs may be one load)
  bool exactly_symmetric = false;  // stored bit-for-bit symmetric (a mirrored product): Vᵀ reads as V
  bool momentum = false;           // a Muon step's U: computed from g (this view) and M (laid out like g)
  View transposed() const { return transposed_view(*this); }
  std::string at(const std::string& i, const std::string& j) const {
    return base + "[" + i + " * " + std::to_string(row_stride) + " + " + j + " * " + std::to_string(col_stride) + "]";
  }
};

// A row-major rows x cols matrix of `type` at the per-matrix pointer `base`.
View row_major(const std::string& base, ScalarType type, int64_t rows, int64_t cols) {
  View view;
  view.base = base;
  view.type = type;
  view.rows = rows;
  view.cols = cols;
  view.row_stride = cols;
  return view;
}

std::string kernel_name(const std::string& program) {
  std::string name = "fused_";
  for (char c : program) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name;
}

// Where each planned buffer lives, and the launch's shape; computed once by the eligibility check
// and reused by the generator, so the two can never disagree.
struct Plan {
  int threads = 256, tile = 32;
  int64_t rows = 0;                     // the oriented m
  int64_t scratch_bytes = 0;            // block_sum scratch at offset 0 of the dynamic shared memory
  std::vector<int64_t> shared_offset;   // per buffer: byte offset in shared memory, or -1 (global)
  std::vector<int64_t> shared_bytes;    // per buffer: bytes it needs in shared memory (padded rows)
  int64_t total_shared = 0;
};

std::string kib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / 1024.0);
  return text;
}

// Per node: whether it carries a Muon step's fused update in its epilogue (the producer of the last
// X, found through the orientation's transposes, as fuse_update_rules chose it).
std::vector<bool> update_carriers(const ir::Function& function) {
  std::vector<bool> carries(function.nodes.size(), false);
  for (const ir::Node& node : function.nodes) {
    if (node.kind != ir::OpKind::Update || !node.fused) continue;
    ir::NodeId root = node.operands[0];
    while (function.node(root).kind == ir::OpKind::Transpose) root = function.node(root).operands[0];
    carries[static_cast<size_t>(root)] = true;
  }
  return carries;
}

// The parameter's strides in the frame of the value the update reads: the user's row-major matrix,
// transposed when the update reads the last X through the orientation's transpose.
std::pair<int64_t, int64_t> parameter_strides(const ir::Function& function) {
  for (const ir::Node& node : function.nodes) {
    if (node.kind != ir::OpKind::Update) continue;
    bool transposed = false;
    for (ir::NodeId id = node.operands[0]; function.node(id).kind == ir::OpKind::Transpose; id = function.node(id).operands[0]) transposed = !transposed;
    const int64_t cols = function.input_shape.cols.size;
    return transposed ? std::pair<int64_t, int64_t>{1, cols} : std::pair<int64_t, int64_t>{cols, 1};
  }
  return {0, 0};
}

// The plan, or why there is none.
std::string make_plan(const ir::Function& function, const FusedSmallOptions& options, Plan& plan) {
  if (function.nodes.empty()) return "the function has no nodes";
  if (function.buffers.empty() && function.nodes.size() > 2) return "the IR has no buffer plan (run every pass first)";
  if (!function.input_shape.is_known()) return "the shape is not specialized (run every pass first)";
  if (options.threads < 64 || options.threads > 1024 || (options.threads & (options.threads - 1)) != 0)
    return "threads must be a power of two from 64 to 1024, not " + std::to_string(options.threads);
  if (options.warp_tile != 0 && options.warp_tile != 16 && options.warp_tile != 32) return "the warp tile must be 16 or 32 (or 0: by size)";
  if (function.batch < 1 || function.batch > std::numeric_limits<int32_t>::max())
    return "batch " + std::to_string(function.batch) + " is outside the grid's 1..2^31-1 CTAs";
  const std::vector<bool> carries = update_carriers(function);
  plan.threads = options.threads;
  plan.rows = std::min(function.input_shape.rows.size, function.input_shape.cols.size);
  if (plan.rows > kFusedSmallMaxRows)
    return "the oriented matrix has " + std::to_string(plan.rows) + " rows (" + function.input_shape.to_string() + "), more than the " +
           std::to_string(kFusedSmallMaxRows) + " whose m x m products one CTA holds in shared memory; use the per-op kernels";
  plan.tile = options.warp_tile != 0 ? options.warp_tile : (plan.rows > 64 ? 32 : 16);

  // Every value: a storage type the kernel spells, per-matrix offsets in 32-bit ints.
  for (size_t index = 0; index < function.nodes.size(); ++index) {
    const ir::Node& node = function.nodes[index];
    const std::string where = std::string(ir::to_string(node.kind)) + " %" + std::to_string(index);
    if (!node.shape.is_known()) return where + " has a symbolic shape (run every pass first)";
    if (node.shape.elements() >= (int64_t{1} << 31)) return where + " has 2^31 or more elements per matrix";
    const bool stores = node.kind != ir::OpKind::Input && node.kind != ir::OpKind::Output && node.kind != ir::OpKind::Transpose &&
                        node.kind != ir::OpKind::Momentum && node.kind != ir::OpKind::Update;
    if (stores && !device_storable(node.type))
      return where + " stores " + std::string(to_string(node.type)) + "; the fused kernel stores bf16, f16 or f32 values";
    if (node.kind == ir::OpKind::Normalize && node.norm_type != ScalarType::F32 && node.norm_type != ScalarType::F64)
      return where + " reduces its norm in " + std::string(to_string(node.norm_type)) + " (f32 or f64 only)";
    if (stores && node.buffer < 0 && !carries[index]) return where + " has no planned buffer (run every pass first)";
    if (node.kind == ir::OpKind::Momentum && !node.fused)
      return where + " is a Muon momentum that is not fused into its normalize (run fuse_update_rules)";
    if (carries[index] && node.kind == ir::OpKind::Gemm && node.symmetric) return where + " carries the Muon update but is a symmetric product";
    if (node.buffer >= 0 && function.buffers.at(static_cast<size_t>(node.buffer)).type != node.type)
      return where + " is " + std::string(to_string(node.type)) + " but its buffer holds another type";
    if (node.kind == ir::OpKind::Gemm) {
      const ScalarType a = function.node(node.operands[0]).type, b = function.node(node.operands[1]).type;
      if (a != b || !is_16bit(a))
        return "products take 16-bit operands (bf16 or f16 storage, f32 accumulate) in the fused kernel; " + where + " multiplies " +
               std::string(to_string(a)) + " by " + std::string(to_string(b)) + " (use --precision bf16 or f16, or the cpu backend)";
    }
  }

  // Shared memory: the norm scratch first, then buffers smallest first. The m x m buffers must fit
  // (they are what the kernel is for); bigger ones (the m x n iterate) join while room is left.
  plan.scratch_bytes = static_cast<int64_t>(plan.threads) * 8;  // f64-sized, whatever the norm type
  const size_t buffer_count = function.buffers.size();
  plan.shared_bytes.assign(buffer_count, 0);
  plan.shared_offset.assign(buffer_count, -1);
  for (const ir::Node& node : function.nodes) {
    if (node.buffer < 0) continue;
    const auto b = static_cast<size_t>(node.buffer);
    const int64_t bytes = node.shape.rows.size * shared_pitch(node.shape.cols.size) * size_in_bytes(node.type);
    plan.shared_bytes[b] = std::max(plan.shared_bytes[b], (bytes + 15) / 16 * 16);
  }
  std::vector<size_t> order(buffer_count);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return plan.shared_bytes[x] < plan.shared_bytes[y]; });
  int64_t used = plan.scratch_bytes;
  for (size_t b : order) {
    const bool required = function.buffers[b].elements <= kSquareBufferElements;
    if (used + plan.shared_bytes[b] <= options.shared_memory_limit) {
      plan.shared_offset[b] = used;
      used += plan.shared_bytes[b];
    } else if (required) {
      int64_t needed = plan.scratch_bytes;
      for (size_t other = 0; other < buffer_count; ++other)
        if (function.buffers[other].elements <= kSquareBufferElements) needed += plan.shared_bytes[other];
      return "the m x m buffers need " + kib(needed) + " of shared memory (norm scratch and padded rows included), more than the " +
             kib(options.shared_memory_limit) + " budget";
    }
  }
  plan.total_shared = used;
  return "";
}

// Per-node views and the kernel text.
class Generator {
 public:
  Generator(const ir::Function& function, const Plan& plan)
      : function_(function), plan_(plan), views_(function.nodes.size()), carries_update_(update_carriers(function)),
        param_strides_(parameter_strides(function)) {}

  CudaProgram run() {
    CudaProgram program;
    program.batch = function_.batch;
    program.input_elements = function_.input_shape.elements();
    for (const auto& buffer : function_.buffers)
      program.buffer_bytes.push_back(buffer.elements * static_cast<int64_t>(size_in_bytes(buffer.type)) * function_.batch);

    Launch launch;
    launch.kernel = kernel_name(function_.name);
    launch.grid[0] = function_.batch;  // grid.x: up to 2^31-1 matrices (grid.z stops at 65535)
    launch.block = plan_.threads;
    launch.shared_bytes = 0;  // no static shared memory: everything is in the dynamic block
    launch.dynamic_shared_bytes = static_cast<int>(plan_.total_shared);
    const std::optional<ir::MuonStepSpec>& muon = function_.muon_step;
    if (muon) {
      launch.args = {{Slot::Kind::StepArgs, -1}};
      program.muon_step = true;
      program.step_args_bytes = function_.batch * ir::kMuonStepWords * 8;
    } else {
      launch.args = {{Slot::Kind::Input, -1}, {Slot::Kind::Output, -1}};
    }

    // Signature and per-matrix pointers. A Muon step reads its matrix's gradient, momentum and
    // parameter pointers and scalars from the argument block (ir/muon_step.h) instead of an input
    // and an output.
    std::ostringstream head;
    head << "extern \"C\" __global__ void __launch_bounds__(" << plan_.threads << ", 1) " << launch.kernel
         << (muon ? "(const oj::u64* __restrict__ args" : "(const float* __restrict__ input, float* __restrict__ output");
    std::ostringstream pointers;
    pointers << "  const long long z = blockIdx.x;  // this CTA's matrix\n"
             << "  extern __shared__ __align__(16) unsigned char shared_memory[];\n";
    if (muon)
      pointers << "  const oj::u64* const io = args + z * " << ir::kMuonStepWords << ";\n"
               << "  const grad_elem* const g = reinterpret_cast<const grad_elem*>(io[0]);\n"
               << "  float* const m = reinterpret_cast<float*>(io[1]);\n"
               << "  param_elem* const p = reinterpret_cast<param_elem*>(io[2]);\n"
               << "  const double beta = oj::f64_from_bits(io[3]), step = oj::f64_from_bits(io[4]), decay = oj::f64_from_bits(io[5]);\n";
    else
      pointers << "  const float* const in = input + z * " << function_.input_shape.elements() << "LL;\n";
    std::string shared_list, global_list;
    for (size_t b = 0; b < function_.buffers.size(); ++b) {
      const ir::Buffer& buffer = function_.buffers[b];
      const std::string storage = std::string(storage_tag(buffer.type)) + "::storage";
      if (plan_.shared_offset[b] >= 0) {
        pointers << "  " << storage << "* const buf" << b << " = reinterpret_cast<" << storage << "*>(shared_memory + " << plan_.shared_offset[b]
                 << ");  // shared, " << plan_.shared_bytes[b] << " bytes\n";
        shared_list += " buf" + std::to_string(b);
      } else {
        // No __restrict__ and no const: the kernel writes these and reads them back after a barrier,
        // which the non-coherent read-only path would not see.
        head << ", " << storage << "* global_buf" << b;
        pointers << "  " << storage << "* const buf" << b << " = global_buf" << b << " + z * " << buffer.elements << "LL;  // global\n";
        launch.args.push_back({Slot::Kind::Buffer, static_cast<int>(b)});
        global_list += " buf" + std::to_string(b);
      }
    }
    head << ") {\n";

    std::ostringstream body;
    int products = 0;
    for (size_t index = 0; index < function_.nodes.size(); ++index) {
      const ir::Node& node = function_.nodes[index];
      const std::string label = "%" + std::to_string(index) + (node.name.empty() ? "" : " " + node.name);
      View& out = views_[index];
      out.type = node.type;
      out.rows = node.shape.rows.size;
      out.cols = node.shape.cols.size;
      if (node.buffer >= 0) {
        const auto b = static_cast<size_t>(node.buffer);
        out.base = "buf" + std::to_string(b);
        const bool shared = plan_.shared_offset[b] >= 0;
        out.row_stride = shared ? shared_pitch(out.cols) : out.cols;
        out.even_base = shared || function_.buffers[b].elements % 2 == 0;
      }
      switch (node.kind) {
        case ir::OpKind::Input:
          // A Muon step's input is the gradient (read by the momentum's normalize only).
          out = row_major(muon ? "g" : "in", muon ? muon->grad : ScalarType::F32, out.rows, out.cols);
          break;
        case ir::OpKind::Momentum:
          out = operand(node, 0);
          out.momentum = true;
          break;
        case ir::OpKind::Update:
          if (!node.fused) body << update(node, label);  // else in the epilogue of the last X's producer
          break;
        case ir::OpKind::Transpose: out = operand(node, 0).transposed(); break;
        case ir::OpKind::Normalize: body << normalize(node, label, out); break;
        case ir::OpKind::LinComb:
          out.exactly_symmetric = node.shape.is_square();
          for (size_t k = 0; k < node.operands.size(); ++k) out.exactly_symmetric = out.exactly_symmetric && operand(node, k).exactly_symmetric;
          body << lincomb(node, label, out, carries_update_[index]);
          break;
        case ir::OpKind::Gemm:
          ++products;
          body << gemm(node, label, out, carries_update_[index]);
          break;
        case ir::OpKind::Output:
          out = row_major("out", ScalarType::F32, out.rows, out.cols);
          program.output_elements = out.rows * out.cols;
          pointers << "  float* const out = output + z * " << out.rows * out.cols << "LL;\n";
          body << elementwise("output " + label, out, [&] { return "    " + out.at("i", "j") + " = " + load(operand(node, 0)) + ";\n"; });
          break;
      }
    }

    std::ostringstream source;
    source << "// Generated by orthojit: the fused small-matrix kernel of '" << function_.name << "' (" << function_.input_shape.to_string() << " x "
           << function_.batch << ", " << ir::to_string(function_.strategy.kind) << "): one CTA per matrix, " << plan_.threads << " threads, "
           << plan_.tile << "x" << plan_.tile << " warp tiles.\n"
           << "// Shared:" << (shared_list.empty() ? " -" : shared_list) << "; global:" << (global_list.empty() ? " -" : global_list) << ".\n"
           << "#include \"orthojit_device.cuh\"\n\n";
    if (muon)
      source << "// Muon step: " << muon->describe() << "\n"
             << storage_access_functions("grad", muon->grad, "the gradient") << storage_access_functions("param", muon->param, "the parameter")
             << muon_device_functions(muon->ema, muon->nesterov) << "typedef " << storage_element_type(muon->param) << " param_elem;\ntypedef "
             << storage_element_type(muon->grad) << " grad_elem;\n\n";
    source << head.str() << "  constexpr int THREADS = " << plan_.threads << ";\n"
           << pointers.str() << body.str() << "}\n";
    program.source = source.str();
    launch.summary = std::string(muon ? "fused Muon step " : "fused ") + function_.name + " " + function_.input_shape.to_string() + " x" + std::to_string(function_.batch) + ": " +
                     std::to_string(products) + " products, " + std::to_string(plan_.threads) + " threads, tile " + std::to_string(plan_.tile) +
                     ", " + std::to_string(plan_.total_shared) + " B shared (" + (shared_list.empty() ? "-" : shared_list.substr(1)) + "), global (" +
                     (global_list.empty() ? "-" : global_list.substr(1)) + ")";
    program.launches.push_back(launch);
    return program;
  }

 private:
  const View& operand(const ir::Node& node, size_t k) const { return views_[static_cast<size_t>(node.operands[k])]; }

  static std::string load(const View& view) { return std::string(storage_tag(view.type)) + "::load(" + view.at("i", "j") + ")"; }

  // A CTA-wide loop over the elements (i, j) of `destination` (its row-major order: consecutive
  // threads take consecutive columns), `inner` the loop body; ends the phase with a barrier.
  template <class Inner>
  static std::string elementwise(const std::string& comment, const View& destination, Inner inner) {
    std::ostringstream code;
    code << "  // " << comment << "\n"
         << "  for (int e = static_cast<int>(threadIdx.x); e < " << destination.rows * destination.cols << "; e += THREADS) {\n"
         << "    const int i = e / " << destination.cols << ", j = e % " << destination.cols << ";\n"
         << inner() << "  }\n  __syncthreads();\n";
    return code.str();
  }

  // Statements that write the value `v` (f32) of element (i, j) of the last X into the parameter:
  // rounded to X's storage type first (what the orthogonalizer's output would hold), then
  // p ← p·decay − step·X rounded once to p's type (ir/muon_step.h's order). (i, j) index the
  // producer's frame (param_strides_) unless `strides` says otherwise.
  std::string update_store(ScalarType x_type, const std::string& indent, std::pair<int64_t, int64_t> strides = {-1, -1}) const {
    if (strides.first < 0) strides = param_strides_;
    std::ostringstream code;
    code << indent << "const float o = " << storage_tag(x_type) << "::load(" << storage_tag(x_type) << "::store(v));\n"
         << indent << "const long long pi = static_cast<long long>(i) * " << strides.first << "LL + static_cast<long long>(j) * " << strides.second
         << "LL;\n"
         << indent << "p[pi] = param_store(oj_parameter_next(param_load(p[pi]), decay, step, o));\n";
    return code.str();
  }

  // An update the epilogue could not take (its X has other users): a phase over the stored X, in
  // the parameter's own frame (the update's operand is X as the user's matrix).
  std::string update(const ir::Node& node, const std::string& label) const {
    const View& x = operand(node, 0);
    return elementwise("update " + label + " (p ← p·decay − step·X)", x, [&] {
      return "    const float v = " + load(x) + ";\n" + update_store(x.type, "    ", {function_.input_shape.cols.size, 1});
    });
  }

  // The offset of element (i, j) of `x` (a momentum view) in g and M, and g's value there as the
  // C++ rules read it (into f32 first: exact for bf16 and f16).
  static std::string momentum_offset(const View& x) {
    return "      const long long off = static_cast<long long>(i) * " + std::to_string(x.row_stride) + "LL + static_cast<long long>(j) * " +
           std::to_string(x.col_stride) + "LL;\n      const double gi = static_cast<double>(static_cast<float>(grad_load(g[off])));\n";
  }

  // normalize(U) with the Muon momentum fused in: the first pass computes M ← momentum(M, g),
  // writes it back and takes U's largest |value|; the next passes recompute U from g and the new
  // M (each thread reads back only the elements it wrote: the loops deal elements the same way),
  // so U is never stored, as in the per-op kernels (cuda_codegen.cpp).
  std::string momentum_normalize(const ir::Node& node, const std::string& label, const View& out) const {
    const View& x = operand(node, 0);
    const bool f64 = node.norm_type == ScalarType::F64;
    const char* acc = f64 ? "double" : "float";
    const dsl::Normalization& norm = node.normalization;
    const std::string loop = "    for (int e = static_cast<int>(threadIdx.x); e < " + std::to_string(x.rows * x.cols) + "; e += THREADS) {\n" +
                             "      const int i = e / " + std::to_string(x.cols) + ", j = e % " + std::to_string(x.cols) + ";\n" + momentum_offset(x);
    std::ostringstream code;
    code << "  // normalize " << label << " of the Muon momentum: M written back, U recomputed, sum of squares in " << acc << "\n"
         << "  {\n    " << acc << " largest = 0;\n"
         << loop << "      const float next = oj_momentum_next(gi, m[off], beta);\n      m[off] = next;\n"
         << "      largest = fmax(largest, (" << acc << ")fabsf(oj_update_value(gi, next, beta)));\n    }\n"
         << "    largest = oj::block_max<" << acc << ", THREADS>(largest, reinterpret_cast<" << acc << "*>(shared_memory));\n"
         << "    const float scale = oj::norm_scale(largest);\n"
         << "    " << acc << " sum = 0;\n"
         << loop << "      const " << acc << " v = oj_update_value(gi, m[off], beta) * scale;\n      sum = " << rounded_add_product("sum", "v", "v", f64) << ";\n    }\n"
         << "    sum = oj::block_sum<" << acc << ", THREADS>(sum, reinterpret_cast<" << acc << "*>(shared_memory));\n"
         << "    const " << acc << " norm = sqrt(sum) * (" << acc << ")" << accumulator_literal(norm.safety, f64) << ";\n"
         << "    const " << acc << " eps = (" << acc << ")" << accumulator_literal(norm.eps, f64) << " * scale;\n"
         << "    const float denominator = (float)(" << (norm.mode == dsl::Normalization::Mode::Add ? rounded_add("norm", "eps", f64) : "(norm > eps ? norm : eps)")
         << ");\n"
         << loop << "      " << out.at("i", "j") << " = " << storage_tag(out.type) << "::store(oj_update_value(gi, m[off], beta) * scale / denominator);\n    }\n"
         << "  }\n  __syncthreads();\n";
    return code.str();
  }

  std::string normalize(const ir::Node& node, const std::string& label, const View& out) const {
    const View& x = operand(node, 0);
    if (x.momentum) return momentum_normalize(node, label, out);
    const bool f64 = node.norm_type == ScalarType::F64;
    const char* acc = f64 ? "double" : "float";
    const dsl::Normalization& norm = node.normalization;
    std::ostringstream code;
    // Same arithmetic as generate_cuda: sum of squares in `acc`, norm·safety, then + eps or
    // max(·, eps), the denominator rounded to f32, every element divided in f32 and cast once.
    // The values scaled by the power of two of ir/norm_scale.h first: the same bits where the
    // plain sum is representable, the right norm where it would overflow or underflow.
    code << "  // normalize " << label << ": sum of squares in " << acc << ", a fixed-order block reduction\n"
         << "  {\n    " << acc << " largest = 0;\n"
         << "    for (int e = static_cast<int>(threadIdx.x); e < " << x.rows * x.cols << "; e += THREADS) {\n"
         << "      const int i = e / " << x.cols << ", j = e % " << x.cols << ";\n"
         << "      largest = fmax(largest, (" << acc << ")fabsf(" << load(x) << "));\n    }\n"
         << "    largest = oj::block_max<" << acc << ", THREADS>(largest, reinterpret_cast<" << acc << "*>(shared_memory));\n"
         << "    const float scale = oj::norm_scale(largest);\n"
         << "    " << acc << " sum = 0;\n"
         << "    for (int e = static_cast<int>(threadIdx.x); e < " << x.rows * x.cols << "; e += THREADS) {\n"
         << "      const int i = e / " << x.cols << ", j = e % " << x.cols << ";\n"
         << "      const " << acc << " v = " << load(x) << " * scale;\n      sum = " << rounded_add_product("sum", "v", "v", f64) << ";\n    }\n"
         << "    sum = oj::block_sum<" << acc << ", THREADS>(sum, reinterpret_cast<" << acc << "*>(shared_memory));\n"
         << "    const " << acc << " norm = sqrt(sum) * (" << acc << ")" << accumulator_literal(norm.safety, f64) << ";\n"
         << "    const " << acc << " eps = (" << acc << ")" << accumulator_literal(norm.eps, f64) << " * scale;\n"
         << "    const float denominator = (float)(" << (norm.mode == dsl::Normalization::Mode::Add ? rounded_add("norm", "eps", f64) : "(norm > eps ? norm : eps)")
         << ");\n"
         << "    for (int e = static_cast<int>(threadIdx.x); e < " << out.rows * out.cols << "; e += THREADS) {\n"
         << "      const int i = e / " << out.cols << ", j = e % " << out.cols << ";\n"
         << "      " << out.at("i", "j") << " = " << storage_tag(out.type) << "::store(" << load(x) << " * scale / denominator);\n    }\n"
         << "  }\n  __syncthreads();\n";
    return code.str();
  }

  std::string lincomb(const ir::Node& node, const std::string& label, const View& out, bool carries_update) const {
    return elementwise(std::string(carries_update ? "lincomb + Muon update " : "lincomb ") + label, out, [&] {
      std::string inner = "    float v = i == j ? " + literal(node.gamma) + " : 0.0f;\n";
      for (size_t k = 0; k < node.operands.size(); ++k) inner += "    v = " + rounded_add_product("v", literal(node.coefficients[k]), load(operand(node, k))) + ";\n";
      if (carries_update) return inner + update_store(out.type, "    ");
      return inner + "    " + out.at("i", "j") + " = " + storage_tag(out.type) + "::store(v);\n";
    });
  }

  // The source of MMA fragment pairs along k for an operand whose second index is k. An exactly
  // symmetric square value reads as its own transpose, so a column-major walk becomes a row walk
  // (one 32-bit load per pair instead of two 16-bit ones).
  static std::string fragment_source(View view) {
    if (view.exactly_symmetric && view.col_stride != 1 && view.row_stride == 1) view = view.transposed();
    const bool pair_aligned = view.col_stride == 1 && view.row_stride % 2 == 0 && view.even_base;
    return "oj::FragmentSource<" + std::to_string(view.rows) + ", " + std::to_string(view.cols) + ", " + std::to_string(view.row_stride) + ", " +
           std::to_string(view.col_stride) + ", " + (pair_aligned ? "true" : "false") + ">{" + view.base + "}";
  }

  std::string gemm(const ir::Node& node, const std::string& label, View& out, bool carries_update) const {
    const View& a = operand(node, 0);
    const View& b = operand(node, 1);
    const bool has_c = node.operands.size() == 3;
    const int64_t m = a.rows, k = a.cols, n = b.cols;
    const bool upper = node.symmetric && function_.strategy.triangular_products && m == n;
    out.exactly_symmetric = upper;  // the mirror store makes D bit-for-bit symmetric
    std::ostringstream code;
    code << "  // gemm " << label << " = " << node.alpha << "·A·B" << (has_c ? " + " + std::to_string(node.beta) + "·C" : "")
         << (node.gamma != 0 ? " + " + std::to_string(node.gamma) + "·I" : "") << ": " << m << "x" << n << "x" << k << (upper ? ", upper tiles + mirror" : "")
         << "\n"
         << "  oj::cta_product<" << m << ", " << n << ", " << k << ", " << plan_.tile << ", THREADS / 32, " << (upper ? "true" : "false") << ", "
         << (a.type == ScalarType::BF16 ? "true" : "false") << ">(\n"
         << "      " << fragment_source(a) << ",\n"
         << "      " << fragment_source(b.transposed()) << ",\n"
         << "      [&](int i, int j, float acc) {\n"
         << "        float v = " << rounded_product(literal(node.alpha), "acc") << ";\n";
    if (has_c) code << "        v = " << rounded_add_product("v", literal(node.beta), load(operand(node, 2))) << ";\n";
    if (node.gamma != 0) code << "        if (i == j) v += " << literal(node.gamma) << ";\n";
    if (carries_update) {  // the last X goes into the parameter, not into a buffer
      if (upper) throw std::logic_error("fused-small: a Muon update on a triangular product");
      code << update_store(out.type, "        ");
    } else {
      code << "        const auto stored = " << storage_tag(out.type) << "::store(v);\n"
           << "        " << out.at("i", "j") << " = stored;\n";
      if (upper) code << "        if (i != j) " << out.at("j", "i") << " = stored;\n";
    }
    code << "      });\n  __syncthreads();\n";
    return code.str();
  }

  const ir::Function& function_;
  const Plan& plan_;
  std::vector<View> views_;
  std::vector<bool> carries_update_;
  std::pair<int64_t, int64_t> param_strides_;  // the parameter's (row, column) strides in the last X's frame
};

}  // namespace

std::string fused_small_ineligible_reason(const ir::Function& scheduled, const FusedSmallOptions& options) {
  Plan plan;
  return make_plan(scheduled, options, plan);
}

CudaProgram generate_fused_small_cuda(const ir::Function& scheduled, const FusedSmallOptions& options) {
  Plan plan;
  if (const std::string reason = make_plan(scheduled, options, plan); !reason.empty())
    throw std::invalid_argument("fused small-matrix kernel for '" + scheduled.name + "': " + reason);
  return Generator(scheduled, plan).run();
}

}  // namespace orthojit::cuda
