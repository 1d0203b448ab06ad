// The persistent triangular tile schedule (see tile_schedule.h).
#include "cuda/tile_schedule.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

namespace orthojit::cuda {

std::pair<int, int> TriangularOrder::tile(int64_t index) const {
  if (tiles < 1 || group < 1) throw std::invalid_argument("triangular order: tiles and group must be positive");
  if (index < 0 || index >= upper_tiles())
    throw std::out_of_range("triangular order: item " + std::to_string(index) + " of " + std::to_string(upper_tiles()));
  // The same steps as oj::grouped_upper_tile on the device: skip whole bands, then the band's
  // triangle (column c holds c + 1 tiles), then its rectangle (G tiles per column).
  int first_row = 0;
  while (true) {
    const int height = std::min(group, tiles - first_row);
    const int64_t triangle = int64_t{height} * (height + 1) / 2, band = triangle + int64_t{height} * (tiles - first_row - height);
    if (index < band) {
      if (index < triangle) {
        int column = 0;
        while (int64_t{column + 1} * (column + 2) / 2 <= index) ++column;
        return {first_row + static_cast<int>(index - int64_t{column} * (column + 1) / 2), first_row + column};
      }
      index -= triangle;
      return {first_row + static_cast<int>(index % height), first_row + height + static_cast<int>(index / height)};
    }
    index -= band;
    first_row += height;
  }
}

int triangular_group(int tiles, int64_t wave) {
  const int root = static_cast<int>(std::lround(std::sqrt(static_cast<double>(std::max<int64_t>(wave, 1)))));
  return std::clamp(root, 1, std::max(tiles, 1));
}

int resident_ctas_per_sm(int threads, int shared_bytes, int registers) {
  if (threads < 1) throw std::invalid_argument("resident CTAs: a CTA has at least one thread");
  int ctas = std::min(32, 2048 / threads);
  if (shared_bytes > 0) ctas = std::min(ctas, 227 * 1024 / shared_bytes);
  // Registers are allocated per warp in units of 256 (8 per thread, rounded up).
  const int per_thread = (std::max(registers, 1) + 7) / 8 * 8;
  ctas = std::min(ctas, 65536 / (per_thread * ((threads + 31) / 32 * 32)));
  return std::max(ctas, 1);
}

int64_t persistent_ctas(int64_t work_items, int multiprocessors, int resident_per_sm) {
  return std::max<int64_t>(1, std::min<int64_t>(work_items, int64_t{std::max(multiprocessors, 1)} * std::max(resident_per_sm, 1)));
}

int64_t panels_in_wave(const TriangularOrder& order, int64_t first, int64_t wave) {
  // Both operands are panels of one matrix (X·Xᵀ reads row panels ti and tj of X; A·A with A
  // symmetric reads row panel ti and column panel tj, which is row panel tj transposed).
  std::set<int> panels;
  for (int64_t index = first; index < std::min(order.upper_tiles(), first + wave); ++index) {
    const auto [ti, tj] = order.tile(index);
    panels.insert(ti);
    panels.insert(tj);
  }
  return static_cast<int64_t>(panels.size());
}

}  // namespace orthojit::cuda
