// fp8 main loop promoting once per 128-wide K block with one block set: blockscale with K-major
// scales (every tile) or MN-major scales on 256-row tiles, and ptpc on 256-row tiles (two slices per
// warpgroup leave no registers for a second set). Per stage s:
//
//   wait full[s]
//   per slice j: issue 4 wgmma -> blk; (j = 0: read the block's scales); wait_group 0;
//                (last slice: release s); acc[j] += blk * scale
//
// The other consumer warpgroup's wgmmas keep the tensor cores busy while this one promotes (the two
// run half a stage apart). Promoting every 128 K is cuBLASLt's interval for its default fp8.
#pragma once
#include "gemm/mainloop/consumer_ring.cuh"
#include "gemm/mainloop/promote.cuh"
#include "gemm/scale_policy.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

template <class Tile, class Scale>
struct MainloopPerBlock {
  static constexpr int kAcc = Tile::Mma::kAcc;
  static constexpr bool kScaled = Scale::kWhere == ScaleWhere::kMainloop;

  template <class Ring, class Pipe, class Fault>
  __device__ __forceinline__ static void consume(const Ring& ring, Pipe& ps, float (&acc)[Tile::kSlices][kAcc],
                                                 const MainloopTile& t, const Fault& fault) {
#pragma unroll
    for (int j = 0; j < Tile::kSlices; ++j)
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[j][i] = 0.0f;
    float blk[kAcc];
    for (int kb = t.kb_begin; kb < t.kb_end; ++kb) {
      const uint32_t s = ps.stage;
      ring.acquire(s, ps.phase, fault);
      // The block's scales are read once the first slice's wgmmas are issued and multiplied after
      // its wait: read before them, the warp stalled between the slice's wgmmas on the loads
      // (docs/perf/gemm.md "step 8").
      [[maybe_unused]] float sa[Tile::kSlices][2];
      [[maybe_unused]] float sb = 1.0f;
#pragma unroll
      for (int j = 0; j < Tile::kSlices; ++j) {
        fence_operands(blk);
        ptx::wgmma_fence_sync_aligned();
#pragma unroll
        for (int ks = 0; ks < Tile::kKSteps; ++ks)
          Tile::Mma::mma(blk, ring.desc_a(s, j, ks), ring.desc_b(s, ks), ks > 0 ? 1u : 0u);
        ptx::wgmma_commit_group_sync_aligned();
        if constexpr (kScaled) {
          if (j == 0) {
            const uint32_t slot = ring.stage_scales(s);
            sb = Scale::template col_scale<Tile>(slot);
#pragma unroll
            for (int jj = 0; jj < Tile::kSlices; ++jj) {
              const int r = Tile::wg_row0(ring.cwg) + jj * 64 + ring.row_in_wg;
              sa[jj][0] = Scale::row_scale(slot, r);
              sa[jj][1] = Scale::row_scale(slot, r + 8);
            }
          }
        }
        ptx::wgmma_wait_group_sync_aligned<0>();
        fence_operands(blk);
        if (j == Tile::kSlices - 1) {
          ring.acquire_late(s, ps.phase, fault);
          ring.release_after_reads(s, fault);  // scales were read above, all wgmmas on stage s are complete
        }
        if constexpr (kScaled)
          promote_rows(acc[j], blk, sa[j][0] * sb, sa[j][1] * sb);
        else
          promote_unscaled(acc[j], blk);
      }
      ps.advance();
    }
  }
};

}  // namespace weave::gemm
