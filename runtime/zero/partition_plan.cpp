// The ZeRO partition planner (see partition_plan.h).
#include "runtime/zero/partition_plan.h"

#include <algorithm>
#include <queue>
#include <set>
#include <numeric>
#include <stdexcept>

namespace orthojit::runtime {

const char* to_string(OrthogonalizationMode mode) { return mode == OrthogonalizationMode::DeepSpeed ? "deepspeed" : "balanced"; }

double PartitionPlan::ideal_cost() const {
  // Each matrix once, spread evenly (deepspeed mode computes straddlers more than once).
  double once = 0;
  for (const PlannedTensor& tensor : tensors) once += tensor.cost;
  return ranks.empty() ? 0 : once / static_cast<double>(ranks.size());
}

double PartitionPlan::max_cost() const {
  double most = 0;
  for (const RankSummary& rank : ranks) most = std::max(most, rank.orthogonalization_cost);
  return most;
}

double PartitionPlan::mean_cost() const {
  if (ranks.empty()) return 0;
  double total = 0;
  for (const RankSummary& rank : ranks) total += rank.orthogonalization_cost;
  return total / static_cast<double>(ranks.size());
}

PartitionPlan plan_partitions(const std::vector<PlanTensor>& tensors, const PlanSettings& settings) {
  if (settings.world < 1) throw std::invalid_argument("the world size must be at least 1 (got " + std::to_string(settings.world) + ")");
  if (settings.stage < 1 || settings.stage > 3) throw std::invalid_argument("ZeRO stage must be 1, 2 or 3 (got " + std::to_string(settings.stage) + ")");
  if (settings.alignment < 1) throw std::invalid_argument("the alignment must be at least 1 element");
  PartitionPlan plan;
  plan.settings = settings;
  const int64_t world = settings.world, alignment = settings.alignment;
  int64_t offset = 0;
  for (const PlanTensor& tensor : tensors) {
    if (tensor.elements <= 0) throw std::invalid_argument("tensor '" + tensor.name + "' has no elements");
    if (tensor.muon && tensor.batch * tensor.rows * tensor.cols != tensor.elements)
      throw std::invalid_argument("tensor '" + tensor.name + "': " + std::to_string(tensor.batch) + " x " + std::to_string(tensor.rows) + " x " +
                                  std::to_string(tensor.cols) + " matrices do not make its " + std::to_string(tensor.elements) + " elements");
    offset = (offset + alignment - 1) / alignment * alignment;
    PlannedTensor planned;
    planned.tensor = tensor;
    planned.offset = offset;
    if (tensor.muon) {
      const double m = static_cast<double>(std::min(tensor.rows, tensor.cols)), n = static_cast<double>(std::max(tensor.rows, tensor.cols));
      planned.cost = static_cast<double>(tensor.batch) * m * m * n;
    }
    plan.tensors.push_back(planned);
    offset += tensor.elements;
  }
  const int64_t unit = world * alignment;
  plan.padded_elements = std::max<int64_t>(unit, (offset + unit - 1) / unit * unit);
  plan.partition_elements = plan.padded_elements / world;
  plan.ranks.resize(static_cast<size_t>(world));
  for (int64_t rank = 0; rank < world; ++rank) {
    plan.ranks[static_cast<size_t>(rank)].begin = rank * plan.partition_elements;
    plan.ranks[static_cast<size_t>(rank)].end = (rank + 1) * plan.partition_elements;
  }
  auto slice = [&](const PlannedTensor& tensor, int rank) {  // elements of `tensor` in `rank`'s partition
    const RankSummary& summary = plan.ranks[static_cast<size_t>(rank)];
    return std::max<int64_t>(0, std::min(summary.end, tensor.offset + tensor.tensor.elements) - std::max(summary.begin, tensor.offset));
  };
  for (PlannedTensor& tensor : plan.tensors) {
    const int first = static_cast<int>(tensor.offset / plan.partition_elements);
    const int last = static_cast<int>((tensor.offset + tensor.tensor.elements - 1) / plan.partition_elements);
    for (int rank = first; rank <= last; ++rank) tensor.owners.push_back(rank);
  }
  // Who orthogonalizes what.
  if (settings.mode == OrthogonalizationMode::DeepSpeed) {
    for (PlannedTensor& tensor : plan.tensors)
      if (tensor.tensor.muon) tensor.orthogonalizers = tensor.owners;
  } else {
    // Longest processing time first over the matrices (each of a batch its own unit), the
    // costliest first. A matrix goes to its least loaded owner when that keeps the owner within
    // 5% of the ideal share (nothing to move: the owner holds the gradient and keeps the
    // momentum), else to the least loaded rank (LPT proper). Ties go to the lower rank, so every
    // rank computes the same plan. The least loaded rank comes from a heap: 58 layers x 256
    // experts on 1024 ranks are 15k units.
    struct Unit {
      size_t tensor;
      int64_t matrix;
      double cost;
    };
    std::vector<Unit> units;
    double total_cost = 0;
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      PlannedTensor& tensor = plan.tensors[i];
      if (!tensor.tensor.muon) continue;
      tensor.matrix_orthogonalizers.assign(static_cast<size_t>(tensor.tensor.batch), 0);
      for (int64_t b = 0; b < tensor.tensor.batch; ++b) units.push_back({i, b, tensor.cost / static_cast<double>(tensor.tensor.batch)});
      total_cost += tensor.cost;
    }
    const double ideal = total_cost / static_cast<double>(world);
    std::stable_sort(units.begin(), units.end(), [](const Unit& a, const Unit& b) { return a.cost > b.cost; });
    std::vector<double> load(static_cast<size_t>(world), 0.0);
    // (load, rank), smallest first; entries go stale when a rank's load changes and are skipped.
    using Entry = std::pair<double, int>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> least;
    for (int rank = 0; rank < world; ++rank) least.push({0.0, rank});
    for (const Unit& work : units) {
      PlannedTensor& tensor = plan.tensors[work.tensor];
      const int64_t matrix_elements = tensor.tensor.rows * tensor.tensor.cols;
      const int64_t first_element = tensor.offset + work.matrix * matrix_elements;
      const int first_owner = static_cast<int>(first_element / plan.partition_elements);
      const int last_owner = static_cast<int>((first_element + matrix_elements - 1) / plan.partition_elements);
      int owner = first_owner;
      for (int rank = first_owner; rank <= last_owner; ++rank)
        if (load[static_cast<size_t>(rank)] < load[static_cast<size_t>(owner)]) owner = rank;
      int best = owner;
      if (load[static_cast<size_t>(owner)] + work.cost > 1.05 * ideal) {
        while (least.top().first != load[static_cast<size_t>(least.top().second)]) least.pop();  // stale
        best = least.top().second;
      }
      tensor.matrix_orthogonalizers[static_cast<size_t>(work.matrix)] = best;
      load[static_cast<size_t>(best)] += work.cost;
      least.push({load[static_cast<size_t>(best)], best});
    }
    for (PlannedTensor& tensor : plan.tensors) {
      if (!tensor.tensor.muon) continue;
      std::set<int> ranks(tensor.matrix_orthogonalizers.begin(), tensor.matrix_orthogonalizers.end());
      tensor.orthogonalizers.assign(ranks.begin(), ranks.end());
    }
  }
  // Per-rank work and memory.
  const bool deepspeed = settings.mode == OrthogonalizationMode::DeepSpeed;
  int64_t straddling_gather = 0, balanced_gather = 0, balanced_scatter = 0;
  for (const PlannedTensor& tensor : plan.tensors) {
    if (!tensor.tensor.muon) {
      for (int rank : tensor.owners) plan.ranks[static_cast<size_t>(rank)].optimizer_bytes += settings.state_bytes_adam * slice(tensor, rank);
      continue;
    }
    const int64_t matrix_elements = tensor.tensor.rows * tensor.tensor.cols;
    const double matrix_cost = tensor.cost / static_cast<double>(tensor.tensor.batch);
    if (deepspeed) {
      for (int rank : tensor.orthogonalizers) {
        plan.ranks[static_cast<size_t>(rank)].orthogonalization_cost += tensor.cost;
        plan.ranks[static_cast<size_t>(rank)].matrices += static_cast<int>(tensor.tensor.batch);
      }
    } else {
      for (int64_t b = 0; b < tensor.tensor.batch; ++b) {
        const int rank = tensor.matrix_orthogonalizers[static_cast<size_t>(b)];
        plan.ranks[static_cast<size_t>(rank)].orthogonalization_cost += matrix_cost;
        plan.ranks[static_cast<size_t>(rank)].matrices += 1;
        // U's pieces to the orthogonalizer and O's back: what it does not hold of the matrix.
        const int64_t begin = tensor.offset + b * matrix_elements, end = begin + matrix_elements;
        const RankSummary& target = plan.ranks[static_cast<size_t>(rank)];
        const int64_t held = std::max<int64_t>(0, std::min(target.end, end) - std::max(target.begin, begin));
        balanced_gather += matrix_elements - held;
        balanced_scatter += matrix_elements - held;
      }
    }
    for (int rank : tensor.owners) {
      // deepspeed: a full momentum copy on every owner; balanced: momentum of the slice only.
      plan.ranks[static_cast<size_t>(rank)].optimizer_bytes += settings.state_bytes_muon * (deepspeed ? tensor.tensor.elements : slice(tensor, rank));
      // deepspeed, stages 2-3: every owner of a straddler receives the pieces it lacks.
      if (deepspeed && tensor.straddles()) straddling_gather += tensor.tensor.elements - slice(tensor, rank);
    }
  }
  const int64_t partition = plan.partition_elements, padded = plan.padded_elements;
  for (RankSummary& rank : plan.ranks) {
    rank.gradient_begin = settings.stage >= 2 ? rank.begin : 0;
    rank.gradient_end = settings.stage >= 2 ? rank.end : padded;
  }
  if (deepspeed && settings.stage >= 2)
    for (const PlannedTensor& tensor : plan.tensors)
      if (tensor.tensor.muon)
        for (int owner : tensor.owners) {
          RankSummary& rank = plan.ranks[static_cast<size_t>(owner)];
          rank.gradient_begin = std::min(rank.gradient_begin, tensor.offset);
          rank.gradient_end = std::max(rank.gradient_end, tensor.offset + tensor.tensor.elements);
        }
  for (RankSummary& rank : plan.ranks) {
    rank.gradient_bytes = settings.gradient_bytes * (rank.gradient_end - rank.gradient_begin);
    rank.parameter_bytes = settings.parameter_bytes * (settings.stage >= 3 ? partition : padded);
  }
  // Bytes on the wire per step, summed over ranks (ring collectives: a reduce-scatter or an
  // all-gather of S bytes sends (N−1)/N·S per rank, an all-reduce twice that).
  const int64_t n = world;
  const int64_t gradient_total = settings.gradient_bytes * padded, parameter_total = settings.parameter_bytes * padded;
  if (settings.stage == 1)
    plan.collectives.push_back({"all-reduce gradients", 2 * (n - 1) * gradient_total, "2·(N−1)·G"});
  else
    plan.collectives.push_back({"reduce-scatter gradients", (n - 1) * gradient_total, "(N−1)·G"});
  if (deepspeed && settings.stage >= 2)
    plan.collectives.push_back({"gather straddling Muon gradients to their owners", settings.gradient_bytes * straddling_gather,
                                "Σ straddlers Σ owners (elements − own slice)·g"});
  if (!deepspeed) {
    plan.collectives.push_back({"gather Muon updates U to their orthogonalizer (f32)", 4 * balanced_gather, "Σ matrices (elements − what its orthogonalizer holds)·4"});
    plan.collectives.push_back({"scatter orthogonalized O to the owners (f32)", 4 * balanced_scatter, "Σ matrices (elements − what its orthogonalizer holds)·4"});
  }
  if (settings.stage <= 2)
    plan.collectives.push_back({"all-gather updated parameters", (n - 1) * parameter_total, "(N−1)·P"});
  else
    plan.collectives.push_back({"all-gather parameters for forward and backward", 2 * (n - 1) * parameter_total, "2·(N−1)·P"});
  return plan;
}

}  // namespace orthojit::runtime
