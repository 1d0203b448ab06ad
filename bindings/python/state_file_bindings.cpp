// The optimizer state file from Python (orthojit.Muon.save_state / load_state): the same
// safetensors file the C++ optimizers write (runtime/muon/state_format.h), written and read
// tensor by tensor through SafetensorsWriter / SafetensorsReader. Tensors cross as an address
// and a size of contiguous CPU memory that the Python caller keeps alive for the call;
// orthojit/muon.py builds them from torch tensors and checks them against the optimizer.
#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings/python/bindings.h"
#include "runtime/muon/progress_line.h"
#include "runtime/muon/safetensors_file.h"
#include "runtime/muon/state_summary.h"

namespace nb = nanobind;

namespace orthojit::python {
namespace {

using TensorLayout = std::tuple<std::string, std::string, std::vector<int64_t>>;  // (name, "F32" | "I64", shape)

// The tensor `name` of a header, checked to be `bytes` long (a whole tensor crosses at once);
// std::invalid_argument with `absent` or "<what> has N bytes, <other> M" otherwise.
const runtime::TensorPlace& whole_tensor(const runtime::SafetensorsHeader& header, const std::string& name, uint64_t bytes, const std::string& absent,
                                         const std::string& what, const char* other) {
  const runtime::TensorPlace* place = header.find(name);
  if (!place) throw std::invalid_argument(absent);
  if (place->end - place->begin != bytes)
    throw std::invalid_argument(what + " has " + std::to_string(place->end - place->begin) + " bytes, " + other + " " + std::to_string(bytes));
  return *place;
}

// A state file written tensor by tensor: Python hands over one tensor's CPU memory at a time (a
// CUDA state tensor is copied to the host alone), so the host never holds the whole state.
// Nothing appears at `path` before commit(); an abandoned writer leaves nothing behind.
class StateFileWriter {
 public:
  StateFileWriter(const std::string& path, const std::vector<TensorLayout>& tensors, const std::map<std::string, std::string>& metadata,
                  nb::handle progress) {
    std::vector<runtime::TensorPlace> places;
    for (const auto& [name, dtype, shape] : tensors) {
      if (dtype != "F32" && dtype != "I64") throw std::invalid_argument("state tensor '" + name + "' has dtype " + dtype + "; a state file holds F32 and I64");
      places.push_back({name, dtype, shape});
    }
    writer_ = std::make_unique<runtime::SafetensorsWriter>(path, places, metadata);
    writer_->set_progress(python_progress(progress));
  }
  // The whole tensor `name` from `bytes` bytes of contiguous CPU memory at `address`.
  void write(const std::string& name, uintptr_t address, uint64_t bytes) {
    whole_tensor(writer_->header(), name, bytes, "the state file declares no tensor '" + name + "'", "state tensor '" + name + "'", "the source");
    nb::gil_scoped_release release;
    writer_->write(name, 0, reinterpret_cast<const void*>(address), bytes);
  }
  void commit() {
    nb::gil_scoped_release release;
    writer_->commit();
  }

 private:
  std::unique_ptr<runtime::SafetensorsWriter> writer_;
};

// A state file read tensor by tensor after its header and (verify_checksum) its whole checksum
// were checked: load_state checks everything before it reads any tensor into the optimizer.
class StateFileReader {
 public:
  explicit StateFileReader(const std::string& path, nb::handle progress = nb::none())
      : path_(path), reader_(std::make_unique<runtime::SafetensorsReader>(path)) {
    reader_->set_progress(python_progress(progress));
  }
  const std::map<std::string, std::string>& metadata() const { return reader_->header().metadata; }
  std::vector<TensorLayout> tensors() const {
    std::vector<TensorLayout> result;
    for (const runtime::TensorPlace& tensor : reader_->header().tensors) result.emplace_back(tensor.name, tensor.dtype, tensor.shape);
    return result;
  }
  void verify_checksum() {
    nb::gil_scoped_release release;
    reader_->verify_checksum();
  }
  // The whole tensor `name` into `bytes` bytes of CPU memory at `address`.
  void read(const std::string& name, uintptr_t address, uint64_t bytes) {
    const runtime::TensorPlace& tensor = whole_tensor(reader_->header(), name, bytes, path_ + ": no tensor '" + name + "'",
                                                      path_ + ": tensor '" + name + "'", "the destination");
    nb::gil_scoped_release release;
    reader_->read(tensor, 0, reinterpret_cast<void*>(address), bytes);
  }

 private:
  std::string path_;
  std::unique_ptr<runtime::SafetensorsReader> reader_;
};

// The header: the metadata and (name, dtype, shape) per tensor in the file's order.
std::pair<std::map<std::string, std::string>, std::vector<TensorLayout>> read_state_header(const std::string& path) {
  const StateFileReader reader(path);
  return {reader.metadata(), reader.tensors()};
}

}  // namespace

runtime::FileProgressCallback python_progress(nb::handle progress) {
  if (progress.is_none()) return {};
  if (!PyCallable_Check(progress.ptr())) throw nb::type_error("progress must be a callable progress(phase, done, total) or None");
  // The callable behind a shared pointer: the C++ side copies and drops the callback without the
  // GIL (the transfer released it), which must not touch a Python reference count.
  struct Held {
    nb::object callable;
    ~Held() {
      nb::gil_scoped_acquire gil;
      callable.reset();
    }
  };
  auto held = std::make_shared<Held>(Held{nb::borrow<nb::object>(progress)});
  return [held](const runtime::FileProgress& step) {
    nb::gil_scoped_acquire gil;
    held->callable(std::string(step.phase), step.done, step.total);
  };
}

void register_state_file(nb::module_& m) {
  // runtime::ProgressLine for orthojit.Muon's progress=True: the text goes to `write` (Python's
  // sys.stderr, which pytest and notebooks capture, where C's stderr would bypass them).
  nb::class_<runtime::ProgressLine>(m, "ProgressLine", "A state file transfer's progress as text (runtime/muon/progress_line.h).")
      .def(
          "__init__",
          [](runtime::ProgressLine* line, const std::string& label, bool interactive, nb::object write) {
            new (line) runtime::ProgressLine(label, interactive, [write](const std::string& text) {
              nb::gil_scoped_acquire gil;
              write(text);
            });
          },
          nb::arg("label"), nb::arg("interactive"), nb::arg("write"))
      .def(
          "__call__", [](runtime::ProgressLine& line, const std::string& phase, uint64_t done, uint64_t total) { line.update({phase, done, total}); },
          nb::arg("phase"), nb::arg("done"), nb::arg("total"))
      .def("finish", &runtime::ProgressLine::finish, "The last phase's line (a log) or the terminal's line cleared.");
  nb::class_<StateFileWriter>(m, "StateFileWriter", "A safetensors state file written tensor by tensor, atomically at commit().")
      .def(nb::init<const std::string&, const std::vector<TensorLayout>&, const std::map<std::string, std::string>&, nb::handle>(), nb::arg("path"),
           nb::arg("tensors"), nb::arg("metadata"), nb::arg("progress") = nb::none())
      .def("write", &StateFileWriter::write, nb::arg("name"), nb::arg("address"), nb::arg("bytes"),
           "The whole tensor `name` from contiguous CPU memory at `address`.")
      .def("commit", &StateFileWriter::commit, "Checks that every tensor was written, then puts the file in place.");
  nb::class_<StateFileReader>(m, "StateFileReader", "A safetensors state file read tensor by tensor.")
      .def(nb::init<const std::string&, nb::handle>(), nb::arg("path"), nb::arg("progress") = nb::none())
      .def_prop_ro("metadata", &StateFileReader::metadata)
      .def_prop_ro("tensors", &StateFileReader::tensors, "(name, dtype, shape) per tensor in the file's order.")
      .def("verify_checksum", &StateFileReader::verify_checksum, "Reads the whole file and checks its SHA-256.")
      .def("read", &StateFileReader::read, nb::arg("name"), nb::arg("address"), nb::arg("bytes"), "The whole tensor `name` into CPU memory at `address`.");
  m.def(
      "inspect_state",
      [](const std::string& path, bool verify, nb::handle progress) {
        const runtime::FileProgressCallback callback = python_progress(progress);
        std::string json;
        {
          nb::gil_scoped_release release;
          json = runtime::state_summary_json(runtime::summarize_state_file(path, verify, callback)).dump();
        }
        return json;
      },
      nb::arg("path"), nb::arg("verify") = true, nb::arg("progress") = nb::none(), "The summary of `orthojit inspect-state --json` as JSON text.");
  m.def("read_state_header", &read_state_header, nb::arg("path"), "A state file's metadata and its tensors' (name, dtype, shape).");
}

}  // namespace orthojit::python
