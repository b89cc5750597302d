#include "support/gpu.hpp"

#include <cuda_runtime.h>

namespace weave::test {

int hopper_gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  int hopper = 0;
  for (int d = 0; d < n; ++d) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
    if (major == 9) ++hopper;
  }
  return hopper;
}

std::string gpu_skip_reason(int min_gpus) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess)
    return std::string("needs ") + std::to_string(min_gpus) +
           " Hopper GPU(s); CUDA reports none here (" + cudaGetErrorName(err) + ")";
  int hopper = hopper_gpu_count();
  if (hopper < min_gpus)
    return "needs " + std::to_string(min_gpus) + " Hopper (sm_90) GPU(s); found " +
           std::to_string(hopper) + " of " + std::to_string(n) + " CUDA device(s)";
  return "";
}

}  // namespace weave::test
