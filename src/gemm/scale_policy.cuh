// Scale policies: how the quantisation scales enter the GEMM. One family keyed by granularity;
// each policy says where it applies:
//   ScaleNone       bf16: nothing.
//   ScalePerRowCol  ptpc (constant along K): epilogue, acc * sa[m] * sb[n]. The producer warp
//                   copies the tile's sa/sb slices into shared memory with cp.async when it starts
//                   the tile (two buffers by tile parity, each with a full and an empty mbarrier);
//                   each consumer warpgroup waits for them only at its epilogue, on its own, so the
//                   two warpgroups' epilogues need not coincide (gemm/kernel.cuh).
//   ScaleBlockwise<L> blockscale 1x128 / 128x128 (varies along K): main loop. Each stage's
//                   sa[m0.., kb] column and sb[n_blk, kb] land in the stage's scale slot,
//                   completing on the same full barrier as the TMA tiles; consumers wgmma each
//                   128-wide K block into a fresh accumulator and promote it into fp32 registers:
//                   total += blk * sa[row] * sb. How the A column gets there depends on the layout
//                   of scale_a (weave::ScaleLayout):
//                     kKMajor  ([M, K/128] row-major, ScaleLayout::kRaw): the column is strided, so
//                              the producer's 32 lanes gather it with BM 4-byte cp.asyncs;
//                     kMnMajor (M-contiguous, ScaleLayout::kMnMajor): the column is contiguous, so
//                              the producer's lane 0 loads it with one TMA box [1, BM] inside the
//                              stage's own transaction (expect_tx counts its bytes); sb is one
//                              4-byte cp.async of lane 0.
#pragma once
#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "hopper/ptx/fence.cuh"
#include "hopper/ptx/ld_st.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/tma.cuh"

namespace weave::gemm {

enum class ScaleWhere { kNone, kEpilogue, kMainloop };

struct ScaleNone {
  static constexpr ScaleWhere kWhere = ScaleWhere::kNone;
  static constexpr uint32_t kProducerArrivals = 0;  // extra arrivals on each full barrier
  template <class Tile>
  static constexpr int stage_bytes() { return 0; }
  template <class Tile>
  static constexpr int tile_bytes() { return 0; }
};

struct ScalePerRowCol {
  static constexpr ScaleWhere kWhere = ScaleWhere::kEpilogue;
  static constexpr uint32_t kProducerArrivals = 0;
  template <class Tile>
  static constexpr int stage_bytes() { return 0; }
  // Two buffers of [block_m] + [block_n] floats.
  template <class Tile>
  static constexpr int tile_bytes() { return 2 * (Tile::kBlockM + Tile::kBlockN) * 4; }

  // Producer lane `lane` (of 32) copies the tile at (m0, n0)'s sa[m0..] and sb[n0..] slices into
  // `buf` and arms the buffer's full barrier (init count 32: one cp.async arrival per lane). Rows
  // and columns past M / N read as zeros. The kernel waits for the buffer's empty barrier first.
  template <class Tile>
  __device__ __forceinline__ static void producer_copy_tile(const MainloopArgs& a, uint32_t buf, uint32_t full_bar,
                                                            int m0, int n0, int lane) {
    const float* sa = static_cast<const float*>(a.scale_a);
    const float* sb = static_cast<const float*>(a.scale_b);
#pragma unroll 1
    for (int i = lane; i < Tile::kBlockM; i += 32) {
      const bool in = m0 + i < a.m;
      ptx::cp_async_ca_shared_global_4(buf + 4 * i, in ? sa + m0 + i : sa, in ? 4 : 0);
    }
#pragma unroll 1
    for (int i = lane; i < Tile::kBlockN; i += 32) {
      const bool in = n0 + i < a.n;
      ptx::cp_async_ca_shared_global_4(buf + 4 * (Tile::kBlockM + i), in ? sb + n0 + i : sb, in ? 4 : 0);
    }
    ptx::cp_async_mbarrier_arrive_noinc_shared_cta(full_bar);
  }
  template <class Tile>
  __device__ __forceinline__ static float row_factor(uint32_t buf, int row_local) {
    return ptx::ld_shared_f32(buf + 4 * row_local);
  }
  template <class Tile>
  __device__ __forceinline__ static float2 col_factors(uint32_t buf, int col_local) {
    return ptx::ld_shared_v2_f32(buf + 4 * (Tile::kBlockM + col_local));
  }
};

enum class BlockScaleLoad { kKMajor, kMnMajor };

template <BlockScaleLoad Load>
struct ScaleBlockwise {
  static constexpr ScaleWhere kWhere = ScaleWhere::kMainloop;
  static constexpr int kGroupK = 128;  // K elements per scale group (one stage)
  static constexpr bool kTmaRows = Load == BlockScaleLoad::kMnMajor;
  // Extra arrivals on each full barrier: one cp.async arrival per producer lane (K-major), or
  // lane 0's single one for sb (MN-major; A's column completes the TMA transaction instead).
  static constexpr uint32_t kProducerArrivals = kTmaRows ? 1 : 32;
  // MN-major 128x128: 5 stages and two epilogue staging buffers rather than 6 stages and one (the
  // 640-byte scale slots leave 128x128 32 bytes short of 6 + 2). Measured 2-3% faster at every
  // shape of the sweep (docs/perf/gemm.md "step 4"); the K-major layout keeps 6 + 1 (not measured).
  static constexpr int kPreferredStages = kTmaRows ? 5 : 6;
  // sa column [block_m] then sb. With the TMA load the slot is a multiple of 128 bytes, so every
  // stage's column starts 128-byte aligned (the TMA destination rule; slots follow 1024-aligned
  // regions).
  template <class Tile>
  static constexpr int stage_bytes() { return Tile::kBlockM * 4 + (kTmaRows ? 128 : 16); }
  template <class Tile>
  static constexpr int tile_bytes() { return 0; }
  // Bytes this policy adds to the stage's TMA transaction (the full barrier's expect_tx).
  template <class Tile>
  static constexpr uint32_t stage_tx_bytes() { return kTmaRows ? Tile::kBlockM * 4 : 0; }
  // The producer's shared tensor maps besides A and B (prefetched once per CTA).
  __device__ __forceinline__ static void prefetch_maps(const MainloopArgs& a) {
    if constexpr (kTmaRows) ptx::prefetch_tensormap(&a.tma_scale_a);
  }

  // Producer lane `lane` brings stage kb's scales into `slot` and arms the stage's full barrier
  // (after lane 0's arrive.expect_tx for the stage, which includes stage_tx_bytes()).
  template <class Tile>
  __device__ __forceinline__ static void producer_copy_stage(const MainloopArgs& a, uint32_t slot, uint32_t full_bar,
                                                             int m0, int n_blk, int kb, int lane) {
    // A tile lies inside one 128-row block of B: 128 columns, or 64 (half a block: both halves
    // read that block's factor).
    static_assert(Tile::kBlockN == 128 || Tile::kBlockN == 64, "blockscale tiles lie inside one 128-row block of B");
    const int b_blk = n_blk / (128 / Tile::kBlockN);
    const float* sb = static_cast<const float*>(a.scale_b) + static_cast<int64_t>(b_blk) * a.scale_b_ld + kb;
    if constexpr (kTmaRows) {
      // tma_scale_a: [K/128 rows, M cols] of fp32, box [1, BM]; rows past M read as zeros.
      if (lane == 0) {
        ptx::cp_async_bulk_tensor_2d_global_to_shared(slot, &a.tma_scale_a, m0, kb, full_bar, ptx::kL2EvictNormal);
        ptx::cp_async_ca_shared_global_4(slot + 4 * Tile::kBlockM, sb, 4);
        ptx::cp_async_mbarrier_arrive_noinc_shared_cta(full_bar);
      }
    } else {
      // Rolled loop with a running pointer: the producer runs on 40 registers.
      const int64_t step = 32 * a.scale_a_ld;
      const float* sa = static_cast<const float*>(a.scale_a);
      const float* src = sa + static_cast<int64_t>(m0 + lane) * a.scale_a_ld + kb;
#pragma unroll 1
      for (int i = lane; i < Tile::kBlockM; i += 32, src += step) {
        const bool in = m0 + i < a.m;
        ptx::cp_async_ca_shared_global_4(slot + 4 * i, in ? src : sa, in ? 4 : 0);
      }
      if (lane == 0) ptx::cp_async_ca_shared_global_4(slot + 4 * Tile::kBlockM, sb, 4);
      ptx::cp_async_mbarrier_arrive_noinc_shared_cta(full_bar);
    }
  }
  __device__ __forceinline__ static float row_scale(uint32_t slot, int row_local) {
    return ptx::ld_shared_f32(slot + 4 * row_local);
  }
  template <class Tile>
  __device__ __forceinline__ static float col_scale(uint32_t slot) {
    return ptx::ld_shared_f32(slot + 4 * Tile::kBlockM);
  }
};

}  // namespace weave::gemm
