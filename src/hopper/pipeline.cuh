// Pipeline state of a multi-stage shared-memory ring guarded by full/empty mbarriers, and the
// bounded wait every mbarrier spin goes through.
//
// Ring protocol (docs/gemm.md, "Main-loop pipeline"): stage s has a `full` barrier (the producer's
// TMA bytes, plus any scale copies, have landed) and an `empty` barrier (every consumer warp has
// finished reading it). Consumers wait on full[s] with the parity of their current lap; the
// producer waits on empty[s] with the opposite parity, so its first lap passes at once.
#pragma once
#include <cstdint>

#include "hopper/ptx/ld_st.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/misc.cuh"
#include "hopper/wait_record.hpp"

namespace weave::hopper {

// A wait longer than this is a protocol bug (or a peer that died), not slowness. The waiting
// thread records where it happened and the CTA aborts cooperatively (below), so the host sees a
// recorded error (weave::Gemm::check() / the next run() raise kTimeout) and keeps a usable CUDA
// context, instead of a hang or a trap. No printf: a function call inside the kernel would
// serialise wgmma and defeat setmaxnreg (ptxas C7510/C7507).
inline constexpr uint64_t kMbarrierTimeoutNs = 10ull * 1000 * 1000 * 1000;

// Fills the process-wide record if no other thread (of any CTA) has claimed it; the fields are
// written before the magic, with system fences, so a host that sees the magic sees them all.
__device__ __forceinline__ void record_wait_timeout(WaitTimeoutRecord* record, WaitSite site, uint32_t stage,
                                                    uint32_t parity, uint64_t waited_ns) {
  if (record == nullptr || atomicCAS(&record->claimed, 0u, 1u) != 0u) return;
  volatile WaitTimeoutRecord* r = record;  // host-mapped memory
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

// Waits until the phase of parity `parity` of barrier `bar` completed. Returns true then, false
// when the CTA aborts instead: this thread waited longer than the bound (bound_ns = 0 means
// kMbarrierTimeoutNs; a fused kernel whose consumers may wait for peers passes a longer bound,
// above its communication timeout, so a slow peer is reported by the comm wait that knows who it
// is), recorded itself and set the CTA's abort word (a shared-memory u32 at `abort_word`), or
// another role of the CTA had set it. The word is polled with the timer, every 256 spins, so the
// fast path is the try_wait alone. The caller cleans up and exits (gemm/kernel.cuh); every role's
// waits go through here, so a stuck consumer takes the producer with it and vice versa.
// Memory-ordering note (docs/memory_ordering.md "pipeline-abort"): the abort word is a plain
// volatile shared store/load; it carries no data, only "stop", so no fence is needed.
__device__ __forceinline__ bool mbarrier_wait_or_abort(uint32_t bar, uint32_t parity, WaitSite site, uint32_t stage,
                                                       WaitTimeoutRecord* record, uint64_t bound_ns,
                                                       uint32_t abort_word) {
  if (ptx::mbarrier_try_wait_parity_acquire_cta(bar, parity)) return true;
  const uint64_t start = ptx::globaltimer_ns();
  for (uint32_t spins = 1;; ++spins) {
    if (ptx::mbarrier_try_wait_parity_acquire_cta(bar, parity)) return true;
    if ((spins & 255u) == 0) {
      if (ptx::ld_volatile_shared_u32(abort_word) != 0) return false;
      const uint64_t waited = ptx::globaltimer_ns() - start;
      if (waited > (bound_ns != 0 ? bound_ns : kMbarrierTimeoutNs)) {
        record_wait_timeout(record, site, stage, parity, waited);
        ptx::st_volatile_shared_u32(abort_word, 1u);
        return false;
      }
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
