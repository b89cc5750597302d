// Per-call protocol steps of the lsa kernels, one CTA at a time (docs/memory_ordering.md):
//   begin_call        (programmatic dependent launch: let the next call's grid be scheduled, then
//                     wait for the previous grid on the stream to complete, "pdl"); read the op's
//                     epoch (e = last completed + 1); skip everything if aborted
//   exchange_credits  publish ready = e to every peer ("credit"), wait for theirs >= e - lag
//   signal_peers      after this CTA's stores: release-publish flag[phase][me][cta] = e at peers
//   wait_peers        acquire-wait flag[phase][peer][cta] >= e from every peer
//   end_call          the CTA that drew the last election ticket (taken in begin_call right after
//                     reading the epoch) stores the epoch
// CTA b of every rank handles the same part b of each transfer, so flags are per (source, CTA)
// and no CTA ever waits for another CTA of its own grid (no co-residency assumption).
#pragma once
#include "comm/credit.hpp"
#include "comm/device_common.cuh"
#include "common/check.hpp"
#include "hopper/pdl_attribute.hpp"
#include "hopper/ptx/griddepcontrol.cuh"

namespace weave::comm {

// One call as a CTA sees it: the epoch, and (thread 0) the CTA's ticket of the epoch election.
struct CallEpoch {
  uint32_t e = 0;
  uint32_t ticket = 0;
};

// begin_call's epoch step for a kernel that waits for its PDL predecessor itself (the decode GEMV's
// all-reduce epilogue, gemv/gemv_all_reduce.cuh), thread 0 of a CTA of a grid of `ctas` CTAs:
// whether the op is aborted (*bad), the CTA's election ticket (call->ticket), and the call's epoch,
// returned. (begin_call keeps its own copy of these lines: routed through this helper, the lsa
// kernels' SASS changed.)
__device__ __forceinline__ uint32_t read_call_epoch(const Proto& p, uint32_t ctas, bool* bad, CallEpoch* call) {
  *bad = aborted(p);
  const uint32_t e = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) + 1u;
  if (ctas > 1) call->ticket = ptx::atom_inc_release_gpu_u32(ctrl_word(p, kCtrlDoneCount), ctas - 1);
  return e;
}

// `prefetch` runs in every thread after the wait and before the epoch is known: loads of the
// call's input issued there overlap the epoch load (the LL kernel's latency path).
// docs/memory_ordering.md "epoch-election": thread 0 takes its CTA's ticket right after reading
// the epoch; the result is needed only in end_call, so the atomic's latency is hidden.
template <typename Prefetch>
__device__ inline bool begin_call(const Proto& p, CallEpoch* call, Prefetch&& prefetch) {
  __shared__ uint32_t s_epoch;
  // docs/memory_ordering.md "pdl": nothing before the wait touches memory.
  ptx::griddepcontrol_launch_dependents();
  ptx::griddepcontrol_wait();
  bool bad = false;
  if (threadIdx.x == 0) {
    bad = aborted(p);
    s_epoch = *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) + 1u;
    // Release, not acq_rel: the acquire half would hold back every later load and store of this
    // thread (its sends) until the atomic's round trip ends; end_call acquires before acting.
    if (gridDim.x > 1) call->ticket = ptx::atom_inc_release_gpu_u32(ctrl_word(p, kCtrlDoneCount), gridDim.x - 1);
  }
  prefetch();
  if (__syncthreads_or(bad)) return false;
  call->e = s_epoch;
  return true;
}
__device__ inline bool begin_call(const Proto& p, CallEpoch* call) {
  return begin_call(p, call, [] {});
}

// docs/memory_ordering.md "credit": ready = e means every earlier stream operation of this rank,
// including each read of the buffers peers write into, has completed. The wait passes when
// credit_granted(ready, e, lag) (comm/credit.hpp, simulated on the CPU).
// With zc (lag 0 only: a peer's ready of this call, not of an older one) the peers' zero-copy keys
// ride on the credit: published before it, compared after the wait ("zero-copy-offsets").
__device__ inline bool exchange_credits(const Proto& p, uint32_t e, uint32_t lag, const ZeroCopyKey& zc = {}) {
  const int t = static_cast<int>(threadIdx.x), w = p.win.world, r = p.win.rank;
  bool bad = false;
  if (t < w && t != r) {
    publish_zc(p, t, zc);
    publish(credit_slot(p, t, r), e);
    if (p.flow_control) {
      bad = !wait_reached(p, credit_slot(p, r, t), credit_wait_epoch(e, lag), t, -1, FlagKind::kCredit);
      if (!bad && lag == 0) bad = !zc_matches(p, t, zc);
    }
  }
  return !__syncthreads_or(bad);
}

// docs/memory_ordering.md "publish-release": bar.sync orders every thread's stores of this CTA
// before the release store of the flag (release is cumulative).
__device__ inline void signal_peers(const Proto& p, int phase, uint32_t e) {
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x), w = p.win.world, r = p.win.rank;
  if (t < w && t != r) publish(flag_slot(p, t, phase, r, static_cast<int>(blockIdx.x)), e);
}

// docs/memory_ordering.md "consume-acquire": the acquire load, then bar.sync, orders every
// thread's later loads of the peer-written data after the flag.
// With zc: the peers published their zero-copy keys before this flag (publish_zc, then
// signal_peers); compared after it ("zero-copy-offsets").
__device__ inline bool wait_peers(const Proto& p, int phase, uint32_t e, FlagKind kind, const ZeroCopyKey& zc = {}) {
  const int t = static_cast<int>(threadIdx.x), w = p.win.world, r = p.win.rank;
  bool bad = false;
  if (t < w && t != r) {
    bad = !wait_reached(p, flag_slot(p, r, phase, t, static_cast<int>(blockIdx.x)), e, t, phase, kind);
    if (!bad) bad = !zc_matches(p, t, zc);
  }
  return !__syncthreads_or(bad);
}

// docs/memory_ordering.md "epoch-election": the CTA that drew the last ticket stores the epoch
// (every CTA has read the old one before drawing its ticket); a one-CTA grid stores it directly.
// `ctas`: the grid's CTAs (a 2-D grid counts all of them).
__device__ inline void end_call(const Proto& p, const CallEpoch& call, uint32_t ctas) {
  if (threadIdx.x != 0) return;
  if (ctas == 1) {
    *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) = call.e;
  } else if (call.ticket == ctas - 1) {
    // Acquire side of the election: an acquire LOAD of the counter (it reads this CTA's own
    // increment, the last of the release sequence every CTA's increment heads), not a fence: a
    // fence would also wait until this thread's stores to peers are performed, one NVLink round
    // trip on the call's tail.
    (void)ptx::ld_acquire_sys_u32(ctrl_word(p, kCtrlDoneCount));
    *reinterpret_cast<volatile uint32_t*>(ctrl_word(p, kCtrlEpoch)) = call.e;
  }
}
__device__ inline void end_call(const Proto& p, const CallEpoch& call) { end_call(p, call, gridDim.x); }

// Launches an lsa kernel (every one starts with begin_call) with programmatic stream
// serialization, so its launch overlaps the tail of the previous kernel on the stream
// (docs/memory_ordering.md "pdl"). Captured into graphs as a programmatic edge.
// The grid is c.blocks, capped by what of THIS kernel is resident at once (its own occupancy,
// shared among the ranks on this GPU): CTA b waits for CTA b of every peer, so a CTA that is not
// scheduled until another finishes would deadlock (docs/memory_ordering.md "residency"). The cap
// is the same on every rank (same kernel, same GPU model), so CTA b still pairs with CTA b.
template <typename Kernel, typename Call>
void launch_lsa_kernel(Kernel kernel, Call c, cudaStream_t stream) {
  const int share = c.p.ranks_per_device > 1 ? c.p.ranks_per_device : 1;
  int cap = co_resident_blocks(reinterpret_cast<const void*>(kernel), kLsaThreads) / share;
  // Ranks sharing this GPU (the emulated world): also at most this rank's share of the SMs. The
  // block scheduler spreads a grid over idle SMs, so a waiting grid of more CTAs than SMs / share
  // could sit on every SM and keep a peer's full-SM GEMM, whose output it waits for, from starting.
  if (share > 1) {
    const int sms = rank_sm_share(device_sms(), share);
    cap = cap < sms ? cap : sms;
  }
  c.blocks = c.blocks < cap ? c.blocks : (cap > 0 ? cap : 1);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(c.blocks), 1, 1);
  config.blockDim = dim3(kLsaThreads, 1, 1);
  config.stream = stream;
  cudaLaunchAttribute attr = hopper::programmatic_serialization_attribute();
  config.attrs = &attr;
  // Not where ranks share the GPU (the emulated world): every lsa kernel lets the next grid launch
  // at once, so a graph of back-to-back calls makes a rank's whole chain of calls resident together
  // on SMs its peers' current calls need (docs/memory_ordering.md "residency").
  config.numAttrs = share > 1 ? 0 : 1;
  WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&config, kernel, c));
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::comm
