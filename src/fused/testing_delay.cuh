// Testing hook of the fused epilogues (GemmAllGather, GemmAllReduce: config delay_stores_ns): a slow
// rank. The leader of a consumer warpgroup waits `ns` before a tile's stores; 0 costs one compare.
#pragma once
#include <cstdint>

#include "hopper/ptx/comm_flags.cuh"

namespace weave::fused {

__device__ __forceinline__ void delay_for_testing(uint64_t ns) {
  if (ns == 0) return;
  const uint64_t t0 = ptx::globaltimer_ns();
  while (ptx::globaltimer_ns() - t0 < ns) ptx::nanosleep(1000);
}

}  // namespace weave::fused
