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

// L2 eviction-priority policies for the cache_hint operand (the encodings CUTLASS's
// TMA::CacheHintSm90 uses): operands re-read by many CTAs stay, streamed ones go first.
inline constexpr uint64_t kL2EvictNormal = 0x1000000000000000ull;
inline constexpr uint64_t kL2EvictFirst = 0x12F0000000000000ull;
inline constexpr uint64_t kL2EvictLast = 0x14F0000000000000ull;

}  // namespace weave::ptx
