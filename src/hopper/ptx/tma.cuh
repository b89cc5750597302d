// Thin 1:1 wrappers over the Hopper tensor-memory-accelerator instructions (PTX ISA
// "cp.async.bulk.tensor", "prefetch.tensormap"). The tensor map (CUtensorMap) must live in
// kernel-parameter (__grid_constant__), constant or global memory; it is passed by its generic
// address. Completion is signalled through an mbarrier's transaction count (complete_tx::bytes):
// the full box size always counts, also where the box runs past the tensor and TMA fills zeros.
#pragma once
#include <cuda.h>

#include <cstdint>

namespace weave::ptx {

// prefetch.tensormap: pulls the descriptor into the TMA unit's cache ahead of first use.
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// cp.async.bulk.prefetch.tensor.2d.L2.global.tile: brings the box at (c0 = innermost, c1) into
// L2 without landing it anywhere in the SM (no barrier, no completion to wait for).
__device__ __forceinline__ void cp_async_bulk_prefetch_tensor_2d_l2(const CUtensorMap* map, int32_t c0, int32_t c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1)
               : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint:
// loads the box at coordinates (c0 = innermost, c1) into shared memory at `dst`, then performs
// complete_tx(box bytes) on the mbarrier `bar` (both shared::cta addresses of this CTA).
__device__ __forceinline__ void cp_async_bulk_tensor_2d_global_to_shared(uint32_t dst, const CUtensorMap* map,
                                                                         int32_t c0, int32_t c1, uint32_t bar,
                                                                         uint64_t cache_hint) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "l"(cache_hint)
      : "memory");
}

// cp.async.bulk.tensor.3d.global.shared::cta.bulk_group: stores the box at shared::cta address
// `src` to coordinates (c0 = innermost, c1, c2) of the tensor `map`; parts of the box outside the
// tensor are not written (TMA clips). The store joins this thread's current bulk async-group
// (commit it with cp_async_bulk_commit_group). It reads shared memory through the async proxy:
// the writing threads' generic stores must be ordered before it by fence.proxy.async.shared::cta.
__device__ __forceinline__ void cp_async_bulk_tensor_3d_shared_to_global(const CUtensorMap* map, int32_t c0,
                                                                         int32_t c1, int32_t c2, uint32_t src) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(c2), "r"(src)
               : "memory");
}

// cp.async.bulk.commit_group: closes this thread's current bulk async-group.
__device__ __forceinline__ void cp_async_bulk_commit_group() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

// cp.async.bulk.wait_group.read N: waits until at most N of this thread's most recent bulk
// groups still have to READ their shared-memory source (the buffer may then be rewritten; the
// writes to global memory may still be in flight).
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

// cp.async.bulk.wait_group N: waits until at most N of this thread's most recent bulk groups are
// pending, i.e. every older group is COMPLETE: its writes to global memory are performed.
template <int N>
__device__ __forceinline__ void cp_async_bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// L2 eviction-priority policies for the cache_hint operand (the encodings CUTLASS's
// TMA::CacheHintSm90 uses): operands re-read by many CTAs stay, streamed ones go first.
inline constexpr uint64_t kL2EvictNormal = 0x1000000000000000ull;
inline constexpr uint64_t kL2EvictFirst = 0x12F0000000000000ull;
inline constexpr uint64_t kL2EvictLast = 0x14F0000000000000ull;

}  // namespace weave::ptx
