// The host loops of the vendor engines (see vendor_host_loops.h).
#include "cpu/vendor_host_loops.h"

#include <algorithm>

#include "cpu/element_types.h"
#include "cpu/vendor_gemm.h"

namespace orthojit::cpu {

// Here rather than in an engine's file: this one is built whatever libraries the build has.
const char* to_string(ProductEngine engine) {
  switch (engine) {
    case ProductEngine::Jit: return "jit";
    case ProductEngine::OpenBlas: return "openblas";
    case ProductEngine::OneDnn: return "onednn";
  }
  return "?";
}

void for_row_chunks(ThreadPool* pool, int64_t rows, const std::function<void(int64_t, int64_t)>& body) {
  if (rows <= 0) return;
  const int workers = pool ? pool->size() : 1;
  // Four chunks per worker: the dynamic hand-out evens out a slow worker; at least 8 rows each
  // so a small matrix is not split into tasks that cost more to hand out than to run.
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(4 * workers, rows / 8));
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  auto run = [&](int64_t chunk, int) {
    const int64_t begin = chunk * per_chunk, end = std::min(rows, begin + per_chunk);
    if (begin < end) body(begin, end);
  };
  if (pool && chunks > 1) pool->parallel_for(chunks, run);
  else
    for (int64_t chunk = 0; chunk < chunks; ++chunk) run(chunk, 0);
}

namespace {

// Rows [begin, end) of a rows×cols view of T into out (leading dimension ld), from column
// `first(i)` on.
template <typename T, typename First>
void widen_rows(const T* base, int64_t row_stride, int64_t col_stride, int64_t cols, int64_t begin, int64_t end, float* out, int64_t ld, First first) {
  for (int64_t i = begin; i < end; ++i) {
    const T* row = base + i * row_stride;
    float* target = out + i * ld;
    if (col_stride == 1)
      for (int64_t j = first(i); j < cols; ++j) target[j] = to_float(row[j]);  // unit stride: vectorized
    else
      for (int64_t j = first(i); j < cols; ++j) target[j] = to_float(row[j * col_stride]);
  }
}

}  // namespace

F32Operand f32_operand(const MatrixView& view, AlignedBuffer& scratch, ThreadPool* pool) {
  if (view.type == ScalarType::F32 && view.col_stride == 1) return {static_cast<const float*>(view.data), view.row_stride, false};
  if (view.type == ScalarType::F32 && view.row_stride == 1) return {static_cast<const float*>(view.data), view.col_stride, true};
  float* out = scratch.floats(view.rows * view.cols);
  // A transposed view (unit row stride) is widened as the row-major matrix it is stored as.
  const bool transposed = view.row_stride == 1 && view.col_stride != 1;
  const MatrixView stored = transposed ? view.transposed() : view;
  dispatch_storage_type(view.type, [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(stored.data);
    for_row_chunks(pool, stored.rows, [&](int64_t begin, int64_t end) {
      widen_rows(base, stored.row_stride, stored.col_stride, stored.cols, begin, end, out, stored.cols, [](int64_t) { return int64_t{0}; });
    });
  });
  return {out, stored.cols, transposed};
}

void copy_to_f32(const MatrixView& c, float* out, int64_t ld, bool upper, ThreadPool* pool) {
  dispatch_storage_type(c.type, [&](auto tag) {
    using T = decltype(tag);
    const T* base = static_cast<const T*>(c.data);
    for_row_chunks(pool, c.rows, [&](int64_t begin, int64_t end) {
      widen_rows(base, c.row_stride, c.col_stride, c.cols, begin, end, out, ld, [&](int64_t i) { return upper ? std::min(i, c.cols) : int64_t{0}; });
    });
  });
}

void mirror_upper_to_lower(float* acc, int64_t n, int64_t ld, ThreadPool* pool) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  // Task = one block row of the lower triangle; the later ones are longer, and parallel_for hands
  // tasks out dynamically, so the workers stay even.
  auto mirror_block_row = [&](int64_t block_row, int) {
    const int64_t i0 = block_row * kBlock, i1 = std::min(n, i0 + kBlock);
    for (int64_t j0 = 0; j0 <= i0; j0 += kBlock) {
      const int64_t j1 = std::min(n, j0 + kBlock);
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < std::min(j1, i); ++j) acc[i * ld + j] = acc[j * ld + i];
    }
  };
  if (pool && blocks > 1) pool->parallel_for(blocks, mirror_block_row);
  else
    for (int64_t block_row = 0; block_row < blocks; ++block_row) mirror_block_row(block_row, 0);
}

namespace {

template <typename TD, typename TC>
void epilogue_rows(const float* acc, int64_t ld, const GemmProblem& problem, int64_t begin, int64_t end) {
  const MatrixView& d = problem.d;
  TD* d_base = static_cast<TD*>(d.data);
  const TC* c_base = problem.c ? static_cast<const TC*>(problem.c->data) : nullptr;
  const int64_t c_rs = problem.c ? problem.c->row_stride : 0, c_cs = problem.c ? problem.c->col_stride : 0;
  const float alpha = problem.alpha, beta = problem.beta, gamma = problem.gamma;
  for (int64_t i = begin; i < end; ++i) {
    const float* a_row = acc + i * ld;
    TD* d_row = d_base + i * d.row_stride;
    const TC* c_row = c_base ? c_base + i * c_rs : nullptr;
    if (!c_row) {
      if (d.col_stride == 1)
        for (int64_t j = 0; j < d.cols; ++j) d_row[j] = from_float<TD>(alpha * a_row[j]);
      else
        for (int64_t j = 0; j < d.cols; ++j) d_row[j * d.col_stride] = from_float<TD>(alpha * a_row[j]);
    } else if (d.col_stride == 1 && c_cs == 1) {
      for (int64_t j = 0; j < d.cols; ++j) d_row[j] = from_float<TD>(alpha * a_row[j] + beta * to_float(c_row[j]));
    } else {
      for (int64_t j = 0; j < d.cols; ++j) d_row[j * d.col_stride] = from_float<TD>(alpha * a_row[j] + beta * to_float(c_row[j * c_cs]));
    }
    if (gamma != 0 && i < d.cols) {
      // The diagonal element again, with γ before its one rounding (same f32 operation order as
      // the JIT epilogue: (α·acc + β·C) + γ).
      float value = alpha * a_row[i];
      if (c_row) value = value + beta * to_float(c_row[i * c_cs]);
      d_row[i * d.col_stride] = from_float<TD>(value + gamma);
    }
  }
}

}  // namespace

void store_epilogue(const float* acc, int64_t ld, const GemmProblem& problem, ThreadPool* pool) {
  dispatch_storage_type(problem.d.type, [&](auto d_tag) {
    using TD = decltype(d_tag);
    dispatch_storage_type(problem.c ? problem.c->type : ScalarType::F32, [&](auto c_tag) {
      using TC = decltype(c_tag);
      for_row_chunks(pool, problem.d.rows, [&](int64_t begin, int64_t end) { epilogue_rows<TD, TC>(acc, ld, problem, begin, end); });
    });
  });
}

void add_to_diagonal(const MatrixView& d, float gamma) {
  if (gamma == 0) return;
  float* base = static_cast<float*>(d.data);
  for (int64_t i = 0; i < std::min(d.rows, d.cols); ++i) base[i * (d.row_stride + d.col_stride)] += gamma;
}

}  // namespace orthojit::cpu
