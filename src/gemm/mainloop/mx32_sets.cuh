// mxfp8 main loop (ScaleMx32): each 32-wide K group (one wgmma k32) goes into a fresh accumulator
// set and is promoted into the sums with its two ue8m0 scales. Two sets alternate so the tensor
// cores run one group while the FMAs promote the one before; per stage s:
//
//   wait full[s]; issue g0 -> set0
//   issue g1 -> set1; wait_group 1; promote g0 (set0)
//   issue g2 -> set0; wait_group 1; promote g1 (set1)
//   issue g3 -> set1; wait_group 1; promote g2 (set0)
//   wait_group 0; release s; promote g3 (set1)
//
// No wgmma is in flight across the loop's back edge and every wgmma is issued on a straight path:
// an in-flight set carried over the back edge made ptxas serialise the wgmmas (docs/perf/gemm.md
// "Main-loop policies").
#pragma once
#include "gemm/mainloop/consumer_ring.cuh"
#include "gemm/mainloop/promote.cuh"
#include "gemm/scale_mx32.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

template <class Tile, class Scale>
struct MainloopMx32Sets {
  static constexpr int kAcc = Tile::Mma::kAcc;
  static_assert(Tile::kSlices == 1 && kAcc == 64, "mxfp8 tiles: one m64n128 slice per consumer warpgroup");

  template <class Ring, class Pipe, class Fault>
  __device__ __forceinline__ static void consume(const Ring& ring, Pipe& ps, float (&acc)[Tile::kSlices][kAcc],
                                                 const MainloopTile& t, const Fault& fault) {
    float set0[kAcc], set1[kAcc];
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[0][i] = set0[i] = set1[i] = 0.0f;
    const int groups = ring.a.k / 32;
    const int row_local = Tile::wg_row0(ring.cwg) + ring.row_in_wg;
    const uint32_t mis = Scale::template row_misalignment<Tile>(ring.a, t.m0 + row_local, t.n_blk);
    auto issue = [&](float(&set)[kAcc], uint32_t s, int ks) {
      fence_operands(set);
      ptx::wgmma_fence_sync_aligned();
      Tile::Mma::mma(set, ring.desc_a(s, 0, ks), ring.desc_b(s, ks), 0u);
      ptx::wgmma_commit_group_sync_aligned();
      fence_operands(set);
    };
    for (int kb = t.kb_begin; kb < t.kb_end; ++kb) {
      const uint32_t s = ps.stage;
      ring.acquire(s, ps.phase, fault);
      issue(set0, s, 0);
      ring.acquire_late(s, ps.phase, fault);
      const MxStageWords w = Scale::template load_words<Tile>(ring.stage_scales(s), row_local, mis, groups - 4 * kb);
      issue(set1, s, 1);
      ptx::wgmma_wait_group_sync_aligned<1>();
      fence_operands(set0);
      Scale::promote(acc[0], set0, w, 0);
      issue(set0, s, 2);
      ptx::wgmma_wait_group_sync_aligned<1>();
      fence_operands(set1);
      Scale::promote(acc[0], set1, w, 1);
      issue(set1, s, 3);
      ptx::wgmma_wait_group_sync_aligned<1>();
      fence_operands(set0);
      Scale::promote(acc[0], set0, w, 2);
      ptx::wgmma_wait_group_sync_aligned<0>();
      fence_operands(set1);
      ring.release_after_reads(s, fault);  // every group reading stage s is complete; its scales are in w
      Scale::promote(acc[0], set1, w, 3);
      ps.advance();
    }
  }
};

}  // namespace weave::gemm
