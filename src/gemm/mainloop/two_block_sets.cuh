// fp8 main loop for 128-row tiles (one m64 slice per consumer warpgroup): ptpc, and blockscale
// whose A scales arrive by TMA. Each 128-wide K block goes into one of two block accumulator sets,
// so the warpgroup keeps one stage's wgmmas in flight while it promotes the stage before:
//
//   wait full[s]; issue 4 wgmma -> blk[s % 2]; commit
//   wait_group 1 (the previous stage's group is done); release it; acc += blk[(s - 1) % 2]
//
// Waiting for its own group before promoting left the tensor cores idle while the warpgroup
// promoted (docs/perf/gemm.md "step 3"). The loop is unrolled by two so each set keeps its
// registers: the set in flight across the back edge is never copied. Blockscale reads a stage's
// scales right after issuing its wgmmas and multiplies them into the row factors only when the set
// is promoted, a stage later (docs/perf/gemm.md "step 10").
#pragma once
#include "gemm/mainloop/consumer_ring.cuh"
#include "gemm/mainloop/promote.cuh"
#include "gemm/scale_policy.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

template <class Tile, class Scale>
struct MainloopTwoBlockSets {
  static constexpr int kAcc = Tile::Mma::kAcc;
  static constexpr bool kScaled = Scale::kWhere == ScaleWhere::kMainloop;  // blockscale; ptpc scales in the epilogue
  static_assert(Tile::kSlices == 1, "two block sets need one m64 slice per consumer warpgroup");

  template <class Ring, class Pipe, class Fault>
  __device__ __forceinline__ static void consume(const Ring& ring, Pipe& ps, float (&acc)[Tile::kSlices][kAcc],
                                                 const MainloopTile& t, const Fault& fault) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[0][i] = 0.0f;
    float blk_a[kAcc], blk_b[kAcc];
    // sa[r], sa[r + 8], sb of the stage each set holds (blockscale; unused for ptpc).
    float scl_a[3] = {1.0f, 1.0f, 1.0f}, scl_b[3] = {1.0f, 1.0f, 1.0f};
    const int row_local = Tile::wg_row0(ring.cwg) + ring.row_in_wg;
    auto issue_stage = [&](float(&blk)[kAcc], float(&scl)[3], uint32_t s, uint32_t phase) {
      ring.acquire(s, phase, fault);
      fence_operands(blk);
      ptx::wgmma_fence_sync_aligned();
#pragma unroll
      for (int ks = 0; ks < Tile::kKSteps; ++ks)
        Tile::Mma::mma(blk, ring.desc_a(s, 0, ks), ring.desc_b(s, ks), ks > 0 ? 1u : 0u);
      ptx::wgmma_commit_group_sync_aligned();
      fence_operands(blk);
      ring.acquire_late(s, phase, fault);
      if constexpr (kScaled) {
        const uint32_t slot = ring.stage_scales(s);
        scl[0] = Scale::row_scale(slot, row_local);
        scl[1] = Scale::row_scale(slot, row_local + 8);
        scl[2] = Scale::template col_scale<Tile>(slot);
      }
    };
    // After the wait for `blk`'s group: release its stage, add it into the sums.
    auto promote_stage = [&](float(&blk)[kAcc], const float(&scl)[3], uint32_t s) {
      fence_operands(blk);
      ring.release_after_reads(s, fault);
      if constexpr (kScaled) {
        const float fac[2] = {scl[0] * scl[2], scl[1] * scl[2]};
        promote_rows(acc[0], blk, fac[0], fac[1]);
      } else {
        promote_unscaled(acc[0], blk);
      }
    };
    // One half of the unrolled loop: `in_flight` holds the last issued stage. Unless the K range
    // has ended, issue the next stage into `next`, then promote `in_flight` once its group is done;
    // at the end, promote it after the last group. False: the range ended.
    auto half_step = [&](float(&in_flight)[kAcc], const float(&in_flight_scl)[3], uint32_t in_flight_stage,
                         float(&next)[kAcc], float(&next_scl)[3], uint32_t& next_stage, bool range_ended) {
      if (range_ended) {
        ptx::wgmma_wait_group_sync_aligned<0>();
        promote_stage(in_flight, in_flight_scl, in_flight_stage);
        return false;
      }
      next_stage = ps.stage;
      issue_stage(next, next_scl, next_stage, ps.phase);
      ps.advance();
      ptx::wgmma_wait_group_sync_aligned<1>();
      promote_stage(in_flight, in_flight_scl, in_flight_stage);
      return true;
    };
    uint32_t stage_a = ps.stage, stage_b = 0;
    issue_stage(blk_a, scl_a, stage_a, ps.phase);
    ps.advance();
    for (int kb = t.kb_begin;; kb += 2) {
      if (!half_step(blk_a, scl_a, stage_a, blk_b, scl_b, stage_b, kb + 1 >= t.kb_end)) break;
      if (!half_step(blk_b, scl_b, stage_b, blk_a, scl_a, stage_a, kb + 2 >= t.kb_end)) break;
    }
  }
};

}  // namespace weave::gemm
