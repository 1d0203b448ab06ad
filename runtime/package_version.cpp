// The package version (see package_version.h); ORTHOJIT_VERSION comes from the CMake project.
#include "runtime/package_version.h"

namespace orthojit {

const char* package_version() { return ORTHOJIT_VERSION; }

}  // namespace orthojit
