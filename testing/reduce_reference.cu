#include "testing/reduce_reference.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "common/check.hpp"
#include "testing/count_differing.hpp"

namespace weave::bench {

namespace {

__global__ void round_reference_kernel(const float* ref, void* out, size_t elems, int bf16) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < elems; i += size_t(gridDim.x) * blockDim.x) {
    if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16(ref[i]);
    else static_cast<float*>(out)[i] = ref[i];
  }
}

__global__ void add_term_kernel(float* sum, float* magnitude, const float* term, int64_t elems) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elems; i += int64_t(gridDim.x) * blockDim.x) {
    sum[i] += term[i];
    magnitude[i] += fabsf(term[i]);
  }
}

}  // namespace

void gpu_round_reference(const float* ref, void* out, std::size_t elems, DType out_dtype, cudaStream_t stream) {
  WEAVE_EXPECT_ARG(out_dtype == DType::kBF16 || out_dtype == DType::kF32,
                   "gpu_round_reference: out_dtype must be bf16 or fp32, got " << to_string(out_dtype));
  round_reference_kernel<<<512, 256, 0, stream>>>(ref, out, elems, out_dtype == DType::kBF16);
  WEAVE_CHECK_LAUNCH();
}

void gpu_add_term(float* sum, float* magnitude, const float* term, std::int64_t elems, cudaStream_t stream) {
  add_term_kernel<<<512, 256, 0, stream>>>(sum, magnitude, term, elems);
  WEAVE_CHECK_LAUNCH();
}

Tolerance reduced_gemm_tolerance(ScaleMode mode, int world) {
  const Tolerance gemm = gemm_tolerance(mode, DType::kBF16);
  return {.rtol = 0x1p-8 + gemm.rtol, .atol = 0, .atol_rms = world * gemm.atol_rms};
}

std::int64_t gpu_count_differing(const void* a, const void* b, std::size_t elems, DType dtype, cudaStream_t stream) {
  const size_t bytes = dtype_bytes(dtype);
  WEAVE_EXPECT_ARG(bytes == 2 || bytes == 4, "gpu_count_differing: 2- or 4-byte dtypes only, got " << to_string(dtype));
  unsigned long long* count = nullptr;
  WEAVE_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&count), sizeof(*count), stream));
  struct Free {
    unsigned long long* p;
    cudaStream_t s;
    ~Free() { cudaFreeAsync(p, s); }
  } free_count{count, stream};
  WEAVE_CHECK_CUDA(cudaMemsetAsync(count, 0, sizeof(*count), stream));
  gpu_add_differing(a, b, elems, dtype, count, stream);
  unsigned long long h = 0;
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(&h, count, sizeof(h), cudaMemcpyDeviceToHost, stream));
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  return static_cast<int64_t>(h);
}

}  // namespace weave::bench
