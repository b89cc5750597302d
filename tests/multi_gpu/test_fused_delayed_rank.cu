// A delayed rank over real NCCL communicators (one rank per GPU; at world 1 the back-to-back calls
// alone): every fused operator in every mode (split-nccl and fused-ce included), back-to-back
// calls of changing M with no host sync between them, a different rank spinning 2 ms before each
// of its calls, each output copied out right after its call (stream-ordered) and NaN-poisoned
// between calls; every copy bitwise equal to the call's quiet output (fused_back_to_back.hpp).
// The late rank's peers reach their waits 2 ms early: a wait that passes too soon, a flag or
// credit of the previous call taken for this one, or rows of the previous M left in place show as
// wrong elements.
#include <gtest/gtest.h>

#include "comm_support.hpp"
#include "fused_back_to_back.hpp"
#include "fused_op_world.hpp"
#include "support/gpu.hpp"

using namespace weave;
using namespace weave::test;

namespace {

constexpr uint64_t kLateNs = 2'000'000;

}  // namespace

// M of many tiles, a partial tile, one row and a decode batch (decode runs the last two).
TEST(MultiGpuGemmAllReduce, BackToBackCallsWithADelayedRankEqualTheQuietCalls) {
  WEAVE_REQUIRE_GPUS(1);
  every_mode_back_to_back_with_a_delayed_rank<ArWorld>(512, 256, {1100, 77, 1, 24}, kLateNs, ReadAfterRun::kCopy);
}

TEST(MultiGpuGemmAllGather, BackToBackCallsWithADelayedRankEqualTheQuietCalls) {
  WEAVE_REQUIRE_GPUS(1);
  every_mode_back_to_back_with_a_delayed_rank<AgWorld>(512, 256, {640, 77, 1, 300}, kLateNs, ReadAfterRun::kCopy);
}

// M multiples of W: whole-tile bands (every mode) and bands of partial tiles (the split modes).
TEST(MultiGpuGemmReduceScatter, BackToBackCallsWithADelayedRankEqualTheQuietCalls) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t w = local_world();
  every_mode_back_to_back_with_a_delayed_rank<RsWorld>(512, 256, {512 * w, w, 128 * w, 33 * w}, kLateNs,
                                                       ReadAfterRun::kCopy);
}

TEST(MultiGpuAllGatherGemm, BackToBackCallsWithADelayedRankEqualTheQuietCalls) {
  WEAVE_REQUIRE_GPUS(1);
  every_mode_back_to_back_with_a_delayed_rank<AgmWorld>(512, 256, {640, 77, 1, 300}, kLateNs, ReadAfterRun::kCopy);
}
