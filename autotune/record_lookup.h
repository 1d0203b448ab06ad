// The runtime's side of tuning records: for (program, shape, batch, precision) on this device,
// the recorded winner, or why there is none (then the documented heuristic applies:
// strategy_heuristic.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autotune/search_space.h"
#include "dsl/ast.h"
#include "support/scalar_type.h"

namespace orthojit::autotune {

struct TunedChoice {
  std::optional<Candidate> winner;  // nullopt: use the heuristic
  // The gram restarts the winner was tuned with (the entry's "gram_restarts"); nullopt: the
  // program's own (the entry has none, as every record written before restarts were tuned).
  std::optional<std::vector<int>> gram_restarts;
  std::string reason;               // "tuned: <label>, 12.3 ms (FILE)" or why not
};

// Reads the default tuning file (tuning_record.h: default_tuning_path) once per process and again
// when it changes on disk. A batch without a record of its own takes the record of one matrix of
// its shape (what `tune --model` writes; the optimizers batch a model's equal shapes).
TunedChoice lookup_tuned(const dsl::Program& program, int64_t rows, int64_t cols, int64_t batch, std::optional<ScalarType> precision);

// For `orthojit info`: where the records are, how many entries, and whether they apply here.
std::string describe_tuning_records();

}  // namespace orthojit::autotune
