// Promotion of one 128-wide K block's wgmma results into the fp32 sums. Hopper's fp8 wgmma
// accumulates with reduced precision, so the fp8 main loops add each block's fresh accumulator set
// into the sums instead of carrying one accumulator over all of K (docs/gemm.md).
#pragma once
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

// acc += blk * factor per fragment row: elements 4i, 4i + 1 belong to row r (f_r), 4i + 2, 4i + 3
// to row r + 8 (f_r8) of an m64 accumulator fragment.
template <int kAcc>
__device__ __forceinline__ void promote_rows(float (&acc)[kAcc], const float (&blk)[kAcc], float f_r, float f_r8) {
#pragma unroll
  for (int i = 0; i < kAcc / 4; ++i) {
    acc[4 * i + 0] = fmaf(blk[4 * i + 0], f_r, acc[4 * i + 0]);
    acc[4 * i + 1] = fmaf(blk[4 * i + 1], f_r, acc[4 * i + 1]);
    acc[4 * i + 2] = fmaf(blk[4 * i + 2], f_r8, acc[4 * i + 2]);
    acc[4 * i + 3] = fmaf(blk[4 * i + 3], f_r8, acc[4 * i + 3]);
  }
}

// acc += blk (ptpc: its scales are constant along K and applied in the epilogue).
template <int kAcc>
__device__ __forceinline__ void promote_unscaled(float (&acc)[kAcc], const float (&blk)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] += blk[i];
}

template <int kAcc>
__device__ __forceinline__ void fence_operands(float (&r)[kAcc]) {
#pragma unroll
  for (int i = 0; i < kAcc; ++i) ptx::fence_operand(r[i]);
}

}  // namespace weave::gemm
