#include "gemm/split_k_reduce.hpp"

#include <cuda_bf16.h>

#include <algorithm>

#include "common/check.hpp"
#include "hopper/pdl_attribute.hpp"
#include "hopper/ptx/griddepcontrol.cuh"

namespace weave::gemm {
namespace {

// One thread per 4 consecutive columns of a row (16-byte loads of every partial plane).
template <class Out>
__global__ void __launch_bounds__(256) split_k_reduce_kernel(const float* __restrict__ partials, int64_t m, int64_t n,
                                                             int split_k, Out* __restrict__ c, int64_t ldc) {
  // A kernel launched after it with PDL (the next layer's GEMM) may be scheduled at once: it
  // requests its weights while this one runs. The GEMM before it (programmatic dependent launch)
  // has completed and its partials are visible once the wait returns; nothing above touches memory.
  ptx::griddepcontrol_launch_dependents();
  ptx::griddepcontrol_wait();
  const int64_t quads = n / 4;
  const int64_t plane = m * n;
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < m * quads; q += gridDim.x * int64_t{blockDim.x}) {
    const int64_t row = q / quads;
    const int64_t col = (q - row * quads) * 4;
    const float* p = partials + row * n + col;
    float4 sum = __ldg(reinterpret_cast<const float4*>(p));
    for (int s = 1; s < split_k; ++s) {  // fixed order: the result is the same bits every run
      const float4 v = __ldg(reinterpret_cast<const float4*>(p + s * plane));
      sum.x += v.x;
      sum.y += v.y;
      sum.z += v.z;
      sum.w += v.w;
    }
    Out* dst = c + row * ldc + col;
    if constexpr (sizeof(Out) == 4) {
      *reinterpret_cast<float4*>(dst) = sum;
    } else {
      const __nv_bfloat162 lo = __float22bfloat162_rn(make_float2(sum.x, sum.y));
      const __nv_bfloat162 hi = __float22bfloat162_rn(make_float2(sum.z, sum.w));
      uint2 packed;
      packed.x = *reinterpret_cast<const uint32_t*>(&lo);
      packed.y = *reinterpret_cast<const uint32_t*>(&hi);
      *reinterpret_cast<uint2*>(dst) = packed;
    }
  }
}

}  // namespace

void split_k_reduce(const float* partials, int64_t m, int64_t n, int split_k, void* c, int64_t ldc, DType out_dtype,
                    int num_sms, bool pdl, cudaStream_t stream) {
  const int64_t quads = m * (n / 4);
  // Memory-bound: enough CTAs for every SM to keep several 256-thread blocks of loads in flight.
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>((quads + 255) / 256, int64_t{num_sms} * 8));
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(256);
  config.stream = stream;
  cudaLaunchAttribute serialization = hopper::programmatic_serialization_attribute();
  config.attrs = &serialization;
  config.numAttrs = pdl ? 1 : 0;
  if (out_dtype == DType::kF32)
    WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&config, split_k_reduce_kernel<float>, partials, m, n, split_k,
                                        static_cast<float*>(c), ldc));
  else
    WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&config, split_k_reduce_kernel<__nv_bfloat16>, partials, m, n, split_k,
                                        static_cast<__nv_bfloat16*>(c), ldc));
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::gemm
