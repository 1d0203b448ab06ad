// A nanobind extension built from the kit's nanobind: tests/gpu_kit_test.sh imports it and calls
// scaled_sum, the proof that the copied package compiles and links a module (orthojit's
// bindings are built the same way, NB_STATIC).
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <vector>

NB_MODULE(kit_module, m) {
  m.def("scaled_sum", [](const std::vector<double>& values, double scale) {
    double sum = 0;
    for (double value : values) sum += value;
    return scale * sum;
  });
}
