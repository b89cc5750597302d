// Thin 1:1 wrappers over the thread-block-cluster instructions the GEMM's 2-CTA clusters use (PTX
// ISA "Cluster of Cooperative Thread Arrays", "mapa", "barrier.cluster", "mbarrier" on
// shared::cluster addresses, "cp.async.bulk.tensor" with .multicast::cluster). A shared::cluster
// address names shared memory of any CTA of the cluster; mapa turns this CTA's shared::cta address
// into the same offset in another CTA.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace weave::ptx {

// %cluster_ctarank: this CTA's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// mapa.shared::cluster.u32: the shared::cluster address of `addr` (a shared::cta address of this
// CTA) in the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t mapa_shared_cluster(uint32_t addr, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(addr), "r"(rank));
  return r;
}

// mbarrier.arrive.release.cta.shared::cluster.b64: one arrival on the barrier at a shared::cluster
// address (another CTA's, from mapa), releasing at CTA scope. (The .cluster scope compiles to a
// MEMBAR.ALL.GPU before the arrival: docs/memory_ordering.md "gemm-cluster" says why it is not needed.)
__device__ __forceinline__ void mbarrier_arrive_release_cta_shared_cluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64: as the .cta form (hopper/ptx/mbarrier.cuh),
// acquiring at cluster scope: for a barrier whose phase other CTAs of the cluster complete with
// writes of their own (st.async's complete_tx).
__device__ __forceinline__ bool mbarrier_try_wait_parity_acquire_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// st.relaxed.cluster.shared::cluster.u32: a word of another CTA of the cluster (its abort word).
__device__ __forceinline__ void st_relaxed_cluster_shared_cluster_u32(uint32_t addr, uint32_t v) {
  asm volatile("st.relaxed.cluster.shared::cluster.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// barrier.cluster.arrive.release / barrier.cluster.wait.acquire: every non-exited thread of the
// cluster arrives, then waits for all the others (a thread that exits counts as arrived). The
// non-.aligned forms: callers may be divergent.
__device__ __forceinline__ void barrier_cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release;\n" ::: "memory");
}
__device__ __forceinline__ void barrier_cluster_wait_acquire() {
  asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory");
}

// barrier.cluster.arrive.relaxed: this thread's arrival on the cluster barrier without ordering its
// prior accesses (a start handshake: the barriers it initialised are published by
// fence.mbarrier_init.release.cluster; the matching barrier_cluster_wait_acquire comes later).
__device__ __forceinline__ void barrier_cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
}

// st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32: writes {x, y} (8 bytes, aligned) to
// the shared::cluster address `addr` of a CTA of the cluster and performs complete_tx(8) on the
// mbarrier at the shared::cluster address `remote_bar` of that CTA; the completion releases the
// write at cluster scope to whoever acquires the barrier's phase.
__device__ __forceinline__ void st_async_v2_f32_complete_tx(uint32_t addr, float x, float y, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];\n" ::"r"(addr),
               "f"(x), "f"(y), "r"(remote_bar)
               : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster
// .L2::cache_hint: loads the box at (c0 = innermost, c1) once and writes it to the same shared::cta
// offset `dst` in every CTA of the cluster whose bit is set in `cta_mask`, performing
// complete_tx(box bytes) on the mbarrier at offset `bar` of each of those CTAs.
__device__ __forceinline__ void cp_async_bulk_tensor_2d_global_to_shared_multicast(uint32_t dst, const CUtensorMap* map,
                                                                                   int32_t c0, int32_t c1, uint32_t bar,
                                                                                   uint16_t cta_mask,
                                                                                   uint64_t cache_hint) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5, %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask), "l"(cache_hint)
      : "memory");
}

}  // namespace weave::ptx
