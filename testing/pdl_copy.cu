#include "testing/pdl_copy.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"
#include "hopper/ptx/griddepcontrol.cuh"
#include "weave/error.hpp"

namespace weave::bench {

namespace {

// Copies src into dst, after waiting for the grid before it (or not: the control).
__global__ void pdl_copy_kernel(const uint4* src, uint4* dst, size_t n16, int wait) {
  if (wait) ptx::griddepcontrol_wait();
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) dst[i] = src[i];
}

}  // namespace

void launch_pdl_copy(const void* src, void* dst, std::size_t bytes, bool wait, cudaStream_t stream) {
  WEAVE_EXPECT_ARG(bytes % 16 == 0, "launch_pdl_copy: bytes must be a multiple of 16, got " << bytes);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(32);
  cfg.blockDim = dim3(256);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&cfg, pdl_copy_kernel, static_cast<const uint4*>(src), static_cast<uint4*>(dst),
                                      bytes / 16, wait ? 1 : 0));
}

}  // namespace weave::bench
