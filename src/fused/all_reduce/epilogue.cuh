// The fused all-reduce epilogue policy and its tile order (fused/all_reduce/schedule.hpp has the schedule;
// the protocol is docs/memory_ordering.md "ar-fused"). Hooks (gemm/epilogue_store.cuh):
//
//   begin_call  (thread 0 of every CTA, before the kernel's first __syncthreads): e = epoch + 1 and
//               the CTA's epoch-election ticket. No credit: the schedule's own waits already order
//               every write into a peer after that peer's reads of the previous call (the staging:
//               a rank starts call e + 1 only after every owner's final tiles of call e arrived,
//               which the owner stored after summing its staging; the output: final tiles go to a
//               peer only after that peer's partials of the same call arrived, so the peer has
//               started the call and finished everything before it). docs/memory_ordering.md "ar-fused".
//   a remote tile (band d != rank): one destination, d's staging slot [rank], at the tile's row in
//               band d. tile_stored (after cp.async.bulk.wait_group 0 + fence.proxy.async.global):
//               atom.release.sys.inc of counter RS[d][chunk]; the increment that wraps it to 0
//               acquires it and release-publishes flag[phase 0][src = rank][chunk] = e at d.
//   an own tile (band rank): combine (every consumer thread, after its warpgroup retired the
//               previous tile): lane 0 of each warp acquire-waits flag[0][q][chunk] >= e of every
//               peer q (bounded), __syncwarp; each thread then sums its fragment in rank order,
//               v = t_0 + t_1 + ... (t_q = peer q's bf16 partial from the local staging, t_rank =
//               its own accumulator rounded to bf16, or in fp32 with exact_own): exactly the sum of
//               the split path's two-shot all-reduce. The final tile goes to this rank's output and
//               every peer's (rank-rotated); tile_stored counts AG[chunk] and the elected thread
//               publishes flag[phase 1][rank][chunk] = e at every peer.
//   end_call    (producer warp 1 of the CTA with the last ticket): waits for every peer's final
//               chunks (flag[1][q][c] >= e for each chunk of band q), bounded; stores the epoch.
// Every flag carries the call key {e, m} and the end-of-call (and fused-ce's pull) waits compare it
// (docs/memory_ordering.md "call-key"): a peer that called with another m is a kMismatch.
// After a timed-out wait (the op's abort word) remote stores and publications stop, own tiles are
// still stored locally (an own tile's destinations are read after its combine), and every role
// runs to its end: the kernel completes, check() raises.
// pull (mode fused-ce, docs/memory_ordering.md "ar-fused-ce"): every tile goes to this rank's own
// output rows only (a peer band's tile as its bf16 partial, at its own rows), flags are published
// as in fused; begin_call adds GemmAllGather's credit (the peers' copy engines read this rank's
// output during their call); the combine waits for arrived[q][chunk] (local) instead of
// flag[0][q][chunk]; end_call's warp (from the kernel's start) runs the copy streams' triggers
// (lane s - 1) and landed words (lane 16 + s - 1), fused/all_reduce/pull.hpp.
// no_gather (GemmReduceScatter's fused): as fused, but an own tile's destination is this rank's
// output only; the flags of phase 1 still go to every peer (the staging's credit, above) and
// end_call waits for them as in fused.
// scatter_only (mode fused-rs, the control arm): every tile is a remote-style partial (the own
// band's into this rank's own staging slot, counted on RS[rank]), no combine, and end_call does
// nothing: the tail kernel (fused/all_reduce/tail.hpp) reduces, gathers and closes the call.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "comm/device_common.cuh"
#include "fused/all_reduce/counters.cuh"
#include "fused/all_reduce/params.hpp"
#include "fused/all_reduce/pull.hpp"
#include "fused/all_reduce/schedule.hpp"
#include "fused/call_words.cuh"
#include "gemm/kernel_args.hpp"
#include "hopper/ptx/comm_flags.cuh"

namespace weave::fused {

// The tile order of fused/all_reduce/schedule.hpp, read from the epilogue's parameters (no copy: the table
// stays in the kernel's parameter space).
struct BandRoundScheduler {
  static constexpr gemm::SchedulerKind kKind = gemm::SchedulerKind::kBandRound;
  const ArSchedule* s;

  template <class EpilogueParams>
  __device__ __forceinline__ BandRoundScheduler(const gemm::KernelArgs<EpilogueParams>& args, int, int)
      : s(&args.epi.sched) {}
  __device__ __forceinline__ int num_tiles() const { return s->m_blocks * s->n_blocks; }
  __device__ __forceinline__ void coords(int tile, int& m_blk, int& n_blk) const {
    ar_tile_coords(*s, tile, m_blk, n_blk);
  }
};

// Per-CTA call state in shared memory (SmemLayout::kCallWordsOffset): [0] the call's epoch,
// [1] this CTA's election ticket.
template <class Out>
struct EpilogueAllReduce {
  using Params = AllReduceParams;
  using OutType = Out;
  static constexpr gemm::EpilogueKind kKind = gemm::EpilogueKind::kAllReduce;
  static_assert(sizeof(Out) == 2, "bf16 output (the partials and the sum travel as bf16)");
  static constexpr bool kHasBeforeHook = true;  // the slow-rank testing hook
  static constexpr bool kHasStoredHook = true;
  static constexpr bool kHasIssuedHook = false;
  static constexpr bool kHasCallHooks = true;
  static constexpr bool kMultiDestination = true;
  static constexpr bool kHasCombineHook = true;
  static constexpr bool kStripWidthMaps = true;  // the op builds its maps with epi_box_bytes (64 or 128)
  // One copy of the GEMM consumer role (gemm/kernel.cuh single_consumer_role): with the role
  // compiled per debug-flag value, this epilogue's registers made ptxas spill 68-972 bytes.
  static constexpr bool kSingleConsumerRole = true;

  __device__ __forceinline__ static void before_store(const Params& p, int, int, int, int) {
    comm::delay_for_testing(p.delay_stores_ns);
  }
  __device__ __forceinline__ static void tile_issued(const Params&, int, int, int, int) {}

  __device__ __forceinline__ static bool own(const Params& p, int m_blk) {
    return ar_band_of(p.sched, m_blk) == p.p.win.rank;
  }
  // An own tile this kernel sums and broadcasts (fused); under scatter_only (fused-rs) every tile
  // is a partial for its owner's staging, the own band's into this rank's own slot.
  __device__ __forceinline__ static bool reduces_here(const Params& p, int m_blk) {
    return !p.scatter_only && own(p, m_blk);
  }

  // Own tile: this rank's output and every peer's; remote tile: its owner's staging. After a
  // timeout only the own output (a late but live peer must not be overwritten); fused-rs's own
  // partials go to the local staging even then. fused-ce stores every tile to its own rows only,
  // and nothing after an abort: a slow peer's copy engine may still be pulling those rows.
  __device__ __forceinline__ static int destinations(const Params& p, int m_blk) {
    if (comm::aborted(p.p)) return p.pull ? p.pull_stores_after_abort : own(p, m_blk) ? 1 : 0;
    return p.pull || p.no_gather ? 1 : reduces_here(p, m_blk) ? p.p.win.world : 1;
  }
  __device__ __forceinline__ static const CUtensorMap* destination_map(const Params& p, int m_blk, int d) {
    if (p.pull) return &p.tma_c;
    if (reduces_here(p, m_blk)) return d == 0 ? &p.tma_c : &p.tma_peer[d - 1];
    return &p.tma_stage[ar_band_of(p.sched, m_blk)];
  }
  __device__ __forceinline__ static int destination_row(const Params& p, int m_blk, int, int row) {
    if (p.pull || reduces_here(p, m_blk)) return row;
    return row - ar_band_begin(p.sched, ar_band_of(p.sched, m_blk)) * p.block_m;
  }

  __device__ static void begin_call(const Params& p, uint32_t* words) {
    const comm::Proto& pr = p.p;
    const bool bad = comm::aborted(pr);
    open_call(pr, words);
    if (!p.pull && !bad) announce_call_key(pr, p.m, words[0]);  // fused-ce's key rides on its credit
    // fused-ce's credit (as GemmAllGather's): a peer's ready = e is published by its call e, which
    // starts after its copy streams of call e - 1 joined, so nothing of e - 1 still reads this
    // rank's output when this call's tiles overwrite it.
    if (p.pull && !bad) publish_and_wait_credit(pr, words[0], p.m);
  }

  __device__ __forceinline__ static uint32_t* pull_word(const Params& p, int index) {
    return reinterpret_cast<uint32_t*>(p.p.win.base[p.p.win.rank] + p.pull_words) + index;
  }

  // Own tiles: add the peers' partials (rank order) to the accumulators of this warpgroup's part of
  // the tile (its rows, or with a 64-row tile its columns: Tile::wg_row0 / wg_col0).
  template <class Tile, int kSlices, int kAcc>
  __device__ static void combine(const Params& p, const uint32_t* words, float (&acc)[kSlices][kAcc], int m_blk,
                                 int n_blk, int cwg) {
    if (!reduces_here(p, m_blk)) return;
    const comm::Proto& pr = p.p;
    const int w = pr.win.world, r = pr.win.rank;
    const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x % 128) / 32;
    const int chunk = ar_chunk_of(p.sched, m_blk);
    if (lane == 0 && !p.skip_partial_wait && !comm::aborted(pr)) {
      const uint32_t e = words[0];
      for (int s = 1; s < w; ++s) {
        const int q = comm::source_at(r, s, w);
        // fused-ce's arrived word is local (its landed lane's): the key came with q's flag there.
        // No call-key compare here (docs/memory_ordering.md "call-key": it made ptxas spill in this
        // consumer); end_call compares every peer's key of this call.
        const uint32_t* arrived =
            p.pull ? pull_word(p, ar_pull_arrived(q, chunk)) : comm::flag_slot(pr, r, 0, q, chunk);
        if (!comm::wait_reached(pr, arrived, e, q, 0, comm::FlagKind::kArrival)) break;
      }
    }
    // docs/memory_ordering.md "consume-acquire" (warp form): lane 0's acquire, then __syncwarp,
    // orders every lane's loads of the staged partials after the flag.
    __syncwarp();
    const int band_row0 = ar_band_begin(p.sched, r) * p.block_m;  // (p.block_m == Tile::kBlockM)
    const char* slots = pr.win.base[r] + p.staging;
    // Per row of the fragment and batch of kBatch n8 chunks: one batch of kBatch independent loads
    // per peer, summed in rank order into `sum` (the prefix before the own term is kept apart from
    // acc, which holds the own term until its turn). A load per value behind a loop over peers was
    // one L2 round trip each. The peer loop is unrolled to kArMaxWorld (a runtime loop, or batches
    // of the whole row of 16 chunks, made the mxfp8 kernels spill).
    // Batches of 8 where they divide the row, else 4 (a 160-wide tile's 20 chunks, 64x64's 4).
    constexpr int kChunks = kAcc / 4, kBatch = kSlices > 1 || kChunks % 8 != 0 ? 4 : 8;
    static_assert(kChunks % kBatch == 0, "n8 chunks per slice must split into batches");
#pragma unroll
    for (int j = 0; j < kSlices; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m_blk * p.block_m + Tile::wg_row0(cwg) + j * 64 + warp * 16 + lane / 4 + h * 8;
        if (row >= p.m) continue;
        const char* row_base = slots + static_cast<size_t>(row - band_row0) * static_cast<size_t>(p.n) * 2;
#pragma unroll
        for (int b0 = 0; b0 < kChunks; b0 += kBatch) {
          const int col0 = n_blk * Tile::kBlockN + Tile::wg_col0(cwg) + b0 * 8 + (lane % 4) * 2;
          float sum[kBatch][2];
#pragma unroll
          for (int q = 0; q < kArMaxWorld; ++q) {
            if (q >= w) break;
            uint32_t bits[kBatch];
            if (q != r) {
              const char* src = row_base + static_cast<size_t>(q) * p.slot_stride;
#pragma unroll
              for (int i = 0; i < kBatch; ++i) {
                // n is a multiple of 8: the pair (col, col + 1) is in or out whole.
                const int col = col0 + i * 8;
                bits[i] = col < p.n ? *reinterpret_cast<const uint32_t*>(src + static_cast<size_t>(col) * 2) : 0u;
              }
            }
#pragma unroll
            for (int i = 0; i < kBatch; ++i) {
              float t0, t1;
              if (q == r) {
                t0 = acc[j][4 * (b0 + i) + 2 * h];
                t1 = acc[j][4 * (b0 + i) + 2 * h + 1];
                if (!p.exact_own) {
                  t0 = __bfloat162float(__float2bfloat16_rn(t0));
                  t1 = __bfloat162float(__float2bfloat16_rn(t1));
                }
              } else {
                __nv_bfloat162 pair;
                *reinterpret_cast<uint32_t*>(&pair) = bits[i];
                const float2 f = __bfloat1622float2(pair);
                t0 = f.x;
                t1 = f.y;
              }
              // As comm/device_common.cuh reduce_range: the first term, then += in rank order.
              sum[i][0] = q == 0 ? t0 : sum[i][0] + t0;
              sum[i][1] = q == 0 ? t1 : sum[i][1] + t1;
            }
          }
#pragma unroll
          for (int i = 0; i < kBatch; ++i) {
            acc[j][4 * (b0 + i) + 2 * h] = sum[i][0];
            acc[j][4 * (b0 + i) + 2 * h + 1] = sum[i][1];
          }
        }
      }
  }

  __device__ static void tile_stored(const Params& p, int m_blk, int, int, int, const uint32_t* words) {
    const comm::Proto& pr = p.p;
    if (comm::aborted(pr)) return;
    const int w = pr.win.world, r = pr.win.rank;
    const int d = ar_band_of(p.sched, m_blk), chunk = ar_chunk_of(p.sched, m_blk);
    const uint32_t units = ar_chunk_units(p.sched, d, chunk);
    const bool final_tile = reduces_here(p, m_blk);  // else a partial for band d's owner (maybe this rank)
    uint32_t* counter = final_tile ? ar_ag_counter(pr, chunk) : ar_rs_counter(pr, d, chunk);
    if (!count_and_elect(counter, units)) {
      if (!p.publish_every_tile) return;
      (void)ptx::ld_acquire_sys_u32(counter);  // the negative control publishes after every count
    }
    const uint32_t e = words[0];
    if (!final_tile) {
      publish_with_key(pr, comm::flag_slot(pr, d, 0, r, chunk), d, p.m, e);
    } else {
      for (int s = 1; s < w; ++s) {
        const int t = comm::peer_at(r, s, w);
        publish_with_key(pr, comm::flag_slot(pr, t, 1, r, chunk), t, p.m, e);
      }
    }
  }

  __device__ static void end_call(const Params& p, int lane, const uint32_t* words) {
    const comm::Proto& pr = p.p;
    if (p.scatter_only || !holds_last_ticket(words)) return;  // fused-rs: the tail kernel ends the call
    const uint32_t e = words[0];
    const int w = pr.win.world, r = pr.win.rank;
    bool ok = true;
    if (p.pull) {
      // fused-ce: the final chunks arrive by the copy streams, which the caller's stream joins.
      serve_pulls(p, lane, e);
    } else if (!p.skip_arrival_wait && !comm::aborted(pr)) {
      const int per_peer = p.sched.max_chunks;  // band q has at most as many chunks as band 0
      for (int i = lane; i < (w - 1) * per_peer && ok; i += 32) {
        const int q = comm::peer_at(r, 1 + i / per_peer, w), chunk = i % per_peer;
        if (chunk >= ar_chunks_of(p.sched, q)) continue;
        ok = wait_with_key(pr, comm::flag_slot(pr, r, 1, q, chunk), q, 1, p.m, e);
      }
    }
    __syncwarp();
    if (lane == 0) close_call(pr, e);
  }

  // fused-ce, docs/memory_ordering.md "ar-fused-ce". Lane s - 1 serves copy stream s - 1 (peer
  // q = r + s): for each event of the stream's walk it waits for the chunk's flag at this rank
  // (flag[0][q][c]: q's partial of this band is in q's rows; flag[1][q][c]: q's final chunk is), then
  // stores the trigger. Every trigger is stored on every path (after a failed wait without waiting),
  // so no copy stream waits forever. Lane 16 + s - 1 waits for each RS copy's landed word, clears it
  // and publishes arrived[q][c] = e for the own tiles' combine; after a failed wait it stops (the
  // combine's own waits see the abort).
  __device__ static void serve_pulls(const Params& p, int lane, uint32_t e) {
    const comm::Proto& pr = p.p;
    const int w = pr.win.world, r = pr.win.rank;
    if (lane < w - 1) {
      const int s = lane + 1, q = comm::peer_at(r, s, w);
      bool ok = !comm::aborted(pr);
      ar_pull_walk(p.sched, r, q, [&](int leg, int c) {
        if (ok && !p.skip_arrival_wait)
          ok = wait_with_key(pr, comm::flag_slot(pr, r, leg, q, c), q, leg, p.m, e);
        if (ok && leg == kArPullAg) comm::delay_for_testing(p.delay_pull_ns);  // a slow gatherer
        ptx::st_release_sys_u32(pull_word(p, ar_pull_trigger(leg, s, c)), 1u);
      });
    } else if (lane >= 16 && lane < 16 + w - 1) {
      const int s = lane - 15, q = comm::peer_at(r, s, w);
      const int chunks = ar_chunks_of(p.sched, r);
      for (int c = 0; c < chunks; ++c) {
        uint32_t* landed = pull_word(p, ar_pull_landed(s, c));
        // The copy stream's 1 (never an epoch): "reached 1" from 0 is exactly "== 1".
        if (!comm::wait_reached(pr, landed, 1u, q, 0, comm::FlagKind::kCopyLanded)) break;
        *reinterpret_cast<volatile uint32_t*>(landed) = 0u;  // the next call's copy sets it after its trigger
        comm::publish(pull_word(p, ar_pull_arrived(q, c)), e);
      }
    }
  }
};

}  // namespace weave::fused
