#include "testing/gpu_reference.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "common/check.hpp"

namespace weave::bench {

namespace {

int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

// ---- operand decoding (device) ----

__device__ __forceinline__ float e4m3_value(uint8_t v) {
  // OCP e4m3 ("fn"): 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities; S.1111.111 is NaN.
  const int e = (v >> 3) & 0xF, man = v & 0x7;
  if (e == 0xF && man == 0x7) return __int_as_float(0x7FC00000);
  const float mag = e == 0 ? ldexpf(static_cast<float>(man), -9)            // subnormal: m * 2^-9
                           : ldexpf(static_cast<float>(8 + man), e - 10);   // (1 + m/8) * 2^(e-7)
  return (v & 0x80) ? -mag : mag;
}

__device__ __forceinline__ float bf16_value(uint16_t v) { return __uint_as_float(uint32_t(v) << 16); }

__device__ __forceinline__ float ue8m0_value(uint8_t e) {
  if (e == 0xFF) return __int_as_float(0x7FC00000);  // OCP MX: NaN
  if (e == 0) return __uint_as_float(0x00400000u);   // 2^-127, an fp32 subnormal
  return __uint_as_float(uint32_t(e) << 23);         // 2^(e-127)
}

enum ModeId : int { kModeBF16 = 0, kModePtpc = 1, kModeBlock = 2, kModeMx = 3 };

struct Operand {
  const void* data = nullptr;
  int64_t ld = 0;             // elements
  const void* scale = nullptr;
  int64_t scale_ld = 0;       // ptpc: vector stride; blockscale/mx raw: row stride; packed: words
  int64_t scale_k_stride = 1;  // blockscale: stride between K blocks (1 row-major, ld for mn-major)
  int64_t group_rows = 1;     // operand rows sharing one scale row (A: 1; B: 128 or 32)
};

__device__ __forceinline__ float dequant(const Operand& op, int mode, bool packed, int64_t r,
                                         int64_t k) {
  if (mode == kModeBF16) return bf16_value(static_cast<const uint16_t*>(op.data)[r * op.ld + k]);
  const float v = e4m3_value(static_cast<const uint8_t*>(op.data)[r * op.ld + k]);
  const int64_t sr = r / op.group_rows;
  float scale;
  if (mode == kModePtpc) {
    scale = static_cast<const float*>(op.scale)[sr * op.scale_ld];
  } else if (mode == kModeBlock) {
    scale = static_cast<const float*>(op.scale)[sr * op.scale_ld + (k / 128) * op.scale_k_stride];
  } else if (!packed) {
    scale = ue8m0_value(static_cast<const uint8_t*>(op.scale)[sr * op.scale_ld + k / 32]);
  } else {
    const uint32_t word = static_cast<const uint32_t*>(op.scale)[(k / 128) * op.scale_ld + sr];
    scale = ue8m0_value(static_cast<uint8_t>(word >> (8 * ((k / 32) % 4))));
  }
  return v * scale;
}

// 128x128 output tile per block of 256 threads, 8x8 outputs per thread (rows ty + 16 i, columns
// tx + 16 j), 16-deep K slices through shared memory. Each slice's 16 products are summed in fp32
// (FFMA: twice the DFMA rate, and the slice sum's rounding error is ~16 ulp of fp32, far below
// any bound we check), then added to an fp64 accumulator, so the total error does not grow with K.
constexpr int kBM = 128, kBN = 128, kBK = 16, kThreads = 256;

__global__ void __launch_bounds__(kThreads, 1)
    reference_gemm_kernel(int64_t m, int64_t n, int64_t k, Operand a, Operand b, int mode,
                          bool packed, float* __restrict__ c) {
  __shared__ float a_s[kBK][kBM];
  __shared__ float b_s[kBK][kBN];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = int64_t(blockIdx.y) * kBM, n0 = int64_t(blockIdx.x) * kBN;
  double acc[8][8] = {};
  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
    for (int idx = threadIdx.x; idx < kBM * kBK; idx += kThreads) {
      const int row = idx / kBK, kk = idx % kBK;
      const int64_t gk = k0 + kk;
      a_s[kk][row] = (m0 + row < m && gk < k) ? dequant(a, mode, packed, m0 + row, gk) : 0.0f;
      b_s[kk][row] = (n0 + row < n && gk < k) ? dequant(b, mode, packed, n0 + row, gk) : 0.0f;
    }
    __syncthreads();
    float part[8][8] = {};
#pragma unroll
    for (int kk = 0; kk < kBK; ++kk) {
      float av[8], bv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) av[i] = a_s[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 8; ++j) bv[j] = b_s[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) part[i][j] = fmaf(av[i], bv[j], part[i][j]);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] += double(part[i][j]);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t r = m0 + ty + 16 * i, col = n0 + tx + 16 * j;
      if (r < m && col < n) c[r * n + col] = static_cast<float>(acc[i][j]);
    }
}

// ---- comparison (device) ----

struct CompareAcc {
  unsigned long long wrong, nonfinite, never_written, first_wrong, max_abs_bits;
  double sum_sq_diff, sum_sq_ref;
  double norm_sq;       // pass 1: sum of ref^2 over finite ref
  unsigned long long norm_count;
};

__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ unsigned long long warp_min(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

__global__ void ref_norm_kernel(const float* __restrict__ ref, int64_t total, CompareAcc* acc) {
  double s = 0;
  unsigned long long cnt = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float r = ref[i];
    if (isfinite(r)) s += double(r) * r, ++cnt;
  }
  s = warp_sum(s);
  cnt = warp_sum(cnt);
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&acc->norm_sq, s);
    atomicAdd(&acc->norm_count, cnt);
  }
}

__global__ void compare_kernel(const void* __restrict__ out, bool out_bf16, int64_t rows,
                               int64_t cols, int64_t ld, const float* __restrict__ ref,
                               const float* __restrict__ magnitude, double rtol, double atol,
                               CompareAcc* acc) {
  unsigned long long wrong = 0, nonfinite = 0, never = 0, first = ULLONG_MAX, max_bits = 0;
  double sdiff = 0, sref = 0;
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    float o;
    bool poison;
    if (out_bf16) {
      const uint16_t bits = static_cast<const uint16_t*>(out)[r * ld + c];
      poison = bits == 0x7FC0u;
      o = bf16_value(bits);
    } else {
      const uint32_t bits = static_cast<const uint32_t*>(out)[r * ld + c];
      poison = bits == 0x7FC00000u;
      o = __uint_as_float(bits);
    }
    const float x = ref[i];
    bool bad = poison;
    never += poison;
    if (isfinite(x)) {
      if (!isfinite(o)) {
        ++nonfinite;
        bad = true;
      } else {
        const double d = fabs(double(o) - double(x));
        sdiff += d * d;
        sref += double(x) * x;
        max_bits = max(max_bits, static_cast<unsigned long long>(__double_as_longlong(d)));
        const double size = magnitude ? double(magnitude[i]) : fabs(double(x));
        if (d > atol + rtol * size) bad = true;
      }
    } else if (isnan(x)) {
      if (!isnan(o)) bad = true;
    } else if (o != x) {  // an infinity: the same one
      bad = true;
    }
    if (bad) {
      ++wrong;
      first = min(first, static_cast<unsigned long long>(i));
    }
  }
  wrong = warp_sum(wrong);
  nonfinite = warp_sum(nonfinite);
  never = warp_sum(never);
  first = warp_min(first);
  max_bits = warp_max(max_bits);  // non-negative doubles order like their bit patterns
  sdiff = warp_sum(sdiff);
  sref = warp_sum(sref);
  if (threadIdx.x % 32 == 0) {
    if (wrong) atomicAdd(&acc->wrong, wrong);
    if (nonfinite) atomicAdd(&acc->nonfinite, nonfinite);
    if (never) atomicAdd(&acc->never_written, never);
    if (first != ULLONG_MAX) atomicMin(&acc->first_wrong, first);
    atomicMax(&acc->max_abs_bits, max_bits);
    atomicAdd(&acc->sum_sq_diff, sdiff);
    atomicAdd(&acc->sum_sq_ref, sref);
  }
}

// ---- host-side operand checks ----

int mode_id(ScaleMode m) {
  switch (m) {
    case ScaleMode::kBF16: return kModeBF16;
    case ScaleMode::kPtpc: return kModePtpc;
    case ScaleMode::kBlockscale: return kModeBlock;
    case ScaleMode::kMxfp8: return kModeMx;
  }
  return -1;
}

// Builds the kernel's view of one operand (A: rows = M, group 1; B: rows = N, group per mode),
// checking shapes and dtypes against the problem.
Operand make_operand(const GemmProblem& p, const TensorView& x, const TensorView& s, bool is_b,
                     int device) {
  const char* name = is_b ? "B" : "A";
  const char* sname = is_b ? "scales.b" : "scales.a";
  const int64_t rows = is_b ? p.n : p.m;
  const DType in = p.mode == ScaleMode::kBF16 ? DType::kBF16 : DType::kE4M3;
  expect_matrix(x, name, MatrixRule{.dtype = in, .rows = rows, .cols = p.k, .device = device});
  Operand op;
  op.data = x.data;
  op.ld = x.ld();
  op.scale = s.data;
  switch (p.mode) {
    case ScaleMode::kBF16:
      break;
    case ScaleMode::kPtpc:
      expect_vector(s, sname, DType::kF32, rows, device);
      op.scale_ld = s.strides[0];
      break;
    case ScaleMode::kBlockscale: {
      WEAVE_EXPECT_ARG(p.k % 128 == 0, "gpu_reference_gemm: blockscale needs K % 128 == 0 (K = "
                                           << p.k << ")");
      op.group_rows = is_b ? 128 : 1;
      if (!is_b && p.scale_layout == ScaleLayout::kMnMajor) {
        // A's scales M-contiguous: element (r, kb) at r + kb * ld (strides (1, ld)).
        WEAVE_EXPECT_ARG(s.rank == 2 && s.shape[0] == rows && s.shape[1] == p.k / 128 && s.dtype == DType::kF32 &&
                             (rows == 1 || s.strides[0] == 1),
                         "argument '" << sname << "': mn-major blockscale scales are fp32 [" << rows << ", "
                                      << p.k / 128 << "] with strides (1, ld) (got " << s.describe() << ")");
        op.scale_ld = 1;
        op.scale_k_stride = s.strides[1];
        break;
      }
      expect_matrix(s, sname,
                    MatrixRule{.dtype = DType::kF32, .rows = ceil_div(rows, op.group_rows),
                               .cols = p.k / 128, .device = device});
      op.scale_ld = s.ld();
      break;
    }
    case ScaleMode::kMxfp8: {
      WEAVE_EXPECT_ARG(p.k % 32 == 0, "gpu_reference_gemm: mxfp8 needs K % 32 == 0 (K = " << p.k
                                                                                          << ")");
      op.group_rows = is_b ? 32 : 1;
      const int64_t srows = ceil_div(rows, op.group_rows);
      if (p.scale_layout == ScaleLayout::kRaw) {
        expect_matrix(s, sname,
                      MatrixRule{.dtype = DType::kUE8M0, .rows = srows, .cols = p.k / 32,
                                 .device = device});
        op.scale_ld = s.ld();
      } else {
        // Packed words viewed as bytes: [ceil(K/128), 4 * srows], 4-byte aligned rows.
        expect_matrix(s, sname,
                      MatrixRule{.dtype = DType::kUE8M0, .rows = ceil_div(p.k, 128),
                                 .cols = 4 * srows, .device = device});
        WEAVE_EXPECT_ARG(s.ld() % 4 == 0 && reinterpret_cast<uintptr_t>(s.data) % 4 == 0,
                         "argument '" << sname
                                      << "': packed mxfp8 scales must be 4-byte aligned words");
        op.scale_ld = s.ld() / 4;
      }
      break;
    }
  }
  return op;
}

int grid_for(int64_t total) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ceil_div(total, 256), 132 * 16)));
}

}  // namespace

void gpu_reference_gemm(const GemmProblem& p, const TensorView& a, const TensorView& b,
                        const GemmScales& scales, float* c_ref, cudaStream_t stream) {
  WEAVE_EXPECT_ARG(p.m >= 1 && p.n >= 1 && p.k >= 1, "gpu_reference_gemm: M, N, K must be >= 1 (got "
                                                         << p.m << ", " << p.n << ", " << p.k
                                                         << ")");
  WEAVE_EXPECT_ARG(c_ref != nullptr, "gpu_reference_gemm: c_ref is null");
  WEAVE_EXPECT_ARG(ceil_div(p.m, kBM) <= 65535, "gpu_reference_gemm: M = " << p.m
                                                                             << " exceeds the grid");
  const int device = a.device;
  const Operand oa = make_operand(p, a, scales.a, false, device);
  const Operand ob = make_operand(p, b, scales.b, true, device);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, kBN)), static_cast<unsigned>(ceil_div(p.m, kBM)));
  reference_gemm_kernel<<<grid, kThreads, 0, stream>>>(p.m, p.n, p.k, oa, ob, mode_id(p.mode),
                                                       p.scale_layout == ScaleLayout::kPacked,
                                                       c_ref);
  WEAVE_CHECK_LAUNCH();
}

Tolerance gemm_tolerance(ScaleMode mode, DType out_dtype, bool fast_accum) {
  const bool bf16_out = out_dtype == DType::kBF16;
  if (fast_accum) return {.rtol = bf16_out ? 0x1p-7 : 1e-3, .atol = 0, .atol_rms = 5e-2};
  if (mode == ScaleMode::kBF16)
    return bf16_out ? Tolerance{.rtol = 0x1p-7, .atol = 0, .atol_rms = 2e-3}
                    : Tolerance{.rtol = 1e-4, .atol = 0, .atol_rms = 5e-4};
  return {.rtol = bf16_out ? 0x1p-7 : 1e-3, .atol = 0, .atol_rms = 1e-2};
}

ref::Comparison gpu_compare(const TensorView& out, const float* ref, const Tolerance& tol,
                            cudaStream_t stream, const float* magnitude) {
  WEAVE_EXPECT_ARG(out.rank == 2 && (out.dtype == DType::kF32 || out.dtype == DType::kBF16) &&
                       out.strides[1] == 1,
                   "gpu_compare: 'out' must be a row-major fp32 or bf16 matrix, got "
                       << out.describe());
  WEAVE_EXPECT_ARG(ref != nullptr, "gpu_compare: ref is null");
  const int64_t total = out.rows() * out.cols();
  ref::Comparison result;
  result.count = total;
  if (total == 0) return result;
  CompareAcc* acc = nullptr;
  WEAVE_CHECK_CUDA(cudaMallocAsync(reinterpret_cast<void**>(&acc), sizeof(CompareAcc), stream));
  struct Free {
    CompareAcc* p;
    cudaStream_t s;
    ~Free() { cudaFreeAsync(p, s); }
  } free_acc{acc, stream};
  CompareAcc init{};
  init.first_wrong = ULLONG_MAX;
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(acc, &init, sizeof(init), cudaMemcpyHostToDevice, stream));
  ref_norm_kernel<<<grid_for(total), 256, 0, stream>>>(ref, total, acc);
  WEAVE_CHECK_LAUNCH();
  CompareAcc h{};
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(&h, acc, sizeof(h), cudaMemcpyDeviceToHost, stream));
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  const double rms = h.norm_count ? std::sqrt(h.norm_sq / double(h.norm_count)) : 0.0;
  const double atol = tol.atol + tol.atol_rms * rms;
  compare_kernel<<<grid_for(total), 256, 0, stream>>>(out.data, out.dtype == DType::kBF16,
                                                      out.rows(), out.cols(), out.ld(), ref,
                                                      magnitude, tol.rtol, atol, acc);
  WEAVE_CHECK_LAUNCH();
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(&h, acc, sizeof(h), cudaMemcpyDeviceToHost, stream));
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  result.wrong = static_cast<int64_t>(h.wrong);
  result.nonfinite = static_cast<int64_t>(h.nonfinite);
  result.never_written = static_cast<int64_t>(h.never_written);
  result.first_wrong = h.first_wrong == ULLONG_MAX ? -1 : static_cast<int64_t>(h.first_wrong);
  std::memcpy(&result.max_abs, &h.max_abs_bits, sizeof(double));
  result.rel_l2 = h.sum_sq_ref > 0 ? std::sqrt(h.sum_sq_diff / h.sum_sq_ref)
                                   : (h.sum_sq_diff > 0 ? INFINITY : 0.0);
  return result;
}

}  // namespace weave::bench
