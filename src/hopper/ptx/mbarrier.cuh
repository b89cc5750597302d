// Thin 1:1 wrappers over the mbarrier instructions (PTX ISA "Parallel Synchronization and
// Communication Instructions: mbarrier"). Addresses are shared-memory (shared::cta) addresses as
// returned by smem_addr(). Semantics and scope are in the names: arrivals are .release.cta and the
// parity test is .acquire.cta, so data written before an arrive (by this thread, or by the
// asynchronous proxy for complete_tx) is visible to a thread whose try_wait then succeeds.
// Bounded waiting built on try_wait lives in hopper/pipeline.cuh, not here.
#pragma once
#include <cstdint>

namespace weave::ptx {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier.init.shared::cta.b64: phase 0 in progress, expecting `count` arrivals.
__device__ __forceinline__ void mbarrier_init_shared_cta(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// mbarrier.arrive.release.cta.shared::cta.b64: one arrival on the current phase.
__device__ __forceinline__ void mbarrier_arrive_release_cta(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// mbarrier.arrive.expect_tx.release.cta.shared::cta.b64: one arrival, and the current phase also
// waits for `tx_bytes` bytes of asynchronous transactions (TMA complete_tx) to land.
__device__ __forceinline__ void mbarrier_arrive_expect_tx_release_cta(uint32_t bar, uint32_t tx_bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(tx_bytes)
               : "memory");
}

// mbarrier.try_wait.parity.acquire.cta.shared::cta.b64: true once the phase with parity `parity`
// has completed (may suspend the thread for a system-dependent time before returning false).
__device__ __forceinline__ bool mbarrier_try_wait_parity_acquire_cta(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// cp.async.mbarrier.arrive.noinc.shared::cta.b64: the mbarrier receives one arrival once every
// cp.async this thread issued before completes. .noinc: the arrival is counted in the barrier's
// init count (it does not add a pending arrival first).
__device__ __forceinline__ void cp_async_mbarrier_arrive_noinc_shared_cta(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

}  // namespace weave::ptx
