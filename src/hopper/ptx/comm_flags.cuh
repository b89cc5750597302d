// Thin 1:1 wrappers over the loads, stores and fences the communication protocols use to publish
// and consume flags, credits and peer data (PTX ISA "Memory Consistency Model", "ld", "st",
// "fence"); their bounded waits read misc.cuh's globaltimer_ns. Scope and semantics are in the
// names. Which protocol uses which one, and why, is in docs/memory_ordering.md (notes
// "publish-release", "consume-acquire", "credit").
#pragma once
#include <cstdint>

#include "hopper/ptx/misc.cuh"  // globaltimer_ns, for the protocols' bounded waits

namespace weave::ptx {

// ld.acquire.sys.global.u32: later loads/stores of this thread are ordered after this load; pairs
// with a st.release.sys (or fence + relaxed store) by another GPU's thread.
__device__ __forceinline__ uint32_t ld_acquire_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// ld.relaxed.sys.global.u32: a strong load that sees other GPUs' stores without ordering.
__device__ __forceinline__ uint32_t ld_relaxed_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// st.release.sys.global.u32: every memory operation this thread has performed or observed before
// (including other CTA threads' stores ordered by a preceding bar.sync) is visible system-wide
// before the flag value is.
__device__ __forceinline__ void st_release_sys_u32(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// st.volatile.global.v4.u32: one 16-byte store of a low-latency (LL) line {data, flag, data, flag}.
// The protocol relies only on each 8-byte half {data, flag} arriving whole (docs/memory_ordering.md
// "ll-flag-in-data"); volatile keeps the compiler from merging, splitting or caching it.
__device__ __forceinline__ void st_volatile_v4_u32(void* p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d)
               : "memory");
}

// ld.volatile.global.v4.u32: re-reads a 16-byte LL line from memory on every call (never a cached
// copy), so a polling loop sees a peer's store when it lands.
__device__ __forceinline__ uint4 ld_volatile_v4_u32(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

// atom.release.gpu.global.inc.u32: wrapping increment (returns the old value; wraps to 0 after
// `limit`), for the last-CTA election of a kernel. Release, not acq_rel: only this thread's EARLIER memory
// operations are ordered before the increment; later ones are not held back until it returns
// (an election ticket drawn early and used late; pair with an acquire load before acting on it).
__device__ __forceinline__ uint32_t atom_inc_release_gpu_u32(uint32_t* p, uint32_t limit) {
  uint32_t old;
  asm volatile("atom.release.gpu.global.inc.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(limit) : "memory");
  return old;
}

// atom.inc with release semantics at system scope: the counted work (e.g. TMA stores into a
// peer's memory, complete by cp.async.bulk.wait_group) is ordered before the increment for any
// observer that acquires the counter or a flag released after acquiring it.
__device__ __forceinline__ uint32_t atom_inc_release_sys_u32(uint32_t* p, uint32_t limit) {
  uint32_t old;
  asm volatile("atom.release.sys.global.inc.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(limit) : "memory");
  return old;
}

// ld.acquire.gpu.global.u32: as ld_acquire_sys_u32, for flags written on this GPU only.
__device__ __forceinline__ uint32_t ld_acquire_gpu_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// red.release.gpu.global.add.u32: adds without returning; this thread's earlier memory operations
// (and what it observed, e.g. completed TMA stores after fence.proxy.async.global) are visible
// GPU-wide before the new count is.
__device__ __forceinline__ void red_release_gpu_add_u32(uint32_t* p, uint32_t v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// nanosleep.u32: back off a spinning thread.
__device__ __forceinline__ void nanosleep(uint32_t ns) { asm volatile("nanosleep.u32 %0;\n" ::"r"(ns)); }

}  // namespace weave::ptx
