// The preset list (runtime/muon/presets.h) is the one source: every name in it has settings of its
// own in preset_settings, nothing else is accepted, and the copies kept for readers (the C API's
// header, docs/python.md, docs/muon.md's sections) name exactly the same presets in the same order.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/muon/optimizer_settings.h"
#include "runtime/muon/presets.h"

namespace {

using namespace orthojit::runtime;

std::vector<std::string> table_names() {
  std::vector<std::string> names;
  for (const MuonPreset& preset : muon_presets()) names.emplace_back(preset.name);
  return names;
}

std::string read_source(const std::string& relative) {
  std::ifstream in(std::string(ORTHOJIT_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in) << "cannot read " << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Every match of `pattern`'s first group in `text`, in order.
std::vector<std::string> captures(const std::string& text, const std::string& pattern) {
  std::vector<std::string> found;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) found.push_back((*it)[1]);
  return found;
}

// Between `from` (which must be there) and the next `to` after it.
std::string section(const std::string& text, const std::string& from, const std::string& to) {
  const size_t start = text.find(from);
  EXPECT_NE(start, std::string::npos) << "'" << from << "' is not there";
  if (start == std::string::npos) return "";
  const size_t end = text.find(to, start + from.size());
  return text.substr(start + from.size(), end == std::string::npos ? std::string::npos : end - start - from.size());
}

TEST(MuonPresets, EveryNameHasItsOwnSettings) {
  const std::vector<std::string> names = table_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "a name is listed twice";
  std::set<std::string> described;
  for (const MuonPreset& preset : muon_presets()) {
    EXPECT_GT(std::string(preset.description).size(), 20u) << preset.name;
    EXPECT_FALSE(std::string(preset.source).empty()) << preset.name;
    const OptimizerSettings settings = preset_settings(preset.name);
    EXPECT_EQ(settings.preset, preset.name);
    // Its settings without the name differ from every other preset's: no entry is an alias.
    std::string text = describe(settings);
    text = text.substr(text.find('\n') + 1);  // the first line is "preset = <name>"
    EXPECT_TRUE(described.insert(text).second) << preset.name << " has another preset's settings";
  }
  EXPECT_EQ(preset_names(), names);
  EXPECT_EQ(OptimizerSettings{}.preset, names.front()) << "the default preset is the table's first";
}

// describe() prints keys apply_setting takes, with values it takes back: each line of a preset's
// description (but those left to the program or the variant) applied to a default
// OptimizerSettings reproduces the preset's description.
TEST(MuonPresets, TheDescriptionIsSettingsThatApplyBack) {
  for (const std::string& name : preset_names()) {
    const std::string text = describe(preset_settings(name));
    OptimizerSettings rebuilt = preset_settings(preset_names().front() == name ? preset_names().back() : preset_names().front());
    rebuilt.preset = name;
    std::istringstream lines(text);
    std::string line;
    int applied = 0;
    while (std::getline(lines, line)) {
      const size_t equals = line.find(" = ");
      ASSERT_NE(equals, std::string::npos) << line;
      const std::string key = line.substr(0, equals);
      std::string value = line.substr(equals + 3);
      if (const size_t comment = value.find("  # "); comment != std::string::npos) value.resize(comment);
      if (key == "preset") continue;
      if (value.front() == '(') {  // left to the program or variant: set that way on `rebuilt` too
        if (key == "muon.precision") rebuilt.muon.precision.reset();
        else if (key == "muon.ns_steps") rebuilt.muon.ns_steps.reset();
        else if (key == "muon.ns_eps") rebuilt.muon.ns_eps.reset();
        else if (key == "muon.beta2") rebuilt.muon.variant_beta2.reset();
        else if (key == "muon.variant_eps") rebuilt.muon.variant_eps.reset();
        else ADD_FAILURE() << name << ": " << key << " printed as " << value;
        continue;
      }
      EXPECT_NO_THROW(apply_setting(rebuilt, key, value)) << name << ": " << line;
      ++applied;
    }
    EXPECT_GE(applied, 20) << name;
    EXPECT_EQ(describe(rebuilt), text) << name;
  }
}

// A refused value changes nothing (adam.eps = 0 once stayed behind its error, and the next step
// divided by it), and numbers are decimal, and integers whole and in range.
TEST(MuonPresets, ARefusedSettingChangesNothing) {
  const OptimizerSettings before = preset_settings("deepspeed");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"adam.eps", "0"},         {"adam.eps", "-1e-8"},      {"muon.ns_eps", "0"},          {"muon.variant_eps", "0"},
      {"muon.lr", "0x10"},       {"muon.lr", " 0.5"},         {"muon.lr", "nan"},            {"muon.momentum", "1"},
      {"muon.threads", "2.5"},   {"muon.threads", "1e12"},   {"muon.threads", "3000000000"}, {"muon.threads", "-1"},
      {"muon.threads", "4097"},  {"muon.ns_steps", "0"},     {"muon.precision", "f64"},      {"tensor_layout", "auto"}};
  for (const auto& [key, value] : refused) {
    OptimizerSettings settings = before;
    EXPECT_THROW(apply_setting(settings, key, value), std::invalid_argument) << key << " = " << value;
    EXPECT_EQ(describe(settings), describe(before)) << key << " = " << value << " changed a setting";
  }
  OptimizerSettings settings = before;
  apply_setting(settings, "muon.threads", "4096");
  EXPECT_EQ(settings.muon.threads, kMaxMuonThreads);
  apply_setting(settings, "muon.lr", "2e-2");
  EXPECT_EQ(settings.muon.lr, 0.02);
}

TEST(MuonPresets, AnUnknownNameIsRefusedWithTheList) {
  try {
    preset_settings("kellerr");
    FAIL() << "kellerr was accepted";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'kellerr'"), std::string::npos) << message;
    EXPECT_NE(message.find("presets: " + muon_preset_list()), std::string::npos) << message;
  }
  std::string joined;
  for (const std::string& name : table_names()) joined += (joined.empty() ? "" : ", ") + name;
  EXPECT_EQ(muon_preset_list(), joined);
}

TEST(MuonPresets, TheCHeaderDocumentsTheSameList) {
  const std::string header = read_source("include/orthojit/orthojit.h");
  // /* Creates an optimizer with the settings of a preset: "deepspeed", ... or "torch" (the ...
  const std::string listed = section(header, "Creates an optimizer with the settings of a preset:", "(");
  EXPECT_EQ(captures(listed, "\"([a-z0-9_]+)\""), table_names()) << "include/orthojit/orthojit.h lists:" << listed;
}

TEST(MuonPresets, TheDocsListTheSameNames) {
  const std::string python = read_source("docs/python.md");
  const std::string listed = section(python, "`orthojit.muon_presets()` lists them with a line on each):", ".");
  std::vector<std::string> names = captures(listed, "`([a-z0-9_]+)`");
  EXPECT_EQ(names, table_names()) << "docs/python.md lists:" << listed;
  // docs/muon.md: one "### `name`" section per preset, in the table's order.
  EXPECT_EQ(captures(read_source("docs/muon.md"), "\n### `([a-z0-9_]+)`\n"), table_names());
}

}  // namespace
