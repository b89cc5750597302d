// AllGatherGemm's pure planning (fused/ag_gemm/plan.hpp): its rules (scales per row, so raw
// layouts only; mxfp8 K a multiple of 128), what travels (rows and scales per peer), the window
// (gathered A, its scales, the output and the two hosted gathers), auto's choices and the names.
#include <gtest/gtest.h>

#include "fused/ag_gemm/plan.hpp"
#include "support/expect_error.hpp"
#include "weave/all_gather_gemm.hpp"

using namespace weave;

namespace {

AllGatherGemmConfig agm_config(AllGatherGemmMode mode, ScaleMode quant = ScaleMode::kBF16) {
  AllGatherGemmConfig c;
  c.n = 7168;
  c.k = 2048;
  c.m_max = 4096;
  c.quant = quant;
  c.mode = mode;
  return c;
}

// Expects `expr` to throw weave::Error(status) whose message holds `needle`.
#define EXPECT_ERROR_HAS(expr, status, needle)                                                              \
  do {                                                                                                   \
    const std::string msg_ = test::error_of([&] { (void)(expr); }, status);                              \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "wanted '" << (needle) << "' in: " << msg_;       \
  } while (0)

}  // namespace

TEST(AgGemmPlan, ModeNamesRoundTrip) {
  for (auto m : {AllGatherGemmMode::kAuto, AllGatherGemmMode::kGemmOnly, AllGatherGemmMode::kSplitNccl,
                 AllGatherGemmMode::kSplitLsa, AllGatherGemmMode::kSplitCe})
    EXPECT_EQ(parse_all_gather_gemm_mode(to_string(m)), m);
  for (const char* gone : {"fused", "fused-ce", "fused-lsa", "split", ""})
    EXPECT_FALSE(parse_all_gather_gemm_mode(gone).has_value()) << gone;
}

TEST(AgGemmPlan, ValidateNamesEveryBrokenRule) {
  EXPECT_EQ(AllGatherGemm::validate(agm_config(AllGatherGemmMode::kAuto), 8), "");
  for (ScaleMode q : {ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
    EXPECT_EQ(AllGatherGemm::validate(agm_config(AllGatherGemmMode::kSplitLsa, q), 4), "") << to_string(q);
  struct Case {
    void (*tweak)(AllGatherGemmConfig&);
    int world;
    const char* needle;
  };
  const Case cases[] = {
      {[](AllGatherGemmConfig&) {}, 9, "world must be in 1..8"},
      {[](AllGatherGemmConfig& c) { c.m_max = 0; }, 2, "m_max must be in 1..1048576"},
      {[](AllGatherGemmConfig& c) { c.max_sms = -1; }, 2, "max_sms must be in 0..1024"},
      {[](AllGatherGemmConfig& c) { c.out_dtype = DType::kE4M3; }, 2, "out_dtype must be bf16 or fp32"},
      {[](AllGatherGemmConfig& c) { c.quant = ScaleMode::kPtpc, c.out_dtype = DType::kF32; }, 2,
       "fp8 modes (ptpc) produce bf16 output"},
      {[](AllGatherGemmConfig& c) { c.quant = ScaleMode::kBlockscale, c.scale_layout = ScaleLayout::kMnMajor; }, 2,
       "scale_layout must be raw"},
      {[](AllGatherGemmConfig& c) { c.quant = ScaleMode::kMxfp8, c.scale_layout = ScaleLayout::kPacked; }, 2,
       "interleaves the rows of several ranks"},
      {[](AllGatherGemmConfig& c) { c.quant = ScaleMode::kMxfp8, c.k = 2048 + 32; }, 2,
       "mxfp8 needs k a multiple of 128"},
      {[](AllGatherGemmConfig& c) { c.mx_route = MxRoute::kBf16; }, 2, "mx_route applies to quant mxfp8 only"},
      {[](AllGatherGemmConfig& c) { c.k = 100; }, 2, "the gathered GEMM [world x m_max, N, K] = [8192, 7168, 100]"},
      {[](AllGatherGemmConfig& c) { c.n = 7; }, 2, "n must be a multiple of 8"},
      {[](AllGatherGemmConfig& c) { c.n = 0; }, 2, "n must be >= 1"},
  };
  for (const Case& k : cases) {
    AllGatherGemmConfig c = agm_config(AllGatherGemmMode::kAuto);
    k.tweak(c);
    const std::string why = AllGatherGemm::validate(c, k.world);
    EXPECT_NE(why.find(k.needle), std::string::npos) << "wanted '" << k.needle << "' in: " << why;
    EXPECT_ERROR_HAS(all_gather_gemm_window_bytes(c, k.world), Status::kInvalidArgument, k.needle);
  }
}

TEST(AgGemmPlan, WhatTravelsIsRowsAndTheirScales) {
  const int64_t m = 1000, k = 2048;
  struct Want {
    ScaleMode q;
    int64_t per_row;
  };
  for (const Want& w : {Want{ScaleMode::kBF16, 2 * k}, Want{ScaleMode::kPtpc, k + 4},
                        Want{ScaleMode::kBlockscale, k + 4 * (k / 128)}, Want{ScaleMode::kMxfp8, k + k / 32}}) {
    const AllGatherGemmConfig c = agm_config(AllGatherGemmMode::kSplitLsa, w.q);
    const AllGatherGemmPlan p = all_gather_gemm_plan(c, 4, m);
    EXPECT_EQ(p.bytes_per_peer, m * w.per_row) << to_string(w.q);
    EXPECT_EQ(p.rows, 4 * m);
    // The GEMM is weave::Gemm's plan of the gathered rows (no K split).
    GemmPlanOverrides no_split;
    no_split.split_k = 1;
    const GemmPlan gp = gemm_plan(GemmProblem{.m = 4 * m, .n = 7168, .k = k, .mode = w.q}, 132, no_split);
    EXPECT_EQ(p.gemm_kernel, gp.kernel) << to_string(w.q);
    EXPECT_EQ(p.tiles, ((4 * m + p.block_m - 1) / p.block_m) * ((7168 + p.block_n - 1) / p.block_n)) << to_string(w.q);
    EXPECT_NE(p.reason.find("GEMM " + gp.kernel), std::string::npos) << p.reason;
    EXPECT_EQ(p.mode, AllGatherGemmMode::kSplitLsa);
    EXPECT_GT(p.model_comm_us, 0);
    EXPECT_DOUBLE_EQ(p.model_split_us, p.model_gemm_us + p.model_comm_us);
    EXPECT_EQ(fused::agm_scale_row_bytes(c) + k * fused::agm_elem_bytes(c), w.per_row) << to_string(w.q);
  }
}

TEST(AgGemmPlan, TheGemmIsTheStandalonePlannersForTheRanksSmsAndRunsAsPlanned) {
  const AllGatherGemmConfig c = agm_config(AllGatherGemmMode::kSplitLsa, ScaleMode::kBlockscale);
  // Decode: world x m <= 8 rows run the GEMV (weave::Gemm's decode route), with nothing forced.
  const fused::AgmGemm decode = fused::agm_gemm(c, 4, 2, 132);
  EXPECT_TRUE(decode.plan.gemv);
  EXPECT_EQ(decode.overrides.block_m, 0);
  EXPECT_EQ(decode.overrides.split_k, 1);
  // Tiled: planned for the rank's share of the SMs (here 65 of an emulated world's), then pinned
  // (tile, grid, tile order, the A-scale route) so a weave::Gemm on a whole GPU runs the same.
  const fused::AgmGemm tiled = fused::agm_gemm(c, 2, 2048, 65);
  EXPECT_FALSE(tiled.plan.gemv);
  EXPECT_LE(tiled.plan.grid, 65);
  EXPECT_EQ(tiled.overrides.block_m, tiled.plan.block_m);
  EXPECT_EQ(tiled.overrides.block_n, tiled.plan.block_n);
  EXPECT_EQ(tiled.overrides.grid, tiled.plan.grid);
  EXPECT_EQ(tiled.overrides.scale_a_route,
            tiled.plan.scale_a_mn_copy ? ScaleARoute::kMnMajorCopy : ScaleARoute::kAsGiven);
  const GemmPlan again = gemm_plan(tiled.problem, 132, tiled.overrides);
  EXPECT_EQ(again.kernel, tiled.plan.kernel);
  EXPECT_EQ(again.grid, tiled.plan.grid);
  EXPECT_EQ(again.scale_a_mn_copy, tiled.plan.scale_a_mn_copy);
  // The workspace sized at construction holds every route of every call (the largest m's).
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    AllGatherGemmConfig cq = agm_config(AllGatherGemmMode::kSplitLsa, q);
    const std::size_t bound = fused::agm_gemm_workspace_bytes(cq, 2);
    for (int64_t m : {int64_t(1), int64_t(100), int64_t(1000), cq.m_max}) {
      const fused::AgmGemm g = fused::agm_gemm(cq, 2, m, 132);
      EXPECT_LE(gemm_workspace_bytes(g.problem, g.plan), bound) << to_string(q) << " m " << m;
    }
  }
}

TEST(AgGemmPlan, AutoGathersOverLsaAndFallsBackWhereItMust) {
  const AllGatherGemmConfig c = agm_config(AllGatherGemmMode::kAuto);
  EXPECT_EQ(all_gather_gemm_plan(c, 1, 100).mode, AllGatherGemmMode::kGemmOnly);
  const AllGatherGemmPlan lsa = all_gather_gemm_plan(c, 2, 100);
  EXPECT_EQ(lsa.mode, AllGatherGemmMode::kSplitLsa);
  EXPECT_NE(lsa.reason.find("the gather of 409600 bytes per peer"), std::string::npos) << lsa.reason;
  FusedPlanMachine across;
  across.nvlink_domain = false;
  across.nccl = true;
  EXPECT_EQ(all_gather_gemm_plan(c, 2, 100, across).mode, AllGatherGemmMode::kSplitNccl);
  // Where an explicit mode cannot run is the constructor's kUnavailable, named by the capabilities.
  fused::Placement at = fused::world_only(2);
  at.nvlink_domain = false;
  at.domain_ranks = 1;
  at.group = "the test group";
  EXPECT_NE(fused::agm_capabilities(agm_config(AllGatherGemmMode::kSplitLsa), at).unavailable.find(
                "needs every rank in one NVLink domain (1 of 2 ranks are)"),
            std::string::npos);
  EXPECT_NE(fused::agm_capabilities(agm_config(AllGatherGemmMode::kSplitNccl), at).unavailable.find(
                "split-nccl needs an NCCL communicator; the test group has none"),
            std::string::npos);
  at.nccl = true;
  EXPECT_EQ(fused::agm_capabilities(agm_config(AllGatherGemmMode::kGemmOnly), at).unavailable, "");
  EXPECT_ERROR_HAS(all_gather_gemm_plan(c, 2, 0), Status::kInvalidArgument, "argument 'm' must be in 1..m_max");
  EXPECT_ERROR_HAS(all_gather_gemm_plan(c, 2, 4097), Status::kInvalidArgument, "(4096), got 4097");
  FusedPlanMachine none;
  none.num_sms = 0;
  EXPECT_ERROR_HAS(all_gather_gemm_plan(c, 2, 1, none), Status::kInvalidArgument, "num_sms must be >= 1");
}

TEST(AgGemmPlan, WindowHoldsTheGatheredRowsScalesOutputAndTheHostedGathers) {
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    for (AllGatherGemmMode mode : {AllGatherGemmMode::kGemmOnly, AllGatherGemmMode::kSplitNccl,
                                   AllGatherGemmMode::kSplitLsa, AllGatherGemmMode::kSplitCe, AllGatherGemmMode::kAuto}) {
      const AllGatherGemmConfig c = agm_config(mode, q);
      WindowLayout layout;
      const fused::AgmLayout g = fused::add_agm_regions(layout, c, 4, fused::kAgmBoundSplitBlocks);
      const bool hosted = mode == AllGatherGemmMode::kSplitLsa || mode == AllGatherGemmMode::kSplitCe ||
                          mode == AllGatherGemmMode::kAuto;
      EXPECT_EQ(g.has_split, hosted) << to_string(mode);
      EXPECT_EQ(g.has_split_scales, hosted && q != ScaleMode::kBF16) << to_string(mode) << " " << to_string(q);
      const uint64_t rows = 4 * 4096;
      EXPECT_GE(g.sa > g.a ? g.sa - g.a : g.out - g.a, rows * 2048 * fused::agm_elem_bytes(c));
      EXPECT_GE(g.out - (q == ScaleMode::kBF16 ? g.a : g.sa),
                rows * (q == ScaleMode::kBF16 ? 2 * 2048 : fused::agm_scale_row_bytes(c)));
      EXPECT_GE(layout.total_bytes(), g.out + rows * 7168 * 2);
      EXPECT_EQ(all_gather_gemm_window_bytes(c, 4), layout.total_bytes());
      // Nothing is hosted at world 1 (nothing to gather).
      WindowLayout one;
      EXPECT_FALSE(fused::add_agm_regions(one, c, 1, fused::kAgmBoundSplitBlocks).has_split);
    }
  }
}
