// `orthojit plan`: the ZeRO partition plan of a model for N ranks (runtime/zero/partition_plan.h).
#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "runtime/model_config.h"
#include "cli/python_plot.h"
#include "runtime/records.h"
#include "runtime/orthogonalize.h"
#include "runtime/zero/model_layout.h"
#include "runtime/zero/partition_plan.h"

namespace orthojit::cli {

const char* const kPlanHelp = R"(usage: orthojit plan --model CONFIG.json --world N --stage S [options]

Lays the model's parameters into ZeRO's flat buffer, splits it across N data-parallel ranks and
says who orthogonalizes each Muon matrix: in `deepspeed` mode every rank owning a piece of a
matrix computes all of it (as DeepSpeed does), in `balanced` mode each matrix is computed once,
on the rank longest-processing-time scheduling picks by its cost (batch·m²·n). Prints the
matrices that straddle partition boundaries, the orthogonalization work per rank (max and mean
against the ideal), the optimizer, gradient and parameter bytes per rank, and the bytes each
collective moves per step.

options:
  --model CONFIG.json   a Hugging Face config.json ("default": the embedded demo model)
  --world N             data-parallel ranks
  --stage S             ZeRO stage: 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)
  --mode M              deepspeed (default) or balanced
  --alignment A         elements every tensor starts on (default 1)
  --per-head            split attention projections into per-head blocks
  --bytes P,G           bytes per parameter and per gradient element (default 2,2: bf16)
  --plot FILE.png       draw the partition layout (matplotlib)
  --json                print the plan as JSON
)";

namespace {

// The flat buffer as one bar per rank, tensors colored by group, straddlers outlined.
const char* const kPlanPlotScript = R"PY(
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch
data = json.load(open(sys.argv[1]))
ranks, tensors, part = data["ranks"], data["tensors"], data["partition_elements"]
fig, (ax, bx) = plt.subplots(2, 1, figsize=(11, 2.2 + 0.45 * len(ranks)), gridspec_kw={"height_ratios": [len(ranks), 2]})
for t in tensors:
    begin, end = t["offset"], t["offset"] + t["elements"]
    color = "#4C72B0" if t["muon"] else "#DD8452"
    for r in t["owners"]:
        lo, hi = max(begin, r * part), min(end, (r + 1) * part)
        ax.barh(r, hi - lo, left=lo - r * part, color=color, edgecolor="red" if len(t["owners"]) > 1 else "white",
                linewidth=1.2 if len(t["owners"]) > 1 else 0.3)
ax.set_yticks(range(len(ranks)))
ax.set_yticklabels([f"rank {i}" for i in range(len(ranks))])
ax.invert_yaxis()
ax.set_xlabel("offset in the rank's partition (elements)")
ax.set_title(data["title"], fontsize=10)
ax.legend(handles=[Patch(color="#4C72B0", label="Muon matrix"), Patch(color="#DD8452", label="AdamW tensor"),
                   Patch(facecolor="white", edgecolor="red", label="straddles a boundary")], fontsize=8, loc="upper left",
          bbox_to_anchor=(1.01, 1.0))
costs = [r["orthogonalization_cost"] for r in ranks]
bx.bar(range(len(ranks)), costs, color="#55A868")
bx.axhline(data["ideal_cost"], color="black", linewidth=0.8, linestyle="--", label="ideal (each matrix once, even split)")
bx.set_ylabel("NS work")
bx.set_xticks(range(len(ranks)))
bx.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=130)
)PY";

std::string bytes_text(double bytes) {
  char text[32];
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  std::snprintf(text, sizeof text, unit ? "%.2f %s" : "%.0f %s", bytes, units[unit]);
  return text;
}

}  // namespace

int plan_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"model", "world", "stage", "mode", "alignment", "bytes", "plot"}, {"per-head", "json"});
  runtime::PlanSettings settings;
  settings.world = parse_count(arguments.require("world"), "world");
  settings.stage = parse_count(arguments.require("stage"), "stage");
  if (settings.world < 1) throw runtime::UsageError("--world must be at least 1");
  if (settings.stage < 1 || settings.stage > 3) throw runtime::UsageError("--stage must be 1, 2 or 3 (got " + std::to_string(settings.stage) + ")");
  const std::string mode = arguments.get("mode").value_or("deepspeed");
  settings.mode = runtime::parse_plan_mode(mode);
  if (auto alignment = arguments.get("alignment")) {
    settings.alignment = parse_count(*alignment, "alignment");
    if (settings.alignment < 1) throw runtime::UsageError("--alignment must be at least 1");
  }
  if (auto bytes = arguments.get("bytes")) {
    const auto values = parse_int_list(*bytes, "bytes");
    if (values.size() != 2 || values[0] < 1 || values[1] < 1) throw runtime::UsageError("--bytes takes two positive integers: P,G (e.g. 2,2 or 4,4)");
    settings.parameter_bytes = values[0];
    settings.gradient_bytes = values[1];
  }
  autotune::ModelShapeOptions shape_options;
  shape_options.per_head = arguments.has("per-head");
  const std::string model = arguments.require("model");
  if (auto png = arguments.get("plot"))
    if (const std::string why = plot_unavailable_reason(*png); !why.empty()) throw runtime::UsageError("--plot " + *png + ": " + why);
  const autotune::ModelShapes shapes = runtime::load_model_matrices(model, shape_options);
  const runtime::PartitionPlan plan = runtime::plan_partitions(runtime::model_plan_tensors(shapes), settings);

  const nlohmann::json data = runtime::plan_record(model, plan);
  const int straddlers = data["straddling_muon_matrices"].get<int>();
  if (auto png = arguments.get("plot")) run_plot_script(kPlanPlotScript, data, *png);
  if (arguments.has("json")) {
    std::printf("%s\n", data.dump(2).c_str());
    return 0;
  }
  std::printf("%s\n", data["title"].get<std::string>().c_str());
  std::printf("flat buffer: %lld elements in %zu tensors (padded to %lld), %lld per rank\n\n", static_cast<long long>(plan.tensors.empty() ? 0 : plan.tensors.back().offset + plan.tensors.back().tensor.elements),
              plan.tensors.size(), static_cast<long long>(plan.padded_elements), static_cast<long long>(plan.partition_elements));
  std::printf("Muon matrices straddling a partition boundary: %d\n", straddlers);
  int shown = 0;
  for (const auto& tensor : plan.tensors) {
    if (!tensor.straddles() || !tensor.tensor.muon) continue;
    if (++shown > 12) {
      std::printf("  ... (%d more; --json lists all)\n", straddlers - 12);
      break;
    }
    std::string owners, computed;
    for (int rank : tensor.owners) owners += (owners.empty() ? "" : ",") + std::to_string(rank);
    // balanced mode spreads a batch's matrices over many ranks: beyond 8, their count and range
    if (tensor.orthogonalizers.size() > 8)
      computed = std::to_string(tensor.orthogonalizers.size()) + " ranks (" + std::to_string(tensor.orthogonalizers.front()) + ".." +
                 std::to_string(tensor.orthogonalizers.back()) + ")";
    else
      for (int rank : tensor.orthogonalizers) computed += (computed.empty() ? "" : ",") + std::to_string(rank);
    std::printf("  %-44s owners %-10s orthogonalized on %s\n", tensor.tensor.name.c_str(), owners.c_str(), computed.c_str());
  }
  std::printf("\n%-6s %10s %14s %9s %14s %14s %14s\n", "rank", "matrices", "NS work", "vs ideal", "optimizer", "gradients", "parameters");
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const auto& rank = plan.ranks[r];
    std::printf("%-6zu %10d %14.4g %8.2fx %14s %14s %14s\n", r, rank.matrices, rank.orthogonalization_cost,
                plan.ideal_cost() > 0 ? rank.orthogonalization_cost / plan.ideal_cost() : 0.0, bytes_text(static_cast<double>(rank.optimizer_bytes)).c_str(),
                bytes_text(static_cast<double>(rank.gradient_bytes)).c_str(), bytes_text(static_cast<double>(rank.parameter_bytes)).c_str());
  }
  std::printf("NS work: max %.4g, mean %.4g, ideal %.4g (max/ideal %.3f)\n\n", plan.max_cost(), plan.mean_cost(), plan.ideal_cost(),
              plan.ideal_cost() > 0 ? plan.max_cost() / plan.ideal_cost() : 0.0);
  std::printf("bytes moved per step (all ranks together; ring collectives):\n");
  for (const auto& collective : plan.collectives)
    std::printf("  %-52s %12s   %s\n", collective.name.c_str(), bytes_text(static_cast<double>(collective.bytes)).c_str(), collective.formula.c_str());
  if (auto png = arguments.get("plot")) std::printf("\nplot: %s\n", png->c_str());
  return 0;
}

}  // namespace orthojit::cli
