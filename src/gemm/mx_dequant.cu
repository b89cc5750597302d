// mxfp8 -> bf16 dequantisation (gemm/mx_dequant.hpp says why and what exactness means here).
#include "gemm/mx_dequant.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "common/check.hpp"
#include "common/ue8m0.cuh"

namespace weave::gemm {
namespace {

// Whether a block scaled by byte e holds e4m3 values the conversion may not carry exactly: for e in
// [10, 246] every e4m3 value x 2^(e - 127) is a normal fp32 and bf16 number on bf16's grid
// (smallest 2^-9 x 2^-117 = 2^-126, largest 448 x 2^119 < bf16's max), so no step depends on
// denormal handling; outside it a non-zero, non-NaN element may round, flush or overflow
// (conservative: the native kernel then reruns the call). An 0xFF
// scale is NaN for the whole block in both kernels, so it is not a reason to rerun.
__device__ __forceinline__ bool scale_outside_exact_range(uint32_t e) { return e < 10 || (e > 246 && e != 255); }
__device__ __forceinline__ bool any_finite_nonzero(uint2 raw) {
  const uint32_t words[2] = {raw.x, raw.y};
  bool any = false;
#pragma unroll
  for (int w = 0; w < 2; ++w)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t mag = (words[w] >> (8 * i)) & 0x7Fu;  // 0: +-0; 0x7F: NaN
      any |= mag != 0 && mag != 0x7Fu;
    }
  return any;
}

// Converts 8 loaded elements with scale byte e and stores them (16 bytes); returns whether the
// rerun rule above fired (checked only under an out-of-range scale: the common case pays nothing).
__device__ __forceinline__ bool convert_store8(uint2 raw, uint32_t e, __nv_bfloat16* dst) {
  const float s = ue8m0_to_f32(e);  // as the native kernel reads it
  const uint32_t words[2] = {raw.x, raw.y};
  uint32_t out[4];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_fp8x2_storage_t pair = static_cast<__nv_fp8x2_storage_t>((words[w] >> (16 * h)) & 0xFFFFu);
      const float2 x = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      // In the exact range both products and their bf16 roundings are exact.
      const __nv_bfloat162 b = __floats2bfloat162_rn(x.x * s, x.y * s);
      out[2 * w + h] = *reinterpret_cast<const uint32_t*>(&b);
    }
  }
  *reinterpret_cast<uint4*>(dst) = make_uint4(out[0], out[1], out[2], out[3]);
  return scale_outside_exact_range(e) && any_finite_nonzero(raw);
}

// Loop steps each lane has in flight (all loaded before any is converted): a memory-bound kernel
// needs bytes in flight.
constexpr int kStepsInFlight = 4;

// One warp per row at a time (A's rows, then B's): lane l converts elements [8c, 8c + 8) for c = l,
// l + 32, ..., so each warp load reads 256 contiguous bytes and each store writes 512 (whole
// sectors), with no per-element index division.
__global__ void __launch_bounds__(256) mx_dequant_kernel(const MxDequantOperand a, const MxDequantOperand b,
                                                         int64_t k, bool packed, uint32_t* inexact) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = gridDim.x * int64_t{blockDim.x} / 32;
  const int64_t rows_total = a.rows + b.rows, chunks = k / 8;
  bool bad = false;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows_total; r += warps) {
    // Scalars selected one by one (a selected copy of a whole operand would live in local memory).
    const bool is_a = r < a.rows;
    const int64_t row = is_a ? r : r - a.rows;
    const int64_t srow = row / (is_a ? a.rows_per_scale : b.rows_per_scale);
    const int64_t scale_ld = is_a ? a.scale_ld : b.scale_ld;
    const uint8_t* src = (is_a ? a.src : b.src) + row * (is_a ? a.ld : b.ld);
    __nv_bfloat16* dst = static_cast<__nv_bfloat16*>(is_a ? a.dst : b.dst) + row * k;
    // Raw: byte (srow, group). Packed: word (group / 4, srow) holds groups 4s..4s+3, low byte first.
    const uint8_t* scales = (is_a ? a.scales : b.scales) + (packed ? 4 * srow : srow * scale_ld);
    for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kStepsInFlight) {
      uint2 raw[kStepsInFlight];
      uint32_t e[kStepsInFlight];
#pragma unroll
      for (int u = 0; u < kStepsInFlight; ++u) {
        const int64_t c = c0 + 32 * u, group = c / 4;  // 4 chunks of 8 per 32-wide group
        if (c < chunks) {
          raw[u] = __ldg(reinterpret_cast<const uint2*>(src + 8 * c));
          e[u] = __ldg(scales + (packed ? (group / 4) * scale_ld + (group % 4) : group));
        }
      }
#pragma unroll
      for (int u = 0; u < kStepsInFlight; ++u) {
        const int64_t c = c0 + 32 * u;
        if (c < chunks) bad |= convert_store8(raw[u], e[u], dst + 8 * c);
      }
    }
  }
  // Rare: one atomic per warp that saw an element bf16 cannot hold.
  if (__any_sync(0xFFFFFFFFu, bad) && lane == 0) atomicOr(inexact, 1u);
}

}  // namespace

MxDequantOperand mx_dequant_operand(const TensorView& x, const TensorView& scales, int rows_per_scale, void* dst) {
  MxDequantOperand op;
  op.src = static_cast<const uint8_t*>(x.data);
  op.rows = x.rows();
  op.ld = x.ld();
  op.scales = static_cast<const uint8_t*>(scales.data);
  op.scale_ld = scales.ld();
  op.rows_per_scale = rows_per_scale;
  op.dst = dst;
  return op;
}

void mx_dequant_bf16(const MxDequantOperand& a, const MxDequantOperand& b, int64_t k, ScaleLayout layout,
                     uint32_t* inexact, int num_sms, cudaStream_t stream) {
  // One warp per row (8 per block), enough blocks for every SM's 2048 threads, grid-striding beyond.
  const int64_t rows = a.rows + b.rows;
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>((rows + 7) / 8, int64_t{num_sms} * 8));
  mx_dequant_kernel<<<static_cast<unsigned>(grid), 256, 0, stream>>>(a, b, k, layout == ScaleLayout::kPacked,
                                                                      inexact);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::gemm
