// The epilogue parameters of GemmAllGather's fused kernel (host/device POD, passed by value inside
// the kernel's __grid_constant__ arguments; about 1.3 KB at world 8).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "comm/kernels.hpp"
#include "fused/all_gather/schedule.hpp"
#include "weave/window_handle.hpp"

namespace weave::fused {

struct AllGatherParams {
  CUtensorMap tma_c;                    // this rank's rows [rank*M, +M) of the output in its own window
  CUtensorMap tma_peer[kMaxWorld - 1];  // the same rows in the window of peer (rank + s) % world, s = 1..world-1
  comm::Proto p;                        // window handle, control / credit / flag offsets, timeout, error record
  AgChunks chunks;
  int64_t m = 0;                        // this call's rows per rank (the call key, "call-key")
  int32_t pull = 0;                     // fused-ce: store to the own rows only; end_call triggers the
                                        // copy streams' pulls chunk by chunk ("ag-fused-ce")
  int32_t skip_arrival_wait = 0;        // negative control: end (fused-ce: trigger) without waiting for
                                        // the peers' chunks
  uint64_t delay_stores_ns = 0;         // testing: a slow rank (each tile's stores start this much later)
  uint64_t delay_pull_ns = 0;           // testing, fused-ce: a slow puller (each trigger this much later)
};

}  // namespace weave::fused
