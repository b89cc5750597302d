#include "testing/poison_nan.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/check.hpp"

namespace weave::bench {

namespace {
__global__ void fill_u32(uint32_t* p, size_t n, uint32_t v) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    p[i] = v;
}
}  // namespace

void poison_nan(void* ptr, std::size_t bytes, DType dtype, cudaStream_t stream) {
  if (bytes == 0) return;
  uint32_t pattern = 0;
  switch (dtype) {
    case DType::kBF16: pattern = 0x7FC07FC0u; break;
    case DType::kF32: pattern = 0x7FC00000u; break;
    case DType::kE4M3: pattern = 0x7F7F7F7Fu; break;
    case DType::kUE8M0: pattern = 0xFFFFFFFFu; break;
  }
  WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(ptr) % 4 == 0 && bytes % 4 == 0,
                   "poison_nan: pointer and byte count must be multiples of 4 (got " << bytes
                                                                                     << " bytes)");
  const size_t n = bytes / 4;
  const int blocks = static_cast<int>(std::min<size_t>((n + 255) / 256, 4096));
  fill_u32<<<blocks, 256, 0, stream>>>(static_cast<uint32_t*>(ptr), n, pattern);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::bench
