#include "common/driver_api.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"

namespace weave {

void* driver_entry_point(const char* symbol, unsigned int cuda_version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  WEAVE_CHECK_CUDA(cudaGetDriverEntryPointByVersion(symbol, &fn, cuda_version,
                                                    cudaEnableDefault, &found));
  WEAVE_EXPECT(found == cudaDriverEntryPointSuccess && fn != nullptr, Status::kDriverError,
               "driver entry point '" << symbol << "' (version " << cuda_version
                                      << ") is not provided by the installed driver");
  return fn;
}

std::string driver_error_string(CUresult err) {
  using GetName = CUresult (*)(CUresult, const char**);
  const char* name = nullptr;
  const char* text = nullptr;
  try {
    auto get_name = driver_fn<GetName>("cuGetErrorName", 6000);
    auto get_text = driver_fn<GetName>("cuGetErrorString", 6000);
    get_name(err, &name);
    get_text(err, &text);
  } catch (...) {
  }
  std::string out = name ? name : ("CUresult " + std::to_string(static_cast<int>(err)));
  if (text) out += std::string(": ") + text;
  return out;
}

}  // namespace weave
