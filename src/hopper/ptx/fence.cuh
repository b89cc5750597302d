// Thin 1:1 wrappers over fences and CTA barriers (PTX ISA "membar/fence", "bar/barrier").
#pragma once
#include <cstdint>

namespace weave::ptx {

// fence.proxy.async.shared::cta: orders this thread's generic-proxy shared-memory accesses with
// later async-proxy (TMA, wgmma) accesses of shared memory, e.g. after mbarrier.init.
__device__ __forceinline__ void fence_proxy_async_shared_cta() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// fence.proxy.async.global: orders this thread's async-proxy global accesses (completed TMA
// stores) with its later generic-proxy accesses, e.g. before releasing a flag that says they landed.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// fence.mbarrier_init.release.cluster: makes prior mbarrier.init visible to the cluster (and to
// the async proxy that TMA completions arrive through).
__device__ __forceinline__ void fence_mbarrier_init_release_cluster() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// bar.sync id, count: named CTA barrier over `count` threads (a multiple of 32); id 0 is
// __syncthreads, so callers use ids >= 1.
__device__ __forceinline__ void bar_sync(uint32_t id, uint32_t count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace weave::ptx
