// `orthojit convert-state`: rewrites a saved optimizer state (HybridOptimizer::save_state) with
// its momentum buffers in the other momentum form, for states saved before the keller preset
// followed the current KellerJordan/Muon EMA momentum (runtime/muon/state_format.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/file_progress_option.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/muon/state_format.h"
#include "runtime/orthogonalize.h"

namespace orthojit::cli {

const char* const kConvertStateHelp = R"(usage: orthojit convert-state --input OLD.safetensors --output NEW.safetensors --momentum-kind ema|sum --momentum BETA [--progress]

Converts the Muon momentum buffers of a saved optimizer state to another momentum form. The EMA
form (buf <- lerp(buf, g, 1-beta): DeepSpeed, torch.optim.Muon, the current KellerJordan/Muon and
orthojit's keller preset) and the sum form (buf <- beta*buf + g: Moonlight, Keller Jordan's 2024
code, orthojit's keller preset in format 1 states) satisfy EMA = (1-beta) * sum after the same
gradients with a constant beta, so every buffer is multiplied by that factor (one f32 rounding).
Under a momentum schedule (beta changing between steps) no conversion is exact. The input is not
changed; the output is written atomically, as format 2 (which records the momentum form).

options:
  --input FILE          the saved state (format 1 or 2)
  --output FILE         where to write the converted state
  --momentum-kind K     the form to convert to: ema or sum
  --momentum BETA       the momentum the buffers were made with, in [0, 1) (e.g. 0.95)
  --progress            report the conversion's progress on stderr even when it is not a terminal
                        (a line per phase: read, checksum, sync); on a terminal it is always shown
)";

int convert_state_command(const std::vector<std::string>& args) {
  Arguments arguments(args, {"input", "output", "momentum-kind", "momentum"}, {"progress"});
  const std::string input = arguments.require("input"), output = arguments.require("output");
  const std::string kind_text = arguments.require("momentum-kind");
  const auto kind = runtime::parse_momentum_kind(kind_text);
  if (!kind) throw runtime::UsageError("--momentum-kind '" + kind_text + "' is not ema or sum");
  const std::string beta_text = arguments.require("momentum");
  char* end = nullptr;
  const double beta = std::strtod(beta_text.c_str(), &end);
  if (beta_text.empty() || *end != '\0' || !(beta >= 0 && beta < 1))
    throw runtime::UsageError("--momentum '" + beta_text + "' is not a number in [0, 1)");
  runtime::ConversionReport report;
  try {
    std::unique_ptr<runtime::ProgressLine> progress = file_progress_line(arguments, "converting " + input);
    report = runtime::convert_state_momentum(input, output, *kind, beta, callback_of(progress));
    if (progress) progress->finish();
  } catch (const std::runtime_error& error) {
    throw runtime::UsageError(error.what());
  } catch (const std::invalid_argument& error) {
    throw runtime::UsageError(error.what());
  }
  std::printf("%s: %d momentum buffer(s) %s -> %s (x %.17g) -> %s\n", input.c_str(), report.buffers, runtime::to_string(report.from),
              runtime::to_string(*kind), report.factor, output.c_str());
  return 0;
}

}  // namespace orthojit::cli
