// The host reference's e4m3 / bf16 rounding (src/ref) against the GPU's own conversions
// (cvt.rn.satfinite.e4m3x2.f32 through cuda_fp8.h, cvt.rn.bf16.f32 through cuda_bf16.h) over a
// sweep of float bit patterns: the GEMM tests compare bitwise against that reference, so it
// must round exactly as the hardware does.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "support/gpu.hpp"
#include "weave/quant.hpp"

namespace {
__global__ void to_e4m3(const float* in, uint8_t* out, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<uint8_t>(__nv_cvt_float_to_fp8(in[i], __NV_SATFINITE, __NV_E4M3));
}
__global__ void to_bf16(const float* in, uint16_t* out, size_t n) {
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i < n) {
    __nv_bfloat16 b = __float2bfloat16_rn(in[i]);
    out[i] = *reinterpret_cast<uint16_t*>(&b);
  }
}
bool is_nan_e4m3(uint8_t v) { return (v & 0x7F) == 0x7F; }
}  // namespace

TEST(HardwareRounding, E4m3AndBf16MatchTheReferenceOverABitSweep) {
  WEAVE_REQUIRE_GPUS(1);
  // Every 97th bit pattern over all 2^32 floats (44 million values), plus every pattern near the
  // e4m3 range boundaries: enough to cover each exponent and the tie cases many times.
  std::vector<float> x;
  for (uint64_t b = 0; b < (1ull << 32); b += 97) {
    uint32_t u = static_cast<uint32_t>(b);
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (uint32_t u = 0x3A000000u; u < 0x44000000u; u += 7)  // 2^-11 .. 512, dense
    for (uint32_t s : {0u, 0x80000000u}) {
      float f;
      uint32_t v = u | s;
      std::memcpy(&f, &v, 4);
      x.push_back(f);
    }
  const size_t n = x.size();
  float* d_in = nullptr;
  uint8_t* d_e4 = nullptr;
  uint16_t* d_bf = nullptr;
  ASSERT_EQ(cudaMalloc(&d_in, n * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_e4, n), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_bf, n * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d_in, x.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  to_e4m3<<<(n + 255) / 256, 256>>>(d_in, d_e4, n);
  to_bf16<<<(n + 255) / 256, 256>>>(d_in, d_bf, n);
  std::vector<uint8_t> e4(n);
  std::vector<uint16_t> bf(n);
  ASSERT_EQ(cudaMemcpy(e4.data(), d_e4, n, cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bf.data(), d_bf, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_in);
  cudaFree(d_e4);
  cudaFree(d_bf);

  size_t e4_bad = 0, e4_nan_sign = 0, bf_bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint8_t want = weave::ref::float_to_e4m3(x[i]);
    if (want != e4[i]) {
      // NaN sign: the reference drops it (as the toolkit's emulation does); count separately.
      if (is_nan_e4m3(want) && is_nan_e4m3(e4[i])) {
        ++e4_nan_sign;
      } else if (e4_bad++ < 10) {
        ADD_FAILURE() << "e4m3 of " << x[i] << ": reference 0x" << std::hex << int(want)
                      << " hardware 0x" << int(e4[i]);
      }
    }
    uint16_t want_bf = weave::ref::float_to_bf16(x[i]);
    bool both_nan = (want_bf & 0x7FFF) > 0x7F80 && (bf[i] & 0x7FFF) > 0x7F80;
    if (want_bf != bf[i] && !both_nan && bf_bad++ < 10)
      ADD_FAILURE() << "bf16 of " << x[i] << ": reference 0x" << std::hex << want_bf
                    << " hardware 0x" << bf[i];
  }
  EXPECT_EQ(e4_bad, 0u);
  EXPECT_EQ(bf_bad, 0u);
  std::printf("[hardware rounding] %zu values; e4m3 NaN-sign differences: %zu\n", n, e4_nan_sign);
}
