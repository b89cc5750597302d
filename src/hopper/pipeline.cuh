// Pipeline state of a multi-stage shared-memory ring guarded by full/empty mbarriers, and the
// bounded wait every mbarrier spin goes through.
//
// Ring protocol (docs/gemm.md, "Main-loop pipeline"): stage s has a `full` barrier (the producer's
// TMA bytes, plus any scale copies, have landed) and an `empty` barrier (every consumer warp has
// finished reading it). Consumers wait on full[s] with the parity of their current lap; the
// producer waits on empty[s] with the opposite parity, so its first lap passes at once.
#pragma once
#include <cstdint>
#include <cstdio>

#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/misc.cuh"

namespace weave::hopper {

// Where a wait came from, for the diagnostic printed when it times out.
enum class WaitSite : uint32_t { kProducerEmpty = 1, kConsumerFull = 2 };

// A wait longer than this is a protocol bug (or a peer that died), not slowness: report and trap
// so the host sees cudaErrorLaunchFailure instead of a hang.
inline constexpr uint64_t kMbarrierTimeoutNs = 10ull * 1000 * 1000 * 1000;

__device__ __noinline__ inline void report_wait_timeout(WaitSite site, uint32_t stage, uint32_t parity,
                                                        uint64_t waited_ns) {
  printf("weave: mbarrier wait timed out after %llu ns: block %d thread %d site %s stage %u parity %u\n",
         static_cast<unsigned long long>(waited_ns), static_cast<int>(blockIdx.x),
         static_cast<int>(threadIdx.x), site == WaitSite::kProducerEmpty ? "producer/empty" : "consumer/full",
         stage, parity);
  __trap();
}

// Waits until the phase of parity `parity` of barrier `bar` completed, at most kMbarrierTimeoutNs.
__device__ __forceinline__ void mbarrier_wait_bounded(uint32_t bar, uint32_t parity, WaitSite site,
                                                      uint32_t stage) {
  if (ptx::mbarrier_try_wait_parity_acquire_cta(bar, parity)) return;
  const uint64_t start = ptx::globaltimer();
  for (uint32_t spins = 1;; ++spins) {
    if (ptx::mbarrier_try_wait_parity_acquire_cta(bar, parity)) return;
    if ((spins & 255u) == 0) {
      const uint64_t waited = ptx::globaltimer() - start;
      if (waited > kMbarrierTimeoutNs) report_wait_timeout(site, stage, parity, waited);
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
