// Compile-time shape of one kernel instance: input element, CTA tile, warp roles, the wgmma
// instruction, and the shared-memory layout with the number of pipeline stages that fits.
#pragma once
#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

// Input element tags (A and B share one type).
struct InBf16 {
  static constexpr int kBytes = 2;
};
struct InE4m3 {
  static constexpr int kBytes = 1;
};

// One wgmma instruction: 64 x N x (32 bytes of K) from two shared-memory descriptors.
template <class In, int N>
struct Wgmma;
template <>
struct Wgmma<InBf16, 32> {
  static constexpr int kAcc = 16;
  __device__ __forceinline__ static void mma(float (&d)[16], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n32k16_f32_bf16_bf16(d, a, b, acc);
  }
};
template <>
struct Wgmma<InBf16, 64> {
  static constexpr int kAcc = 32;
  __device__ __forceinline__ static void mma(float (&d)[32], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n64k16_f32_bf16_bf16(d, a, b, acc);
  }
};
template <>
struct Wgmma<InBf16, 128> {
  static constexpr int kAcc = 64;
  __device__ __forceinline__ static void mma(float (&d)[64], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n128k16_f32_bf16_bf16(d, a, b, acc);
  }
};
template <>
struct Wgmma<InBf16, 160> {
  static constexpr int kAcc = 80;
  __device__ __forceinline__ static void mma(float (&d)[80], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n160k16_f32_bf16_bf16(d, a, b, acc);
  }
};
template <>
struct Wgmma<InBf16, 256> {
  static constexpr int kAcc = 128;
  __device__ __forceinline__ static void mma(float (&d)[128], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n256k16_f32_bf16_bf16(d, a, b, acc);
  }
};
template <>
struct Wgmma<InE4m3, 64> {
  static constexpr int kAcc = 32;
  __device__ __forceinline__ static void mma(float (&d)[32], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n64k32_f32_e4m3_e4m3(d, a, b, acc);
  }
};
template <>
struct Wgmma<InE4m3, 128> {
  static constexpr int kAcc = 64;
  __device__ __forceinline__ static void mma(float (&d)[64], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n128k32_f32_e4m3_e4m3(d, a, b, acc);
  }
};
template <>
struct Wgmma<InE4m3, 256> {
  static constexpr int kAcc = 128;
  __device__ __forceinline__ static void mma(float (&d)[128], uint64_t a, uint64_t b, uint32_t acc) {
    ptx::wgmma_mma_async_sync_aligned_m64n256k32_f32_e4m3_e4m3(d, a, b, acc);
  }
};

// Warp roles: warpgroup 0 is the producer (one warp issues TMA), warpgroups 1..2 are consumers;
// consumer warpgroup w owns rows [w * BM/2, (w+1) * BM/2) of the tile, as BM/128 m64 slices.
// 64-row tiles (small M: a 128-row tile would compute half its rows for nothing) split the other
// way: both consumer warpgroups take the tile's 64 rows, warpgroup w columns [w * BN/2, (w+1) * BN/2),
// so two warpgroups still feed the tensor cores (one warp's wgmma chain per SM sub-partition does
// not; docs/perf/gemm.md "step 3"). wg_row0 / wg_col0 say where a warpgroup's part starts.
// CM: CTAs per cluster along M (1, or 2: the pair takes vertically adjacent tiles of one column
// and each CTA loads half of their shared B tile, multicast to both; gemm/kernel.cuh "Clusters").
template <class In, int BM, int BN, int CM = 1>
struct TileShape {
  using Input = In;
  static constexpr int kBlockM = BM;
  static constexpr int kBlockN = BN;
  static constexpr int kClusterM = CM;
  static constexpr int kBlockK = 128 / In::kBytes;  // one 128-byte swizzle row of K per stage
  static constexpr int kMmaK = 32 / In::kBytes;     // K of one wgmma (32 bytes)
  static constexpr int kKSteps = kBlockK / kMmaK;   // wgmmas per stage and m64 slice
  static constexpr int kConsumerWarpgroups = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWarpgroups);
  static constexpr int kConsumerThreads = 128 * kConsumerWarpgroups;
  static constexpr bool kSplitN = BM == 64;  // the consumer warpgroups split the columns, not the rows
  static constexpr int kWgRows = kSplitN ? BM : BM / kConsumerWarpgroups;
  static constexpr int kWgCols = kSplitN ? BN / kConsumerWarpgroups : BN;
  static constexpr int kSlices = kWgRows / 64;  // m64 wgmma slices per consumer warpgroup
  __host__ __device__ static constexpr int wg_row0(int cwg) { return kSplitN ? 0 : cwg * kWgRows; }
  __host__ __device__ static constexpr int wg_col0(int cwg) { return kSplitN ? cwg * kWgCols : 0; }
  static constexpr int kATileBytes = BM * 128;
  static constexpr int kBTileBytes = BN * 128;
  static constexpr int kStageBytes = kATileBytes + kBTileBytes;
  static_assert(BM == 64 || BM == 128 || BM == 256, "tile rows: 64, 128 or 256");
  // 64: narrow tiles for small M and N, where 128-wide tiles leave SMs idle (bf16, ptpc and
  // blockscale, whose 64-column tile reads half of one 128-row B scale block; not mxfp8).
  // 160 (bf16, 128 rows): for N where 128 and 256 quantise the waves badly (1024 x 5120: 256 tiles
  // of 128x160 in 1.94 waves instead of 320 of 128x128 in 2.42); its bf16 output rows are 320 bytes,
  // stored as five 64-byte strips (epilogue_box_bytes).
  static_assert(BN == 64 || BN == 128 || BN == 256 || (BN == 160 && BM == 128),
                "tile columns: 64, 128 or 256 (160 with 128 rows)");
  // 64x64 (bf16): each consumer warpgroup takes 32 columns, for M <= 64 where 64x128 tiles leave
  // half the SMs idle (64 x 8192: 128 tiles instead of 64); its bf16 rows are 64-byte strips.
  static_assert(!kSplitN || BN >= 128 || (BN == 64 && In::kBytes == 2),
                "64-row tiles: each consumer warpgroup takes >= 64 columns (32 for bf16 64x64)");
  using Mma = Wgmma<In, kWgCols>;  // one m64 x (the warpgroup's columns) instruction
  static_assert(CM == 1 || (CM == 2 && BM >= 128 && BN % 16 == 0),
                "clusters: 1, or 2 along M with 128- or 256-row tiles (each CTA multicasts half of B's rows)");
};

inline constexpr int kSmemLimitBytes = 232448;  // 227 KB: the sm_90 per-block opt-in maximum
inline constexpr int kMaxStages = 8;

// The fewest stages a layout keeps two staging buffers for (SmemLayout below): 6, or the scale
// policy's own kPreferredStages.
template <class Scale>
constexpr int preferred_stages() {
  if constexpr (requires { Scale::kPreferredStages; }) return Scale::kPreferredStages;
  else return 6;
}

// Shared memory, in this order: A tiles [stages], B tiles [stages] (each 1024-byte aligned for
// the 128B swizzle), the epilogue's staging strips [2 consumer warpgroups][kEpiBufsPerWg] of
// 64 rows x 128 (or 64) bytes (gemm/epilogue_staged.cuh; 1024-aligned as they follow whole tiles), per-stage
// scales (main-loop scale policies), per-tile scales (epilogue scale policies, double-buffered),
// then the full/empty mbarriers of the stages, the full/empty mbarriers of the two tile-scale
// buffers (epilogue scale policies), a fused epilogue's call words and the abort word.
//
// Stages vs staging: two staging buffers per consumer warpgroup let it write one strip while the
// TMA drains the other; with one, each strip waits for the previous one's shared-memory read.
// Two buffers are kept where the ring still has >= kPreferredStages stages with them (bf16 and
// ptpc 128x128: 6 of 7); otherwise the most stages that leave one buffer (blockscale and mxfp8
// 128x128 keep their 6 stages, the 48 KB-stage tiles their 4). What is left after the stages goes
// to more buffers, up to a whole tile's strips. (Measured: "two buffers always" cost 256x128 fp8
// its 4th stage, and mxfp8 at 5 stages ran 2-3% slower than before at long K.)
template <class Tile, class Scale, int kOutBytes>
struct SmemLayout {
  // One staging strip: a TMA-store box of kEpilogueBoxRows rows x kStripRowBytes (128, or 64 where
  // the warpgroup's columns are no whole number of 128-byte rows); per consumer warpgroup and tile,
  // its m64 slices x (its columns x out bytes / kStripRowBytes) strips.
  static constexpr int kStripRowBytes = epilogue_box_bytes(Tile::kWgCols, kOutBytes);
  static constexpr int kStripBytes = kEpilogueBoxRows * kStripRowBytes;
  static constexpr int kStripsPerWg = Tile::kSlices * (Tile::kWgCols * kOutBytes / kStripRowBytes);
  static constexpr int kPreferredStages = preferred_stages<Scale>();
  static constexpr int kStageScaleBytes = Scale::template stage_bytes<Tile>();
  static constexpr int kTileScaleBytes = Scale::template tile_bytes<Tile>();
  static constexpr int kTileScaleBarriers = kTileScaleBytes > 0 ? 4 : 0;  // full[2], empty[2]
  static constexpr int kFixed = kTileScaleBytes + 2 * kMaxStages * 8 + 8 * kTileScaleBarriers + 64;
  static constexpr int kPerStage = Tile::kStageBytes + kStageScaleBytes;
  static constexpr int bufs_left(int stages) {
    const int left = kSmemLimitBytes - kFixed - stages * kPerStage;
    return left < 0 ? -1 : left / (Tile::kConsumerWarpgroups * kStripBytes);
  }
  static constexpr int most_stages_with(int bufs) {
    for (int s = kMaxStages; s >= 2; --s)
      if (bufs_left(s) >= bufs) return s;
    return 0;
  }
  static constexpr int kTwoBufs = kStripsPerWg < 2 ? kStripsPerWg : 2;
  static constexpr int pick_stages() {
    return most_stages_with(kTwoBufs) >= kPreferredStages ? most_stages_with(kTwoBufs) : most_stages_with(1);
  }
  static constexpr int kStages = pick_stages();
  static_assert(kStages >= 2, "tile too large for a two-stage ring plus epilogue staging");
  static constexpr int kEpiBufsPerWg = bufs_left(kStages) < kStripsPerWg ? bufs_left(kStages) : kStripsPerWg;
  static constexpr int kAOffset = 0;
  static constexpr int kBOffset = kAOffset + kStages * Tile::kATileBytes;
  static constexpr int kEpiOffset = kBOffset + kStages * Tile::kBTileBytes;
  static constexpr int kEpiBytes = Tile::kConsumerWarpgroups * kEpiBufsPerWg * kStripBytes;
  static constexpr int kStageScaleOffset = kEpiOffset + kEpiBytes;
  static constexpr int kTileScaleOffset = kStageScaleOffset + kStages * kStageScaleBytes;
  static constexpr int kBarrierOffset = (kTileScaleOffset + kTileScaleBytes + 7) / 8 * 8;
  // A fused epilogue's per-CTA call words (epoch, election ticket; gemm/epilogue_store.cuh), in
  // the dynamic region: a static __shared__ variable would push the 1024-aligned dynamic base up
  // by a whole 1 KB and overflow the 227 KB limit (kFixed's slack holds these 16 bytes).
  // Tile-scale buffer b: full at kTileScaleBarOffset + 8 b, empty at + 16 + 8 b (gemm/kernel.cuh).
  static constexpr int kTileScaleBarOffset = kBarrierOffset + 2 * kStages * 8;
  static constexpr int kCallWordsOffset = kTileScaleBarOffset + 8 * kTileScaleBarriers;
  // The CTA's abort word (hopper::mbarrier_wait_or_abort): 0, or 1 once a role gave up a wait.
  static constexpr int kAbortWordOffset = kCallWordsOffset + 16;
  static constexpr int kBytes = kAbortWordOffset + 16;
  static_assert(kEpiOffset % 1024 == 0, "staging strips must be 1024-byte aligned (128B swizzle)");
  static_assert(kBytes <= kSmemLimitBytes);
};

}  // namespace weave::gemm
