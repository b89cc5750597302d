// nccl.h, and a stop if it is not the release CMake found (cmake/WeaveDeps.cmake): with two NCCLs
// on a machine (a CUDA toolkit's and the one torch ships), the compiler must not take one while
// the library links the other, whose device API structures differ.
#pragma once
#include <nccl.h>

#if defined(WEAVE_NCCL_HEADER_VERSION_CODE) && NCCL_VERSION_CODE != WEAVE_NCCL_HEADER_VERSION_CODE
#error "nccl.h is not the release CMake found (NCCL_INCLUDE_DIR): another nccl.h comes first on the include path"
#endif
