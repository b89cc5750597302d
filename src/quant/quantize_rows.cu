// weave::quantize_rows: bf16 rows -> e4m3 and their scales (weave/quantize.hpp), one CTA per row.
// Each thread takes 4 consecutive elements at a time; a blockscale group (128) is one warp's 32
// threads, an mxfp8 group (32) is 8 threads, a ptpc row is the whole CTA. The statistics are the
// reference's (src/ref/quantize.cpp): max |x| over the non-NaN elements, the same over the finite
// ones, and whether a NaN was seen; divisions are IEEE (__fdiv_rn), as the reference's.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <string>

#include "common/check.hpp"
#include "weave/quantize.hpp"

namespace weave {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr float kE4m3Max = 448.0f;

struct Stats {
  float amax;         // over the non-NaN elements (Inf included)
  float finite_amax;  // over the finite elements
  bool nan;
};

__device__ __forceinline__ void add(Stats& s, float v) {
  const float a = fabsf(v);
  if (a != a) {
    s.nan = true;
    return;
  }
  s.amax = fmaxf(s.amax, a);
  if (a != __int_as_float(0x7F800000)) s.finite_amax = fmaxf(s.finite_amax, a);
}

// Combines the stats of the `lanes` lanes around this one (xor offsets lanes/2 .. 1).
__device__ __forceinline__ Stats reduce_lanes(Stats s, int lanes) {
  for (int off = lanes / 2; off > 0; off /= 2) {
    s.amax = fmaxf(s.amax, __shfl_xor_sync(0xFFFFFFFFu, s.amax, off));
    s.finite_amax = fmaxf(s.finite_amax, __shfl_xor_sync(0xFFFFFFFFu, s.finite_amax, off));
    s.nan = __shfl_xor_sync(0xFFFFFFFFu, static_cast<int>(s.nan), off) != 0 || s.nan;
  }
  return s;
}

// ptpc and blockscale: amax / 448; a zero (or underflowing) quotient gives 1; NaN gives NaN.
__device__ __forceinline__ float fp32_scale(const Stats& s) {
  if (s.nan) return __int_as_float(0x7FC00000);
  const float scale = __fdiv_rn(s.amax, kE4m3Max);
  return scale == 0.0f ? 1.0f : scale;
}

// The ue8m0 byte of OCP MX's shared exponent for a finite amax: floor(log2(amax)) - 8 + 127,
// clamped at 0 (amax below 2^-119, zero and fp32 subnormals included).
__device__ __forceinline__ uint32_t mx_byte(float finite_amax) {
  const int biased = static_cast<int>(__float_as_uint(finite_amax) >> 23);
  return biased > 8 ? static_cast<uint32_t>(biased - 8) : 0u;
}

__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
  const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
  return make_float4(__low2float(lo), __high2float(lo), __low2float(hi), __high2float(hi));
}

__device__ __forceinline__ uint32_t e4m3(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// q[0..3] = e4m3(v * mul) (mxfp8: a power of two, exact) or e4m3(v / div) (ptpc, blockscale).
template <bool kMultiply>
__device__ __forceinline__ void store4(uint8_t* q, float4 v, float factor) {
  const auto f = [factor](float x) { return kMultiply ? x * factor : __fdiv_rn(x, factor); };
  *reinterpret_cast<uint32_t*>(q) =
      e4m3(f(v.x)) | (e4m3(f(v.y)) << 8) | (e4m3(f(v.z)) << 16) | (e4m3(f(v.w)) << 24);
}

__global__ void __launch_bounds__(kThreads) quantize_rows_ptpc(const __nv_bfloat16* x, int64_t ldx, uint8_t* q,
                                                               int64_t ldq, float* scales, int k) {
  const int64_t row = blockIdx.x;
  x += row * ldx;
  q += row * ldq;
  Stats s{0.0f, 0.0f, false};
  for (int c = threadIdx.x; c < k / 4; c += kThreads) {
    const float4 v = load4(x + 4 * c);
    add(s, v.x);
    add(s, v.y);
    add(s, v.z);
    add(s, v.w);
  }
  s = reduce_lanes(s, 32);
  __shared__ Stats warp_stats[kWarps];
  __shared__ float row_scale;
  if (threadIdx.x % 32 == 0) warp_stats[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    Stats all = warp_stats[0];
    for (int w = 1; w < kWarps; ++w) {
      all.amax = fmaxf(all.amax, warp_stats[w].amax);
      all.nan = all.nan || warp_stats[w].nan;
    }
    row_scale = fp32_scale(all);
    scales[row] = row_scale;
  }
  __syncthreads();
  const float scale = row_scale;
  for (int c = threadIdx.x; c < k / 4; c += kThreads) store4<false>(q + 4 * c, load4(x + 4 * c), scale);
}

// blockscale (kGroupThreads 32: a warp per 128-wide group) and mxfp8 (8: four groups per warp).
template <ScaleMode kMode, int kGroupThreads>
__global__ void __launch_bounds__(kThreads) quantize_rows_grouped(const __nv_bfloat16* x, int64_t ldx, uint8_t* q,
                                                                  int64_t ldq, void* scales, int64_t lds, int k) {
  const int64_t row = blockIdx.x;
  x += row * ldx;
  q += row * ldq;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = k / 4;  // a multiple of kGroupThreads: whole groups only
  for (int base = warp * 32; base < chunks; base += kThreads) {
    const int c = base + lane;
    const bool live = c < chunks;  // every lane shuffles; a dead lane's group is dead as a whole
    const float4 v = live ? load4(x + 4 * c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    Stats s{0.0f, 0.0f, false};
    add(s, v.x);
    add(s, v.y);
    add(s, v.z);
    add(s, v.w);
    s = reduce_lanes(s, kGroupThreads);
    if (!live) continue;
    const int64_t group = c / kGroupThreads;
    const bool first = lane % kGroupThreads == 0;
    if constexpr (kMode == ScaleMode::kBlockscale) {
      const float scale = fp32_scale(s);
      if (first) static_cast<float*>(scales)[row * lds + group] = scale;
      store4<false>(q + 4 * c, v, scale);
    } else {
      const uint32_t byte = mx_byte(s.finite_amax);
      const bool finite = !s.nan && s.amax == s.finite_amax;
      if (first) static_cast<uint8_t*>(scales)[row * lds + group] = static_cast<uint8_t>(finite ? byte : 0xFFu);
      store4<true>(q + 4 * c, v, __uint_as_float((254u - byte) << 23));  // 2^-(byte - 127), exact
    }
  }
}

}  // namespace

int64_t quantize_group(ScaleMode mode, int64_t k) {
  switch (mode) {
    case ScaleMode::kPtpc: return k;
    case ScaleMode::kBlockscale: return 128;
    case ScaleMode::kMxfp8: return 32;
    default: break;
  }
  WEAVE_EXPECT_ARG(false, "argument 'mode': must be ptpc, blockscale or mxfp8 (bf16 activations need no "
                          "quantisation; got " << to_string(mode) << ")");
  return 0;
}

void quantize_rows(ScaleMode mode, const TensorView& x, const TensorView& q, const TensorView& scales,
                   cudaStream_t stream) {
  const int64_t group = quantize_group(mode, x.cols());
  WEAVE_EXPECT_ARG(x.rank == 2, "argument 'x': must be a 2-D matrix [M, K] (got rank " << x.rank << ")");
  WEAVE_EXPECT_ARG(x.device >= 0, "argument 'x': must live on a GPU (got host memory)");
  const int64_t m = x.rows(), k = x.cols();
  WEAVE_EXPECT_ARG(m >= 1 && m <= INT32_MAX, "argument 'x': its rows M must be in 1.." << INT32_MAX << " (got " << m << ")");
  WEAVE_EXPECT_ARG(k >= 16 && k % 16 == 0 && k % group == 0 && k <= INT32_MAX,
                   "argument 'x': its columns K must be a positive multiple of 16"
                       << (group != k ? " and of the mode's K group " + std::to_string(group) : std::string())
                       << " (got " << k << ")");
  const int device = x.device;
  expect_matrix(x, "x", MatrixRule{DType::kBF16, m, k, true, true, device});
  expect_matrix(q, "q", MatrixRule{DType::kE4M3, m, k, true, true, device});
  if (mode == ScaleMode::kPtpc)
    expect_vector(scales, "scales", DType::kF32, m, device);
  else
    expect_matrix(scales, "scales",
                  MatrixRule{mode == ScaleMode::kMxfp8 ? DType::kUE8M0 : DType::kF32, m, k / group, true, false, device});
  const auto* xp = static_cast<const __nv_bfloat16*>(x.data);
  auto* qp = static_cast<uint8_t*>(q.data);
  const dim3 grid(static_cast<unsigned>(m));
  if (mode == ScaleMode::kPtpc)
    quantize_rows_ptpc<<<grid, kThreads, 0, stream>>>(xp, x.ld(), qp, q.ld(), static_cast<float*>(scales.data),
                                                      static_cast<int>(k));
  else if (mode == ScaleMode::kBlockscale)
    quantize_rows_grouped<ScaleMode::kBlockscale, 32>
        <<<grid, kThreads, 0, stream>>>(xp, x.ld(), qp, q.ld(), scales.data, scales.ld(), static_cast<int>(k));
  else
    quantize_rows_grouped<ScaleMode::kMxfp8, 8>
        <<<grid, kThreads, 0, stream>>>(xp, x.ld(), qp, q.ld(), scales.data, scales.ld(), static_cast<int>(k));
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave
