// Small 16-bit operands of FMA products widened whole to f32 copies (OperandLayouts in
// gemm_driver.h; docs/cpu-backend.md, "Small 16-bit operands are widened first").
#include "cpu/operand_widening.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cpu/aligned_buffer.h"
#include "cpu/element_types.h"
#include "support/host_clones.h"

namespace orthojit::cpu {
namespace {

// Memory rows [row_begin, row_end) of a 16-bit matrix (rows of `length` elements, `stride` apart)
// widened to f32 rows `out_stride` apart: contiguous loads and stores, vectorized by the compiler.
template <typename T>
ORTHOJIT_HOST_CLONES void widen_rows(const T* source, int64_t stride, int64_t length, int64_t row_begin, int64_t row_end, float* out,
                                     int64_t out_stride) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const T* __restrict from = source + row * stride;
    float* __restrict to = out + row * out_stride;
    for (int64_t j = 0; j < length; ++j) to[j] = to_float(from[j]);
  }
}

// Whether `b` reads the same storage as `a` (transposed: as aᵀ), element for element.
bool reads_same_storage(const MatrixView& a, const MatrixView& b, bool transposed) {
  if (b.data != a.data || b.type != a.type) return false;
  if (!transposed) return b.rows == a.rows && b.cols == a.cols && b.row_stride == a.row_stride && b.col_stride == a.col_stride;
  return b.rows == a.cols && b.cols == a.rows && b.row_stride == a.col_stride && b.col_stride == a.row_stride;
}

}  // namespace

// The product with its small 16-bit operands replaced by f32 copies (OperandLayouts), in their own
// orientation and with padded strides (accumulator_stride: no L1 set conflicts between the rows
// the kernel reads together). The copies live in this thread's scratch until its next product.
GemmProblem widened_operands(CpuIsa isa, const GemmBlocking& blocking, const GemmProblem& problem, const OperandLayouts& layouts, ThreadPool* pool) {
  // Xᵀ of X·Xᵀ shares X's copy where its own copy would have the transposed orientation (not for
  // a column vector X, whose Xᵀ has unit strides both ways and is copied, and read in place, as a
  // row), so that the copies have the layouts the compiled kernels were chosen for.
  struct Widening {
    const MatrixView* source = nullptr;
    float* out = nullptr;
    int64_t memory_rows = 0, length = 0, stride = 0, out_stride = 0;
  };
  auto plan = [](const MatrixView& view, AlignedBuffer& buffer) {
    Widening widening;
    const bool row_major = view.col_stride == 1;
    widening.source = &view;
    widening.memory_rows = row_major ? view.rows : view.cols;
    widening.length = row_major ? view.cols : view.rows;
    widening.stride = row_major ? view.row_stride : view.col_stride;
    widening.out_stride = accumulator_stride(widening.length);
    widening.out = buffer.floats(widening.memory_rows * widening.out_stride);
    return widening;
  };
  auto widened_view = [](const Widening& widening) {
    const MatrixView& view = *widening.source;
    const bool row_major = view.col_stride == 1;
    return MatrixView{widening.out, ScalarType::F32, view.rows, view.cols, row_major ? widening.out_stride : 1, row_major ? 1 : widening.out_stride};
  };
  thread_local AlignedBuffer a_wide_scratch, b_wide_scratch;
  const bool both_widened = layouts.a_widened && layouts.b_widened;
  const bool b_is_a_transposed = both_widened && reads_same_storage(problem.a, problem.b, true) &&
                                 (problem.a.col_stride == 1) == (problem.b.col_stride != 1);
  // A·A (the standard step's second product) reads one matrix twice: one copy.
  const bool b_is_a = both_widened && reads_same_storage(problem.a, problem.b, false);
  std::vector<Widening> widenings;
  if (layouts.a_widened) widenings.push_back(plan(problem.a, a_wide_scratch));
  if (layouts.b_widened && !b_is_a_transposed && !b_is_a) widenings.push_back(plan(problem.b, b_wide_scratch));
  const int workers = pool ? pool->size() : 1;
  struct Task {
    const Widening* widening;
    int64_t row_begin, row_end;  // memory rows
  };
  std::vector<Task> tasks;
  for (const Widening& widening : widenings) {
    const int64_t chunk = std::max<int64_t>(8, widening.memory_rows / (2 * workers));
    for (int64_t row = 0; row < widening.memory_rows; row += chunk) tasks.push_back({&widening, row, std::min(widening.memory_rows, row + chunk)});
  }
  auto widen_task = [&](int64_t index, int) {
    const Task& task = tasks[static_cast<size_t>(index)];
    const Widening& widening = *task.widening;
    dispatch_storage_type(widening.source->type, [&](auto tag) {
      using T = decltype(tag);
      widen_rows(static_cast<const T*>(widening.source->data), widening.stride, widening.length, task.row_begin, task.row_end, widening.out,
                 widening.out_stride);
    });
  };
  if (pool) pool->parallel_for(static_cast<int64_t>(tasks.size()), widen_task);
  else for (int64_t task = 0; task < static_cast<int64_t>(tasks.size()); ++task) widen_task(task, 0);
  GemmProblem widened = problem;
  size_t next = 0;
  if (layouts.a_widened) widened.a = widened_view(widenings[next++]);
  if (layouts.b_widened) widened.b = b_is_a_transposed ? widened.a.transposed() : b_is_a ? widened.a : widened_view(widenings[next++]);
  const OperandLayouts copies = choose_operand_layouts(isa, blocking, widened.a, widened.b);
  if (copies.a_direct != layouts.a_direct || copies.b_direct != layouts.b_direct)
    throw std::logic_error("gemm: the widened operands' layouts differ from those their kernels were chosen for");
  return widened;
}

}  // namespace orthojit::cpu
