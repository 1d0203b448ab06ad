// Fuzz target: the tuning-record reader (autotune::parse_tuning_file, what load_tuning_file runs
// on a file's text) and the merger (merged_tuning_document, what merge_into_tuning_file writes).
// The reader never throws: a bad file is a warning. Merging one new entry over whatever was read
// must give a document that reads back with that entry, and with every old entry when the file
// was usable and of the same device; another device's file is refused with std::runtime_error.
#include <string>

#include "autotune/tuning_record.h"
#include "fuzz_target.h"

namespace at = orthojit::autotune;

ORTHOJIT_FUZZ_TARGET(tuning_record) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  at::LoadedRecords loaded;
  try {
    loaded = at::parse_tuning_file(text, "fuzz-records.json");
  } catch (const std::exception& error) {
    fuzz_failure(std::string("parse_tuning_file threw (it must report a warning instead): ") + error.what());
  }
  fuzz_check(loaded.file.has_value() != !loaded.warning.empty(), "parse_tuning_file gave both a file and a warning, or neither");
  fuzz_check(!loaded.newer_schema || !loaded.file, "parse_tuning_file read a newer schema's file as its own");
  fuzz_check(!loaded.foreign || !loaded.file, "parse_tuning_file called a file it read foreign");

  // This machine, for the merge: the fingerprint of the file when it read, a fixed one otherwise.
  at::DeviceFingerprint here;
  here.backend = "cpu";
  here.device = "fuzz device";
  here.isa = "avx2";
  here.cores = 2;
  here.compiler = "LLVM 19.1.7";
  here.orthojit = "0.1.0";
  if (loaded.file && (size % 2 == 0)) here = loaded.file->fingerprint;  // half the time the same device
  const nlohmann::json ours = {{"program=fuzz;shape=4x8;batch=1;storage=f32;accumulate=f32", {{"winner", nullptr}, {"timestamp", "now"}}}};
  nlohmann::json document;
  std::string warning;
  try {
    document = at::merged_tuning_document(loaded, "fuzz-records.json", here, ours, &warning);
  } catch (const std::runtime_error& error) {
    // Refused only for another device's records, a newer schema's (which writing would lose) or a
    // file that is not tuning records at all (none of their keys: writing would replace it).
    const bool other_device = loaded.file && here.mismatch(loaded.file->fingerprint).has_value();
    fuzz_check(other_device || loaded.newer_schema.has_value() || loaded.foreign, std::string("the merge refused a file of this device: ") + error.what());
    return 0;
  } catch (const std::exception& error) {
    fuzz_failure(std::string("merged_tuning_document threw something other than std::runtime_error: ") + error.what());
  }
  fuzz_check(loaded.warning.empty() == warning.empty(), "the merge's warning does not follow the reader's");
  std::string written;
  try {
    written = document.dump(2);
  } catch (const std::exception& error) {
    fuzz_failure(std::string("the merged document cannot be written: ") + error.what());
  }
  const at::LoadedRecords again = at::parse_tuning_file(written, "fuzz merged");
  fuzz_check(again.file.has_value(), "the merged document does not read back: " + again.warning);
  for (const auto& [key, entry] : ours.items()) fuzz_check(again.file->entries.contains(key) && again.file->entries.at(key) == entry, "the merge lost the new entry");
  if (loaded.file)
    for (const auto& [key, entry] : loaded.file->entries.items())
      fuzz_check(again.file->entries.contains(key), "the merge lost the old entry '" + key + "'");
  return 0;
}
