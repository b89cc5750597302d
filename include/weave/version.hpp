// weave's version. 0.x: a minor release may change the API and the ABI, so libweave.so's soname
// carries major.minor (libweave.so.0.1) and the CMake package accepts the same major.minor only
// (find_package(weave 0.1)). CMakeLists.txt's project(VERSION) must match these numbers; the
// configure step checks.
#pragma once

#include "weave/export.hpp"

#define WEAVE_VERSION_MAJOR 0
#define WEAVE_VERSION_MINOR 1
#define WEAVE_VERSION_PATCH 0
#define WEAVE_VERSION_STRING "0.1.0"

namespace weave WEAVE_API {
// The version of the library loaded at run time, "major.minor.patch" (compare with
// WEAVE_VERSION_STRING, the headers an application was compiled against).
const char* version() noexcept;
}  // namespace weave
