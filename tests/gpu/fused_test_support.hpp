// What the fused operators' emulated-world tests share (test_gemm_all_gather.cu,
// test_gemm_all_reduce.cu).
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "bench/emulated_world.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"

namespace weave::test {

template <class Mode>
std::string mode_name(Mode m) {
  return std::string(to_string(m));
}

// Whether a mode runs copy streams beside the caller's (split-ce; GemmAllGather's fused-ce).
template <class Mode>
bool uses_copy_streams(Mode mode) {
  if constexpr (requires { Mode::kFusedCe; })
    if (mode == Mode::kFusedCe) return true;
  return mode == Mode::kSplitCe;
}

// What the emulated world can run: the copy-engine modes need a copy stream per peer on every
// rank (EmulatedWorld::copy_engine_unsupported_reason); every other mode a stream per rank and its
// self-test's.
template <class Mode>
bool fits_queues(Mode mode, int world) {
  if (uses_copy_streams(mode)) return bench::EmulatedWorld::copy_engine_unsupported_reason(world).empty();
  return bench::EmulatedWorld::queue_budget_ok(2 * world);
}

// A rank's stream for the length of a test step (non-blocking, destroyed at the end).
using Stream = OwnedStream;

}  // namespace weave::test
