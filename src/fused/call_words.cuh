// The call protocol steps both fused epilogues share (GemmAllGather, GemmAllReduce; the lsa kernels'
// CTA-wide versions are comm/call_protocol.cuh). Per-CTA call state lives in shared memory
// (SmemLayout::kCallWordsOffset): words[0] the call's epoch, words[1] this CTA's election ticket.
#pragma once
#include <cstdint>

#include "comm/device_common.cuh"
#include "hopper/ptx/comm_flags.cuh"

namespace weave::fused {

// Thread 0 of every CTA, before the kernel's first __syncthreads: e = last completed epoch + 1,
// then the CTA's ticket of the epoch election (docs/memory_ordering.md "epoch-election": the ticket
// is drawn after the epoch was read).
__device__ __forceinline__ void open_call(const comm::Proto& pr, uint32_t* words) {
  words[0] = *reinterpret_cast<volatile uint32_t*>(comm::ctrl_word(pr, comm::kCtrlEpoch)) + 1u;
  words[1] = gridDim.x > 1 ? ptx::atom_inc_release_gpu_u32(comm::ctrl_word(pr, comm::kCtrlDoneCount), gridDim.x - 1)
                           : 0u;
}

// Whether this CTA drew the last ticket (it ends the call).
__device__ __forceinline__ bool holds_last_ticket(const uint32_t* words) {
  return gridDim.x == 1 || words[1] == gridDim.x - 1;
}

// The CTA with the last ticket, after its end-of-call waits: the acquire side of the election
// (comm/call_protocol.cuh end_call), then the epoch store.
__device__ __forceinline__ void close_call(const comm::Proto& pr, uint32_t e) {
  if (gridDim.x > 1) (void)ptx::ld_acquire_sys_u32(comm::ctrl_word(pr, comm::kCtrlDoneCount));
  *reinterpret_cast<volatile uint32_t*>(comm::ctrl_word(pr, comm::kCtrlEpoch)) = e;
}

// wait_reached's give-up check of the fused waits: peer q's key of call e names another m (the
// mismatch is recorded by call_key_agrees).
struct OtherCallRows {
  const comm::Proto* pr;
  int q;
  int64_t m;
  uint32_t e;
  __device__ __forceinline__ bool operator()() const { return !comm::call_key_agrees(*pr, q, m, e); }
};

// The call credit (GemmAllGather fused-lsa and fused-ce, GemmAllReduce fused-ce; thread 0 of each CTA in
// begin_call, after open_call): CTA 0 publishes ready = e into every peer's credit slot, then every
// CTA waits (bounded) until every peer's ready has reached e: the peer's call e has begun, so its
// call e - 1, and every read of this rank's window it made, is complete. Nothing after a failure.
// The call key (docs/memory_ordering.md "call-key") rides on the credit: a peer that called with
// another m is found here, before this CTA stores anything into a peer.
__device__ __forceinline__ void publish_and_wait_credit(const comm::Proto& pr, uint32_t e, int64_t m) {
  const int w = pr.win.world, r = pr.win.rank;
  if (blockIdx.x == 0)
    for (int s = 1; s < w; ++s) {
      const int t = comm::peer_at(r, s, w);
      comm::publish_call_key(pr, t, m, e);
      comm::publish(comm::credit_slot(pr, t, r), e);
    }
  if (pr.flow_control)
    for (int s = 1; s < w; ++s) {
      const int t = comm::peer_at(r, s, w);
      if (!comm::wait_reached(pr, comm::credit_slot(pr, r, t), e, t, -1, comm::FlagKind::kCredit,
                              OtherCallRows{&pr, t, m, e}))
        return;
      if (!comm::call_key_agrees(pr, t, m, e)) return;
    }
}

// A flag of call e to peer q, its call key first ("call-key").
__device__ __forceinline__ void publish_with_key(const comm::Proto& pr, uint32_t* flag, int q, int64_t m, uint32_t e) {
  comm::publish_call_key(pr, q, m, e);
  comm::publish(flag, e);
}

// Every rank's key of call e, published to every peer as the call begins (CTA 0), so a waiter
// whose peer called with another m (and so may never publish the flag it waits for) finds out
// while it waits, not by a timeout.
__device__ __forceinline__ void announce_call_key(const comm::Proto& pr, int64_t m, uint32_t e) {
  if (blockIdx.x != 0) return;
  const int w = pr.win.world, r = pr.win.rank;
  for (int s = 1; s < w; ++s) comm::publish_call_key(pr, comm::peer_at(r, s, w), m, e);
}

// Waits (bounded) for peer q's flag of call e, then compares q's call key: false after a timeout,
// an abort or a key of another m (also seen while waiting).
__device__ __forceinline__ bool wait_with_key(const comm::Proto& pr, const uint32_t* flag, int q, int phase, int64_t m,
                                              uint32_t e) {
  return comm::wait_reached(pr, flag, e, q, phase, comm::FlagKind::kArrival, OtherCallRows{&pr, q, m, e}) &&
         comm::call_key_agrees(pr, q, m, e);
}

// docs/memory_ordering.md "chunk-election": counts one unit of a chunk of `units`; true for the
// count that completes it (the increment that wraps the counter back to 0, ready for the next call
// at any M), after acquiring the counter (this thread's own increment, the last of the release
// sequence every count of the chunk heads), so a publication that follows orders every count.
__device__ __forceinline__ bool count_and_elect(uint32_t* counter, uint32_t units) {
  if (ptx::atom_inc_release_sys_u32(counter, units - 1u) != units - 1u) return false;
  (void)ptx::ld_acquire_sys_u32(counter);
  return true;
}

}  // namespace weave::fused
