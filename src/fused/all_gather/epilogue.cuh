// The fused all-gather epilogue policy (gemm/epilogue_store.cuh describes the hooks; the
// protocol is docs/memory_ordering.md "ag-fused"):
//
//   begin_call (thread 0 of every CTA, before the kernel's first __syncthreads, so no role waits
//              on anything yet): e = epoch + 1; draw the CTA's epoch-election ticket; CTA 0
//              publishes ready = e into every peer's credit slot; then wait until every peer's
//              ready has reached e ("credit": the peer's previous call, and everything it did with
//              its output before this call, is complete), bounded. e and the ticket go to shared
//              memory for the other hooks. The call key {e, m} rides on the credit and on every
//              flag (docs/memory_ordering.md "call-key"): a peer of another m is a kMismatch.
//   stores     every strip is TMA-stored to this rank's rows in its own window and in every
//              peer's (peers in rank-rotated order); after a timeout only to its own.
//   tile_stored(leader of a consumer warpgroup, after cp.async.bulk.wait_group 0 and
//              fence.proxy.async.global): atom.release.sys.inc of the chunk's counter with limit
//              units - 1; the increment that returns units - 1 (it wrapped the counter back to 0,
//              ready for the next call at any M) acquires the counter and release-publishes
//              flag[src = rank][chunk] = e in every peer's window.
//   end_call  (producer warp 1 of the CTA holding the last ticket): wait until every peer's flags
//              of all this call's chunks have reached e (the output is complete), bounded; then
//              store the epoch. The kernel's completion then orders the output before later work.
// fused-ce (Params::pull, docs/memory_ordering.md "ag-fused-ce"): the strips go to the own rows
// only, and end_call's lane s - 1 walks peer r + s's chunks in order, storing the copy stream's
// trigger word of each chunk once its flag arrived (on every path: after a timeout without waiting).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "comm/device_common.cuh"
#include "fused/all_gather/params.hpp"
#include "fused/all_gather/schedule.hpp"
#include "fused/call_words.cuh"
#include "gemm/kernel_args.hpp"
#include "hopper/ptx/comm_flags.cuh"

namespace weave::fused {

// Per-CTA call state in shared memory (`words`, SmemLayout::kCallWordsOffset): [0] the call's
// epoch, [1] this CTA's election ticket.
template <class Out>
struct EpilogueAllGather {
  using Params = AllGatherParams;
  using OutType = Out;
  static constexpr gemm::EpilogueKind kKind = gemm::EpilogueKind::kAllGather;
  static_assert(sizeof(Out) == 2 || sizeof(Out) == 4, "bf16 or fp32 output");
  static constexpr bool kHasBeforeHook = true;  // the slow-rank testing hook
  static constexpr bool kHasStoredHook = true;
  static constexpr bool kHasIssuedHook = false;
  static constexpr bool kHasCallHooks = true;
  static constexpr bool kMultiDestination = true;
  static constexpr bool kStripWidthMaps = true;  // the op builds its maps with epi_box_bytes (64 or 128)

  __device__ __forceinline__ static void before_store(const Params& p, int, int, int, int) {
    comm::delay_for_testing(p.delay_stores_ns);
  }
  __device__ __forceinline__ static void tile_issued(const Params&, int, int, int, int) {}

  // Destinations of this tile's strips: the own rows, then each peer's copy; only the own rows
  // once a wait of this op timed out (a late but live peer must not be overwritten). fused-ce:
  // the own rows, and nothing after an abort (a slow peer's copy engine may still pull them).
  __device__ __forceinline__ static int destinations(const Params& p, int /*m_blk*/) {
    if (p.pull) return comm::aborted(p.p) ? 0 : 1;
    return comm::aborted(p.p) ? 1 : p.p.win.world;
  }
  __device__ __forceinline__ static const CUtensorMap* destination_map(const Params& p, int /*m_blk*/, int d) {
    return d == 0 ? &p.tma_c : &p.tma_peer[d - 1];
  }
  __device__ __forceinline__ static int destination_row(const Params&, int /*m_blk*/, int /*d*/, int row) { return row; }

  __device__ static void begin_call(const Params& p, uint32_t* words) {
    const comm::Proto& pr = p.p;
    const bool bad = comm::aborted(pr);
    open_call(pr, words);
    if (!bad) publish_and_wait_credit(pr, words[0], p.m);
  }

  __device__ static void tile_stored(const Params& p, int m_blk, int, int, int, const uint32_t* words) {
    const comm::Proto& pr = p.p;
    if (comm::aborted(pr)) return;
    const int w = pr.win.world, r = pr.win.rank;
    const int chunk = ag_chunk_of(p.chunks, m_blk);
    const uint32_t units = ag_chunk_units(p.chunks, chunk);
    if (!count_and_elect(comm::ctrl_word(pr, comm::kCtrlChunkCounter + chunk), units)) return;
    const uint32_t e = words[0];
    for (int s = 1; s < w; ++s) {
      const int t = comm::peer_at(r, s, w);
      publish_with_key(pr, comm::flag_slot(pr, t, 0, r, chunk), t, p.m, e);
    }
  }

  __device__ static void end_call(const Params& p, int lane, const uint32_t* words) {
    const comm::Proto& pr = p.p;
    if (!holds_last_ticket(words)) return;
    const uint32_t e = words[0];
    if (p.pull) {
      trigger_pulls(p, lane, e);
    } else if (!p.skip_arrival_wait) {
      const int w = pr.win.world, r = pr.win.rank;
      bool ok = true;
      const int waits = (w - 1) * p.chunks.chunks;
      for (int i = lane; i < waits && ok; i += 32) {
        const int src = comm::peer_at(r, 1 + i / p.chunks.chunks, w), chunk = i % p.chunks.chunks;
        ok = wait_with_key(pr, comm::flag_slot(pr, r, 0, src, chunk), src, 0, p.m, e);
      }
    }
    __syncwarp();
    if (lane == 0) close_call(pr, e);
  }

  // fused-ce: lane s - 1 serves copy stream s - 1 (peer r + s), chunks in the order the stream
  // waits for them. Every trigger is stored on every path: once a wait failed (timeout, or the
  // op aborted) the lane stores the rest without waiting, so no copy stream waits forever.
  __device__ static void trigger_pulls(const Params& p, int lane, uint32_t e) {
    const comm::Proto& pr = p.p;
    const int w = pr.win.world, r = pr.win.rank, s = lane + 1;
    if (s >= w) return;
    const int src = comm::peer_at(r, s, w);
    bool ok = true;
    for (int c = 0; c < p.chunks.chunks; ++c) {
      if (ok && !p.skip_arrival_wait)
        ok = wait_with_key(pr, comm::flag_slot(pr, r, 0, src, c), src, 0, p.m, e);
      if (ok) comm::delay_for_testing(p.delay_pull_ns);
      ptx::st_release_sys_u32(comm::ctrl_word(pr, comm::pull_trigger_word(s, c)), 1u);
    }
  }
};

}  // namespace weave::fused
