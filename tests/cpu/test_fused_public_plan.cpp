// The fused operators' public pure planners (weave::gemm_all_reduce_plan, gemm_all_gather_plan):
// what an op would run per call without an op or a GPU. They must give exactly the op's plan (the
// internal planner with the arguments the constructor finds on one NVLink domain of H200s), refuse
// bad input naming the rule, and follow the machine they are told of.
#include <gtest/gtest.h>

#include "fused/all_gather/plan.hpp"
#include "fused/all_reduce/plan.hpp"
#include "support/expect_error.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"

using namespace weave;

namespace {

GemmAllReduceConfig ar_config(ScaleMode quant, GemmAllReduceMode mode) {
  GemmAllReduceConfig c;
  c.n = 7168;
  c.k = 2048;
  c.m_max = 16384;
  c.quant = quant;
  c.mode = mode;
  return c;
}
GemmAllGatherConfig ag_config(ScaleMode quant, GemmAllGatherMode mode) {
  GemmAllGatherConfig c;
  c.n = 2048;
  c.k = 7168;
  c.m_max = 16384;
  c.quant = quant;
  c.mode = mode;
  return c;
}

template <class Plan>
void expect_same_plan(const Plan& a, const Plan& b, const std::string& where) {
  EXPECT_EQ(a.mode, b.mode) << where;
  EXPECT_EQ(a.grid, b.grid) << where;
  EXPECT_EQ(a.chunks, b.chunks) << where;
  EXPECT_EQ(a.window_bytes, b.window_bytes) << where;
  EXPECT_DOUBLE_EQ(a.model_fused_us, b.model_fused_us) << where;
  EXPECT_EQ(a.reason, b.reason) << where;
}

}  // namespace

TEST(FusedPublicPlan, AllReduceIsTheOpsPlanOnOneNvlinkDomain) {
  int fused_seen = 0;
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
    for (GemmAllReduceMode mode : {GemmAllReduceMode::kAuto, GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa})
      for (int world : {1, 2, 4, 8})
        for (int64_t m : {1, 16, 128, 1000, 8192, 16384}) {
          const GemmAllReduceConfig c = ar_config(q, mode);
          const bool kernel = fused::gar_fused_built(c);
          const GemmAllReducePlan want = fused::gar_plan(c, world, m, 132, kernel && world > 1, true,
                                                         gemm_all_reduce_window_bytes(c, world));
          const GemmAllReducePlan got = gemm_all_reduce_plan(c, world, m);
          expect_same_plan(got, want, std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" +
                                          std::to_string(world) + " m " + std::to_string(m));
          fused_seen += got.mode == GemmAllReduceMode::kFused;
        }
  EXPECT_GT(fused_seen, 0) << "some case must plan fused, or the comparison sees only split";
}

TEST(FusedPublicPlan, AllGatherIsTheOpsPlanOnOneNvlinkDomain) {
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
    for (GemmAllGatherMode mode : {GemmAllGatherMode::kAuto, GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kSplitLsa})
      for (int world : {1, 2, 4, 8})
        for (int64_t m : {1, 128, 1000, 8192}) {
          const GemmAllGatherConfig c = ag_config(q, mode);
          const bool kernel = fused::gag_fused_built(c);
          const GemmAllGatherPlan want =
              fused::gag_plan(c, world, m, 132, kernel, true, gemm_all_gather_window_bytes(c, world));
          expect_same_plan(gemm_all_gather_plan(c, world, m), want,
                           std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" + std::to_string(world) +
                               " m " + std::to_string(m));
        }
}

TEST(FusedPublicPlan, FollowsTheMachineItIsToldOf) {
  const GemmAllReduceConfig ar = ar_config(ScaleMode::kBF16, GemmAllReduceMode::kAuto);
  ASSERT_EQ(gemm_all_reduce_plan(ar, 2, 16384).mode, GemmAllReduceMode::kFused) << "the premise: fused at M 16384";
  EXPECT_EQ(gemm_all_reduce_plan(ar, 2, 16384, {.nvlink_domain = false}).mode, GemmAllReduceMode::kSplitNccl);
  EXPECT_NE(gemm_all_reduce_plan(ar, 2, 16384, {.fused_kernels = false}).mode, GemmAllReduceMode::kFused);
  EXPECT_EQ(gemm_all_reduce_plan(ar, 2, 16384, {.num_sms = 66}).grid, 66);
  const GemmAllGatherConfig ag = ag_config(ScaleMode::kBF16, GemmAllGatherMode::kAuto);
  EXPECT_EQ(gemm_all_gather_plan(ag, 2, 8192, {.nvlink_domain = false}).mode, GemmAllGatherMode::kSplitNccl);
  EXPECT_NE(gemm_all_gather_plan(ag, 2, 8192, {.fused_kernels = false}).mode, GemmAllGatherMode::kFusedLsa);
}

// max_sms caps the CTAs per rank below the machine's SMs (never above them), and validate() bounds it.
TEST(FusedPublicPlan, MaxSmsCapsTheGrid) {
  GemmAllReduceConfig ar = ar_config(ScaleMode::kBF16, GemmAllReduceMode::kFused);
  ar.max_sms = 40;
  const GemmAllReducePlan capped = gemm_all_reduce_plan(ar, 2, 16384);
  EXPECT_EQ(capped.grid, 40);
  EXPECT_EQ(capped.waves, double(capped.tiles) / 40);
  ar.max_sms = 500;
  EXPECT_EQ(gemm_all_reduce_plan(ar, 2, 16384).grid, 132) << "max_sms above the SMs leaves the SMs";
  GemmAllGatherConfig ag = ag_config(ScaleMode::kBF16, GemmAllGatherMode::kFusedLsa);
  ag.max_sms = 8;
  EXPECT_EQ(gemm_all_gather_plan(ag, 2, 8192).grid, 8);
  ar.max_sms = -1;
  EXPECT_NE(GemmAllReduce::validate(ar, 2).find("max_sms must be in 0..1024 (0: every SM), got -1"), std::string::npos);
  ag.max_sms = 1025;
  EXPECT_NE(GemmAllGather::validate(ag, 2).find("max_sms must be in 0..1024"), std::string::npos);
}

TEST(FusedPublicPlan, BadInputNamesTheRule) {
  const GemmAllReduceConfig ar = ar_config(ScaleMode::kBF16, GemmAllReduceMode::kAuto);
  EXPECT_NE(test::error_of([&] { gemm_all_reduce_plan(ar, 2, 0); }).find("'m' must be in 1..m_max (16384), got 0"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { gemm_all_reduce_plan(ar, 2, 16385); }).find("got 16385"), std::string::npos);
  EXPECT_NE(test::error_of([&] { gemm_all_reduce_plan(ar, 2, 8, {.num_sms = 0}); }).find("num_sms must be >= 1"),
            std::string::npos);
  GemmAllReduceConfig bad = ar;
  bad.n = 0;
  EXPECT_NE(test::error_of([&] { gemm_all_reduce_plan(bad, 2, 8); }).find("gemm_all_reduce_plan: "), std::string::npos);
  GemmAllReduceConfig explicit_cal = ar_config(ScaleMode::kBF16, GemmAllReduceMode::kFused);
  explicit_cal.calibration = "/nonexistent/table.txt";
  EXPECT_NE(test::error_of([&] { gemm_all_reduce_plan(explicit_cal, 2, 8); }).find("only mode auto consults"),
            std::string::npos);
  const GemmAllGatherConfig ag = ag_config(ScaleMode::kBF16, GemmAllGatherMode::kAuto);
  EXPECT_NE(test::error_of([&] { gemm_all_gather_plan(ag, 2, 0); }).find("'m' must be in 1..m_max"), std::string::npos);
  EXPECT_NE(test::error_of([&] { gemm_all_gather_plan(ag, 0, 8); }).find("gemm_all_gather_plan: "), std::string::npos);
}
