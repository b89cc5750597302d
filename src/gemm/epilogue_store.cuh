// Epilogue policy "store to a local tensor". An epilogue receives, per consumer thread, pairs of
// finished fp32 values (row, col, col+1 of the output) and a per-op parameter struct; it owns
// the conversion and the memory traffic. Later epilogues (store into a peer's window, store then
// signal per finished chunk) implement the same two hooks with their own Params.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "hopper/ptx/ld_st.cuh"

namespace weave::gemm {

template <class Out>
struct EpilogueStoreLocal {
  using Params = StoreLocalParams;
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4, "bf16 or fp32 output");

  // Stores C[row, col] and C[row, col+1]. The caller guarantees row < M; N is a multiple of the
  // 16-byte row rule (even), so col < N implies col+1 < N.
  __device__ __forceinline__ static void store_pair(const Params& p, int row, int col, int n, float v0, float v1) {
    if (col >= n) return;
    Out* ptr = static_cast<Out*>(p.c) + static_cast<int64_t>(row) * p.ldc + col;
    if constexpr (sizeof(Out) == 2) {
      const __nv_bfloat162 h = __float22bfloat162_rn(make_float2(v0, v1));
      ptx::st_global_b32(ptr, *reinterpret_cast<const uint32_t*>(&h));
    } else {
      ptx::st_global_v2_f32(ptr, v0, v1);
    }
  }
  // Called by every consumer thread after its stores of tile (m_blk, n_blk); nothing to do here.
  __device__ __forceinline__ static void tile_done(const Params&, int, int) {}
};

}  // namespace weave::gemm
