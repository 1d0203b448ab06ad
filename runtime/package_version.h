// The version of the installed orthojit package (liborthojit.so), for a consumer that wants to
// check at run time which library it loaded.
#pragma once

namespace orthojit {

const char* package_version();  // "0.1.0"

}  // namespace orthojit
