// The self-tests' teeth over real NCCL communicators (W >= 2), for the controls the emulated world
// has (tests/gpu: test_fused_ops_typed*.cu, test_all_gather_gemm.cu): a mechanism switched off must
// make self_test() fail, each wrong element attributed to the peer whose share is missing, and the
// same self-test with it on must pass.
//   - GemmAllGather gemm-only moves nothing (GemmAllReduce's, GemmReduceScatter's and
//     AllGatherGemm's are in their own files);
//   - AllGatherGemm without its scale gather (ptpc: every row scaled by its own power of two);
//   - a dropped GEMM pipeline wait (WEAVE_GEMM_DEBUG_DROP_WAIT=1, read at construction) in every
//     fused kernel: consumers read a stage before its TMA landed.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "comm_support.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "support/scoped_env.hpp"

using namespace weave;
using namespace weave::test;

TEST(MultiGpuGemmAllGather, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    GemmAllGather op(c, AgWorld::config(GemmAllGatherMode::kGemmOnly, 256, 512, 256));
    const SelfTestReport rep = op.self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    for (int s = 0; s < c.world_size(); ++s)
      if (s == c.rank()) EXPECT_EQ(rep.wrong_from_rank[s], 0) << "own rows are computed locally: " << rep.detail;
      else EXPECT_GT(rep.wrong_from_rank[s], 0) << "peer " << s << "'s rows were never sent: " << rep.detail;
    if (c.rank() == 0) std::printf("  gemm-ag gemm-only W%d: %s\n", c.world_size(), rep.detail.c_str());
  });
}

// ptpc, split-lsa: without the scale gather the peers' rows are multiplied under another call's
// (or no) scales; with it, the self-test passes.
TEST(MultiGpuAllGatherGemm, SkippingTheScaleGatherFailsTheSelfTest) {
  WEAVE_REQUIRE_GPUS(2);
  for (bool skip : {false, true})
    for_each_rank([&](Communicator& c) {
      fused::AllGatherGemmHooks hooks;
      hooks.skip_scale_gather = skip;
      auto op = AgmWorld::make(
          c, fused_op_config<AllGatherGemmConfig>(ScaleMode::kPtpc, AllGatherGemmMode::kSplitLsa, 256, 512, 1100), hooks);
      const SelfTestReport rep = op->self_test(1000);
      if (!skip) {
        EXPECT_TRUE(rep.ok) << "with the scale gather: " << rep.detail;
        return;
      }
      EXPECT_FALSE(rep.ok) << "without the scale gather the peers' rows must be wrong: " << rep.detail;
      for (int s = 0; s < c.world_size(); ++s)
        if (s == c.rank()) EXPECT_EQ(rep.wrong_from_rank[s], 0) << rep.detail;
        else EXPECT_GT(rep.wrong_from_rank[s], 0) << "peer " << s << ": " << rep.detail;
      if (c.rank() == 0) std::printf("  ag-gemm ptpc, scale gather SKIPPED, W%d: %s\n", c.world_size(), rep.detail.c_str());
    });
}

namespace {

// Ranks whose self-test of T's fused mode failed, with WEAVE_GEMM_DEBUG_DROP_WAIT set or not.
// K 2048: 32 K blocks of bf16 per tile, several laps of the stage ring.
template <class T>
int ranks_failing_the_self_test(typename T::Mode fused, int64_t m, bool drop, std::string& detail) {
  std::optional<ScopedEnv> env;  // set before the ops are built, on this thread, with no rank thread running
  if (drop) env.emplace("WEAVE_GEMM_DEBUG_DROP_WAIT", "1");
  std::vector<int> failed(local_world(), 0);
  for_each_rank([&](Communicator& c) {
    auto op = T::make(c, T::config(fused, 512, 2048, m));
    const SelfTestReport rep = op->self_test(m);
    failed[c.rank()] = rep.ok ? 0 : 1;
    if (!rep.ok && c.rank() == 0) detail = rep.detail;
  });
  int n = 0;
  for (int f : failed) n += f;
  return n;
}

template <class T>
void expect_a_dropped_wait_caught(typename T::Mode fused, int64_t m) {
  std::string detail;
  EXPECT_EQ(ranks_failing_the_self_test<T>(fused, m, false, detail), 0) << T::kName << " without the switch: " << detail;
  const int caught = ranks_failing_the_self_test<T>(fused, m, true, detail);
  EXPECT_GT(caught, 0) << T::kName << ": the dropped wait went unnoticed by the self-test";
  std::printf("  %s %s W%d, dropped pipeline wait: self-test failed on %d of %d ranks\n", T::kShort,
              std::string(to_string(fused)).c_str(), local_world(), caught, local_world());
}

}  // namespace

TEST(MultiGpuFusedOps, ADroppedPipelineWaitFailsTheSelfTestOfEveryFusedKernel) {
  WEAVE_REQUIRE_GPUS(2);
  const int64_t w = local_world();
  expect_a_dropped_wait_caught<ArWorld>(GemmAllReduceMode::kFused, 512);
  expect_a_dropped_wait_caught<AgWorld>(GemmAllGatherMode::kFusedLsa, 512);
  expect_a_dropped_wait_caught<RsWorld>(GemmReduceScatterMode::kFused, 512 * w);  // whole-tile bands
}
