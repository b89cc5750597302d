// Thin 1:1 wrappers over register-file reconfiguration, timers and thread exit (PTX ISA
// "setmaxnreg", "%globaltimer", "exit").
#pragma once
#include <cstdint>

namespace weave::ptx {

// setmaxnreg.inc.sync.aligned.u32 N / setmaxnreg.dec.sync.aligned.u32 N: warpgroup-collective;
// takes effect only when the kernel has a register cap at entry (__launch_bounds__(T, 1)).
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_inc_sync_aligned_u32() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_dec_sync_aligned_u32() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// mov.u64 %globaltimer: nanoseconds of wall time (coarse ticks); for bounding waits only.
__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// exit: ends this thread now (the cooperative abort of a bounded wait, after its cleanup).
__device__ __forceinline__ void thread_exit() { asm volatile("exit;\n" ::: "memory"); }

}  // namespace weave::ptx
