// AllGatherGemm's pure planning (fused/ag_gemm/plan.hpp): its rules (scales per row, so raw
// layouts only; mxfp8 K a multiple of 128; fused-ce's quants), what travels (rows and scales per
// peer), the window (gathered A, its scales, the output and the two hosted gathers, or fused-ce's
// landed words), auto's choices, fused-ce's plan and model, and the names.
#include <gtest/gtest.h>

#include <utility>

#include <algorithm>

#include "comm/protocol.hpp"
#include "fused/ag_gemm/plan.hpp"
#include "fused/model_rates.hpp"
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
                 AllGatherGemmMode::kSplitLsa, AllGatherGemmMode::kSplitCe, AllGatherGemmMode::kFusedCe})
    EXPECT_EQ(parse_all_gather_gemm_mode(to_string(m)), m);
  EXPECT_EQ(to_string(AllGatherGemmMode::kFusedCe), "fused-ce");
  for (const char* gone : {"fused", "fused-lsa", "fused_ce", "split", ""})
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
  EXPECT_EQ(decode.overrides.split_k, 0);  // the planner's choice: nothing forced
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
  // Where the tiles leave SMs idle the plan splits K (Llama-3-70B's qkv at TP 8: N 1280, K 8192),
  // pinned like the rest, and its partials fit too (at 132 and at an emulated rank's 65 CTAs).
  int splits = 0;
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{7168, 2048}, std::pair<int64_t, int64_t>{1280, 8192}})
    for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
      for (int ctas : {132, 65}) {
        AllGatherGemmConfig cq = agm_config(AllGatherGemmMode::kSplitLsa, q);
        cq.n = n;
        cq.k = k;
        const std::size_t bound = fused::agm_gemm_workspace_bytes(cq, 2, ctas);
        for (int64_t m = 1; m <= cq.m_max; m += 1 + m / 8) {
          const fused::AgmGemm g = fused::agm_gemm(cq, 2, m, ctas);
          EXPECT_LE(gemm_workspace_bytes(g.problem, g.plan), bound) << to_string(q) << " m " << m;
          if (!g.plan.gemv) EXPECT_EQ(g.overrides.split_k, g.plan.split_k);
          splits += !g.plan.gemv && g.plan.split_k > 1;
        }
      }
  EXPECT_GT(splits, 20) << "the shapes above no longer split K: the bound is not exercised";
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

// fused-ce's GEMM reads A's scales as they land (no pre-pass) and stores bf16: quant bf16, ptpc or
// blockscale with bf16 output, at any world; the other modes keep mxfp8 and fp32 out.
TEST(AgGemmPlan, FusedCeRunsBf16PtpcAndBlockscaleWithBf16OutputOnly) {
  const std::string rule = "mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output";
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale})
    for (int w : {1, 2, 8})
      EXPECT_EQ(AllGatherGemm::validate(agm_config(AllGatherGemmMode::kFusedCe, q), w), "") << to_string(q);
  AllGatherGemmConfig mx = agm_config(AllGatherGemmMode::kFusedCe, ScaleMode::kMxfp8);
  AllGatherGemmConfig f32 = agm_config(AllGatherGemmMode::kFusedCe);
  f32.out_dtype = DType::kF32;
  for (const auto& [c, got] : {std::pair{mx, "got mxfp8 -> bf16"}, std::pair{f32, "got bf16 -> fp32"}}) {
    const std::string why = AllGatherGemm::validate(c, 2);
    EXPECT_NE(why.find(rule), std::string::npos) << why;
    EXPECT_NE(why.find(got), std::string::npos) << why;
    EXPECT_ERROR_HAS(all_gather_gemm_window_bytes(c, 2), Status::kInvalidArgument, rule);
    EXPECT_ERROR_HAS(all_gather_gemm_plan(c, 2, 100), Status::kInvalidArgument, rule);
    AllGatherGemmConfig split = c;  // the rule is fused-ce's alone
    split.mode = AllGatherGemmMode::kSplitLsa;
    EXPECT_EQ(AllGatherGemm::validate(split, 2), "") << to_string(c.quant) << " -> " << to_string(c.out_dtype);
  }
  EXPECT_TRUE(fused::agm_fused_ce_quant(ScaleMode::kPtpc, DType::kBF16));
  EXPECT_FALSE(fused::agm_fused_ce_quant(ScaleMode::kMxfp8, DType::kBF16));
  EXPECT_FALSE(fused::agm_fused_ce_quant(ScaleMode::kBF16, DType::kF32));
}

// fused-ce's plan: its own GEMM at the planner's tile over the W m rows (weave::Gemm's tile there,
// which splits no K at this size), the pulls of each peer's rows in chunks under it; its model is max(GEMM, pulls) + one chunk's pull + 8 us (the enter and arrive
// kernels), modelled beside split wherever fused-ce can run, whatever the mode.
TEST(AgGemmPlan, FusedCePlansItsTileAndModelsThePullsUnderTheGemm) {
  const int64_t m = 4096, n = 7168, k = 4096;
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale}) {
    AllGatherGemmConfig c = agm_config(AllGatherGemmMode::kFusedCe, q);
    c.n = n;
    c.k = k;
    c.m_max = m;
    for (int w : {2, 4, 8}) {
      SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
      const AllGatherGemmPlan p = all_gather_gemm_plan(c, w, m);
      EXPECT_EQ(p.mode, AllGatherGemmMode::kFusedCe);
      const GemmPlan alone = gemm_plan(GemmProblem{.m = w * m, .n = n, .k = k, .mode = q}, 132);
      ASSERT_EQ(alone.split_k, 1);
      EXPECT_EQ(p.block_m, alone.block_m);
      EXPECT_EQ(p.block_n, alone.block_n);
      EXPECT_EQ(p.rows, w * m);
      EXPECT_EQ(p.tiles, (w * m / p.block_m) * (n / p.block_n));
      EXPECT_EQ(p.grid, static_cast<int>(std::min<int64_t>(p.tiles, 132)));
      EXPECT_NE(p.reason.find("mode fused-ce requested"), std::string::npos) << p.reason;
      EXPECT_NE(p.reason.find("chunks of"), std::string::npos) << p.reason;
      EXPECT_NE(p.gemm_kernel.find(std::to_string(p.block_m) + "x" + std::to_string(p.block_n)), std::string::npos)
          << p.gemm_kernel;
      // The pulls hide under the GEMM: well under the gather-then-GEMM of split at this size.
      EXPECT_GT(p.model_fused_us, 0);
      EXPECT_LT(p.model_fused_us, p.model_split_us);
      EXPECT_GE(p.model_fused_us, p.model_gemm_us);
      const fused::AgmChunks ch = fused::agm_chunks(m, p.block_m, fused::kAgmPullChunks);
      const double row_bytes = double(k * fused::agm_elem_bytes(c) + fused::agm_scale_row_bytes(c));
      const double pulls = double(w - 1) * double(p.bytes_per_peer) / (fused::kModelledLinkGbps * 1e3);
      EXPECT_NEAR(p.model_fused_us,
                  std::max(p.model_gemm_us, pulls) + ch.chunk_rows * row_bytes / (fused::kModelledLinkGbps * 1e3) + 8,
                  1e-6);
      // The model does not depend on the mode asked for: split-lsa's plan shows the same fused time.
      AllGatherGemmConfig lsa = c;
      lsa.mode = AllGatherGemmMode::kSplitLsa;
      const AllGatherGemmPlan s = all_gather_gemm_plan(lsa, w, m);
      EXPECT_DOUBLE_EQ(s.model_fused_us, p.model_fused_us);
      EXPECT_DOUBLE_EQ(s.model_split_us, p.model_split_us);
    }
    // The tile is fused-ce's at any m, even where weave::Gemm would take the decode GEMV.
    const AllGatherGemmPlan one = all_gather_gemm_plan(c, 2, 1);
    const GemmPlan tile = fused::agm_tile_plan(c, 2, 1, 132, fused::agm_tile_candidates(c));
    EXPECT_EQ(one.block_m, tile.block_m);
    EXPECT_EQ(one.block_m, 64);  // 2 gathered rows: a 64-row tile
    EXPECT_EQ(one.tiles, (n + tile.block_n - 1) / tile.block_n);
    EXPECT_EQ(all_gather_gemm_plan(c, 1, 1000).model_fused_us, 0) << "world 1: nothing to pull";
  }
  // No fused time where fused-ce cannot run: world 1, mxfp8, fp32 out.
  EXPECT_EQ(all_gather_gemm_plan(agm_config(AllGatherGemmMode::kAuto), 1, 1000).model_fused_us, 0);
  EXPECT_GT(all_gather_gemm_plan(agm_config(AllGatherGemmMode::kAuto), 2, 1000).model_fused_us, 0);
  EXPECT_EQ(all_gather_gemm_plan(agm_config(AllGatherGemmMode::kAuto, ScaleMode::kMxfp8), 2, 1000).model_fused_us, 0);
  AllGatherGemmConfig f32 = agm_config(AllGatherGemmMode::kSplitLsa);
  f32.out_dtype = DType::kF32;
  EXPECT_EQ(all_gather_gemm_plan(f32, 4, 1000).model_fused_us, 0);
  // Without a calibration table auto never takes fused-ce, even where its model is faster
  // (test_ag_gemm_calibration.cpp: with one).
  AllGatherGemmConfig big = agm_config(AllGatherGemmMode::kAuto);
  big.k = 4096;
  const AllGatherGemmPlan a = all_gather_gemm_plan(big, 8, 4096);
  EXPECT_LT(a.model_fused_us, a.model_split_us);
  EXPECT_EQ(a.mode, AllGatherGemmMode::kSplitLsa);
}

// fused-ce hosts no split gather: its window is the gathered rows, scales and output plus its
// landed words (world x kMaxChunks), which no other mode has.
TEST(AgGemmPlan, FusedCeWindowHostsTheLandedWordsAndNoSplitGathers) {
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale}) {
    for (int w : {2, 4, 8}) {
      SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
      const AllGatherGemmConfig c = agm_config(AllGatherGemmMode::kFusedCe, q);
      WindowLayout layout;
      const fused::AgmLayout g = fused::add_agm_regions(layout, c, w, fused::kAgmBoundSplitBlocks);
      EXPECT_FALSE(g.has_split);
      EXPECT_FALSE(g.has_split_scales);
      const Region* landed = layout.find("agm.landed");
      ASSERT_NE(landed, nullptr) << layout.describe();
      EXPECT_EQ(landed->offset, g.landed);
      EXPECT_EQ(landed->bytes, 4u * w * comm::kMaxChunks);
      EXPECT_GT(g.landed, g.out);
      const std::size_t bytes = all_gather_gemm_window_bytes(c, w);
      EXPECT_EQ(bytes, layout.total_bytes());
      EXPECT_GE(bytes, g.landed + landed->bytes);
      EXPECT_NE(bytes, all_gather_gemm_window_bytes(agm_config(AllGatherGemmMode::kSplitLsa, q), w));
      EXPECT_GE(bytes, all_gather_gemm_window_bytes(agm_config(AllGatherGemmMode::kGemmOnly, q), w));
      for (AllGatherGemmMode other : {AllGatherGemmMode::kGemmOnly, AllGatherGemmMode::kSplitNccl, AllGatherGemmMode::kSplitLsa,
                                      AllGatherGemmMode::kSplitCe, AllGatherGemmMode::kAuto}) {
        WindowLayout o;
        fused::add_agm_regions(o, agm_config(other, q), w, fused::kAgmBoundSplitBlocks);
        EXPECT_EQ(o.find("agm.landed"), nullptr) << to_string(other);
      }
    }
  }
}
