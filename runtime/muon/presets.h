// The optimizer presets: the one list of their names, with a line on each and its source. Every
// other place that names them reads this table: preset_settings (optimizer_settings.cpp) refuses
// other names with this list, the C API's header documents it (tests/muon_presets_test.cpp checks
// the header against it), Python gets it from the extension (orthojit.muon_presets()), and the
// examples take their choices from there.
#pragma once

#include <string>
#include <vector>

namespace orthojit::runtime {

struct MuonPreset {
  const char* name;         // what preset_settings takes
  const char* description;  // one line: the system it reproduces and how it differs from the others
  const char* source;       // the code it follows (docs/muon.md has the full table)
};

// In the documented order; the first is the default (OptimizerSettings::preset).
const std::vector<MuonPreset>& muon_presets();

// "deepspeed, keller, moonlight, torch": the names for messages that list the valid ones.
std::string muon_preset_list();

}  // namespace orthojit::runtime
