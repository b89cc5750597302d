// CUDA driver API entry points, fetched at run time through the runtime
// (cudaGetDriverEntryPointByVersion) instead of linking libcuda. Why: CI machines have no driver,
// and any binary with a load-time dependency on libcuda.so.1 would not start there.
//
//   auto encode = weave::driver_fn<PFN_cuTensorMapEncodeTiled_v12000>("cuTensorMapEncodeTiled", 12000);
//   WEAVE_CHECK_CU(encode(&map, ...));
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include <string>

namespace weave {

// Returns the entry point or throws weave::Error(kNoDevice / kDriverError) naming the symbol.
void* driver_entry_point(const char* symbol, unsigned int cuda_version);

template <typename Fn>
Fn driver_fn(const char* symbol, unsigned int cuda_version) {
  return reinterpret_cast<Fn>(driver_entry_point(symbol, cuda_version));
}

// "CUDA_ERROR_xxx: description", or the number when the driver is not there to name it.
std::string driver_error_string(CUresult err);

}  // namespace weave
