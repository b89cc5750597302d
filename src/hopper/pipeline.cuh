// Pipeline state of a multi-stage shared-memory ring guarded by full/empty mbarriers, and the
// bounded wait every mbarrier spin goes through.
//
// Ring protocol (docs/gemm.md, "Main-loop pipeline"): stage s has a `full` barrier (the producer's
// TMA bytes, plus any scale copies, have landed) and an `empty` barrier (every consumer warp has
// finished reading it). Consumers wait on full[s] with the parity of their current lap; the
// producer waits on empty[s] with the opposite parity, so its first lap passes at once.
#pragma once
#include <cstdint>

#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/misc.cuh"
#include "hopper/wait_record.hpp"

namespace weave::hopper {

// A wait longer than this is a protocol bug (or a peer that died), not slowness: record where it
// happened and trap, so the host sees cudaErrorLaunchFailure instead of a hang. No printf: a
// function call inside the kernel would serialise wgmma and defeat setmaxnreg (ptxas C7510/C7507).
inline constexpr uint64_t kMbarrierTimeoutNs = 10ull * 1000 * 1000 * 1000;

__device__ __forceinline__ void report_wait_timeout(WaitTimeoutRecord* record, WaitSite site, uint32_t stage,
                                                    uint32_t parity, uint64_t waited_ns) {
  if (record != nullptr) {
    volatile WaitTimeoutRecord* r = record;  // host-mapped memory: readable after the trap
    r->site = static_cast<uint32_t>(site);
    r->stage = stage;
    r->parity = parity;
    r->block = static_cast<int32_t>(blockIdx.x);
    r->thread = static_cast<int32_t>(threadIdx.x);
    r->waited_ns = waited_ns;
    __threadfence_system();
    r->magic = kWaitTimeoutMagic;
    __threadfence_system();
  }
  __trap();
}

// Waits until the phase of parity `parity` of barrier `bar` completed, at most kMbarrierTimeoutNs.
// bound_ns = 0 means kMbarrierTimeoutNs; a fused kernel whose consumers may wait for peers passes
// a longer bound (above its communication timeout), so a slow peer is reported by the bounded comm
// wait that knows who it is, not by a trap here.
__device__ __forceinline__ void mbarrier_wait_bounded(uint32_t bar, uint32_t parity, WaitSite site, uint32_t stage,
                                                      WaitTimeoutRecord* record, uint64_t bound_ns = 0) {
  if (ptx::mbarrier_try_wait_parity_acquire_cta(bar, parity)) return;
  const uint64_t start = ptx::globaltimer();
  for (uint32_t spins = 1;; ++spins) {
    if (ptx::mbarrier_try_wait_parity_acquire_cta(bar, parity)) return;
    if ((spins & 255u) == 0) {
      const uint64_t waited = ptx::globaltimer() - start;
      if (waited > (bound_ns != 0 ? bound_ns : kMbarrierTimeoutNs)) report_wait_timeout(record, site, stage, parity, waited);
    }
  }
}

// Stage index and lap parity of one side of the ring; both sides advance it identically.
template <int kStages>
struct PipelineState {
  uint32_t stage = 0;
  uint32_t phase = 0;  // parity of the current lap over the ring
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace weave::hopper
