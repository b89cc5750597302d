// Per-call protocol steps of the lsa kernels, one CTA at a time (docs/memory_ordering.md):
//   begin_call        read the op's epoch (e = last completed + 1); skip everything if aborted
//   exchange_credits  publish ready = e to every peer ("credit"), wait for theirs >= e - lag
//   signal_peers      after this CTA's stores: release-publish flag[phase][me][cta] = e at peers
//   wait_peers        acquire-wait flag[phase][peer][cta] >= e from every peer
//   end_call          the last CTA to finish stores the epoch (atomicInc election)
// CTA b of every rank handles the same part b of each transfer, so flags are per (source, CTA)
// and no CTA ever waits for another CTA of its own grid (no co-residency assumption).
#pragma once
#include "comm/device_common.cuh"

namespace weave::comm {

__device__ inline bool begin_call(const ProtoArgs& p, uint32_t* epoch) {
  __shared__ uint32_t s_epoch;
  bool bad = false;
  if (threadIdx.x == 0) {
    bad = aborted(p);
    s_epoch = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) + 1u;
  }
  if (__syncthreads_or(bad)) return false;
  *epoch = s_epoch;
  return true;
}

// docs/memory_ordering.md "credit": ready = e means every earlier stream operation of this rank,
// including each read of the buffers peers write into, has completed.
__device__ inline bool exchange_credits(const ProtoArgs& p, uint32_t e, uint32_t lag) {
  const int t = static_cast<int>(threadIdx.x), w = p.win.world, r = p.win.rank;
  bool bad = false;
  if (t < w && t != r) {
    publish(credit_slot(p, t, r), e);
    if (p.flow_control) bad = !wait_reached(p, credit_slot(p, r, t), e - lag, t, -1, FlagKind::kCredit);
  }
  return !__syncthreads_or(bad);
}

// docs/memory_ordering.md "publish-release": bar.sync orders every thread's stores of this CTA
// before the release store of the flag (release is cumulative).
__device__ inline void signal_peers(const ProtoArgs& p, int phase, uint32_t e) {
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x), w = p.win.world, r = p.win.rank;
  if (t < w && t != r) publish(flag_slot(p, t, phase, r, static_cast<int>(blockIdx.x)), e);
}

// docs/memory_ordering.md "consume-acquire": the acquire load, then bar.sync, orders every
// thread's later loads of the peer-written data after the flag.
__device__ inline bool wait_peers(const ProtoArgs& p, int phase, uint32_t e, FlagKind kind) {
  const int t = static_cast<int>(threadIdx.x), w = p.win.world, r = p.win.rank;
  bool bad = false;
  if (t < w && t != r) bad = !wait_reached(p, flag_slot(p, r, phase, t, static_cast<int>(blockIdx.x)), e, t, phase, kind);
  return !__syncthreads_or(bad);
}

// docs/memory_ordering.md "epoch-election".
__device__ inline void end_call(const ProtoArgs& p, uint32_t e) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t last = gridDim.x - 1;
    if (ptx::atom_inc_acq_rel_gpu_u32(ctrl_word(p, kCtrlDoneCount), last) == last)
      *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) = e;
  }
}

}  // namespace weave::comm
