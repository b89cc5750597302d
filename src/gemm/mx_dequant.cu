// mxfp8 -> bf16 dequantisation (gemm/mx_dequant.hpp says why and what exactness means here).
#include "gemm/mx_dequant.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "common/check.hpp"

namespace weave::gemm {
namespace {

constexpr int kChunk = 16;  // e4m3 elements per thread step: one 16-byte load, two 16-byte stores

// 2^(e - 127) in fp32; e = 0 is the subnormal 2^-127, e = 255 NaN (as the native kernel reads it).
__device__ __forceinline__ float scale_of(uint32_t e) {
  return __uint_as_float(e == 0 ? 0x00400000u : (e == 255 ? 0x7FFFFFFFu : e << 23));
}

__device__ __forceinline__ uint32_t scale_byte(const MxDequantOperand& op, int64_t row, int64_t group,
                                               bool packed) {
  const int64_t srow = row / op.rows_per_scale;
  if (!packed) return op.scales[srow * op.scale_ld + group];
  // Packed word (group / 4, srow) holds groups 4s..4s+3, low byte first.
  return op.scales[(group / 4) * op.scale_ld + 4 * srow + (group % 4)];
}

// Whether a block scaled by byte e holds e4m3 values the conversion may not carry exactly: for e in
// [10, 246] every e4m3 value x 2^(e - 127) is a normal fp32 and bf16 number on bf16's grid
// (smallest 2^-9 x 2^-117 = 2^-126, largest 448 x 2^119 < bf16's max), so no step depends on
// denormal handling; outside it a non-zero, non-NaN element may round, flush or overflow
// (conservative: the native kernel then reruns the call). An 0xFF
// scale is NaN for the whole block in both kernels, so it is not a reason to rerun.
__device__ __forceinline__ bool scale_outside_exact_range(uint32_t e) { return e < 10 || (e > 246 && e != 255); }
__device__ __forceinline__ bool any_finite_nonzero(uint4 raw) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  bool any = false;
#pragma unroll
  for (int w = 0; w < 4; ++w)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t mag = (words[w] >> (8 * i)) & 0x7Fu;  // 0: +-0; 0x7F: NaN
      any |= mag != 0 && mag != 0x7Fu;
    }
  return any;
}

// Converts 16 elements at (row, k0) of `op`; returns whether the rerun rule above fired.
__device__ __forceinline__ bool convert_chunk(const MxDequantOperand& op, int64_t row, int64_t k0, int64_t k,
                                              bool packed) {
  const uint32_t e = scale_byte(op, row, k0 / 32, packed);
  const float s = scale_of(e);
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(op.src + row * op.ld + k0));
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t out[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>((words[w] >> (16 * h)) & 0xFFFFu);
      const float2 x = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      // In the exact range both products and their bf16 roundings are exact.
      const __nv_bfloat162 b = __floats2bfloat162_rn(x.x * s, x.y * s);
      out[2 * w + h] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
  uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(op.dst) + row * k + k0);
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
  return scale_outside_exact_range(e) && any_finite_nonzero(raw);
}

__global__ void __launch_bounds__(256) mx_dequant_kernel(const MxDequantOperand a, const MxDequantOperand b,
                                                         int64_t k, bool packed, uint32_t* inexact) {
  const int64_t per_row = k / kChunk;
  const int64_t chunks_a = a.rows * per_row, total = chunks_a + b.rows * per_row;
  bool bad = false;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < total; c += gridDim.x * int64_t{blockDim.x}) {
    // Two call sites rather than a selected copy of the operand (which would live in local memory).
    if (c < chunks_a) {
      const int64_t row = c / per_row;
      bad |= convert_chunk(a, row, (c - row * per_row) * kChunk, k, packed);
    } else {
      const int64_t local = c - chunks_a, row = local / per_row;
      bad |= convert_chunk(b, row, (local - row * per_row) * kChunk, k, packed);
    }
  }
  // Rare: one atomic per warp that saw an element bf16 cannot hold.
  if (__any_sync(0xFFFFFFFFu, bad) && (threadIdx.x % 32) == 0) atomicOr(inexact, 1u);
}

}  // namespace

void mx_dequant_bf16(const MxDequantOperand& a, const MxDequantOperand& b, int64_t k, ScaleLayout layout,
                     uint32_t* inexact, int num_sms, cudaStream_t stream) {
  const int64_t chunks = (a.rows + b.rows) * (k / kChunk);
  // Memory-bound: enough 256-thread blocks on every SM to keep loads in flight.
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>((chunks + 255) / 256, int64_t{num_sms} * 8));
  mx_dequant_kernel<<<static_cast<unsigned>(grid), 256, 0, stream>>>(a, b, k, layout == ScaleLayout::kPacked,
                                                                      inexact);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::gemm
