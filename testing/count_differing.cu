#include "testing/count_differing.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "common/check.hpp"
#include "weave/error.hpp"

namespace weave::bench {

namespace {

template <typename Word>
__global__ void count_differing_kernel(const Word* a, const Word* b, size_t elems, unsigned long long* count) {
  unsigned long long n = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < elems; i += size_t(gridDim.x) * blockDim.x)
    n += a[i] != b[i];
  if (n) atomicAdd(count, n);
}

}  // namespace

void gpu_add_differing(const void* a, const void* b, std::size_t elems, DType dtype, unsigned long long* count,
                       cudaStream_t stream, int blocks) {
  const size_t bytes = dtype_bytes(dtype);
  WEAVE_EXPECT_ARG(bytes == 2 || bytes == 4, "gpu_add_differing: 2- or 4-byte dtypes only, got " << to_string(dtype));
  if (bytes == 2)
    count_differing_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b),
                                                       elems, count);
  else
    count_differing_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b),
                                                       elems, count);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::bench
