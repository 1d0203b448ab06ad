// Linked into distributed_muon_test in the AddressSanitizer build only (tests/CMakeLists.txt).
//
// Open MPI 4.1 dlopens its components (mca_*.so) and the PMIx and hwloc plugins in MPI_Init and
// dlcloses them in MPI_Finalize. What they allocated in MPI_Init and never freed is reported by
// LeakSanitizer at exit, but by then their code is unmapped and the frames print as
// "<unknown module>", which no suppression can name, so the report would fail every run. This
// Debian build has no MCA parameter that keeps them loaded (ompi_info lists no
// mca_base_component_disable_dlclose), so the executable defines dlclose itself: its definition
// comes first in the global symbol scope and the libraries' calls bind to it. Keeping a library
// mapped until exit changes nothing else: no component is reopened after finalize.
extern "C" int dlclose(void* handle) {
  (void)handle;
  return 0;
}
