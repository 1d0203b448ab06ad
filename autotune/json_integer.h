// An integer field of a JSON document the tuner reads back (tuning records, fingerprints): it
// must be a JSON integer within int's range. nlohmann's get<int>() converts a float such as
// 1e88 (undefined behaviour: found by tests/fuzz/fuzz_tuning_record under UBSan) and wraps an
// integer beyond int, so every such field goes through here instead (std::invalid_argument: bad
// input, named).
#pragma once

#include <climits>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace orthojit::autotune {

inline int json_int(const nlohmann::json& value, const std::string& what) {
  if (!value.is_number_integer())
    throw std::invalid_argument(what + " is " + value.dump() + ", not an integer");
  if (value.is_number_unsigned() ? value.get<unsigned long long>() > static_cast<unsigned long long>(INT_MAX)
                                 : (value.get<long long>() < INT_MIN || value.get<long long>() > INT_MAX))
    throw std::invalid_argument(what + " is " + value.dump() + ", beyond an int");
  return static_cast<int>(value.get<long long>());
}

}  // namespace orthojit::autotune
