// GemmAllReduce's chunk counters in the op's control region (docs/memory_ordering.md "ar-fused"):
// RS[destination][chunk] counts the partial tiles sent to a band's owner, AG[chunk] the own band's
// final tiles (fused) or rows (fused-rs's tail kernel, whose GEMM kernel counts on RS[rank]).
#pragma once
#include <cstdint>

#include "comm/device_common.cuh"

namespace weave::fused {

__device__ __forceinline__ uint32_t* ar_rs_counter(const comm::Proto& p, int d, int chunk) {
  return comm::ctrl_word(p, comm::kCtrlChunkCounter + d * comm::kMaxChunks + chunk);
}
__device__ __forceinline__ uint32_t* ar_ag_counter(const comm::Proto& p, int chunk) {
  return comm::ctrl_word(p, comm::kCtrlChunkCounter + comm::kMaxWorldCounters * comm::kMaxChunks + chunk);
}

}  // namespace weave::fused
