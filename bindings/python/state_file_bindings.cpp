// The optimizer state file from Python (orthojit.Muon.save_state / load_state): the same
// safetensors file the C++ optimizers write (runtime/muon/state_format.h), written and read
// through SafetensorsWriter / SafetensorsReader. Tensors cross as (name, dtype, shape, address)
// of contiguous CPU memory that the Python caller keeps alive for the call; orthojit/muon.py
// builds them from torch tensors and checks them against the optimizer.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/python/bindings.h"
#include "runtime/muon/safetensors_file.h"

namespace nb = nanobind;

namespace orthojit::python {
namespace {

// (name, "F32" | "I64", shape, address) per tensor, in the file's order.
using TensorAddress = std::tuple<std::string, std::string, std::vector<int64_t>, uintptr_t>;

void write_state_tensors(const std::string& path, const std::vector<TensorAddress>& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<runtime::TensorSource> sources;
  for (const auto& [name, dtype, shape, address] : tensors) {
    if (dtype != "F32" && dtype != "I64") throw std::invalid_argument("state tensor '" + name + "' has dtype " + dtype + "; a state file holds F32 and I64");
    sources.push_back({{name, dtype, shape}, reinterpret_cast<const void*>(address)});
  }
  nb::gil_scoped_release release;
  runtime::write_safetensors_from(path, sources, metadata);
}

// The header: the metadata and (name, dtype, shape) per tensor in the file's order.
std::pair<std::map<std::string, std::string>, std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>>> read_state_header(const std::string& path) {
  const runtime::SafetensorsReader reader(path);
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> tensors;
  for (const runtime::TensorPlace& tensor : reader.header().tensors) tensors.emplace_back(tensor.name, tensor.dtype, tensor.shape);
  return {reader.header().metadata, tensors};
}

// Reads the named tensors into the given memory (each `bytes` long, checked against the header)
// and then checks the whole file's checksum; a problem throws after which the memory holds
// whatever was read, for the caller to drop.
void read_state_tensors(const std::string& path, const std::vector<std::tuple<std::string, uintptr_t, uint64_t>>& wanted) {
  nb::gil_scoped_release release;
  runtime::SafetensorsReader reader(path);
  for (const auto& [name, address, bytes] : wanted) {
    const runtime::TensorPlace* tensor = reader.header().find(name);
    if (!tensor) throw std::invalid_argument(path + ": no tensor '" + name + "'");
    if (tensor->end - tensor->begin != bytes)
      throw std::invalid_argument(path + ": tensor '" + name + "' has " + std::to_string(tensor->end - tensor->begin) + " bytes, the destination " +
                                  std::to_string(bytes));
    reader.read(*tensor, 0, reinterpret_cast<void*>(address), bytes);
  }
  reader.verify_checksum();
}

}  // namespace

void register_state_file(nb::module_& m) {
  m.def("write_state_tensors", &write_state_tensors, nb::arg("path"), nb::arg("tensors"), nb::arg("metadata"),
        "Writes (name, 'F32' | 'I64', shape, address) tensors of contiguous CPU memory to a safetensors state file, atomically.");
  m.def("read_state_header", &read_state_header, nb::arg("path"), "A state file's metadata and its tensors' (name, dtype, shape).");
  m.def("read_state_tensors", &read_state_tensors, nb::arg("path"), nb::arg("wanted"),
        "Reads (name, address, bytes) tensors of a state file into CPU memory, then checks the file's checksum.");
}

}  // namespace orthojit::python
