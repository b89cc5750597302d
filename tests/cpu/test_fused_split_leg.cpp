// The split modes' GEMM where weave::Gemm would not run one pass of whole tiles (fused/
// split_gemm_leg.hpp) and GemmAllGather's use of it: the leg is weave::Gemm's own plan (the GEMV,
// or its K split) exactly where that plan is one of those; gag.partials holds every call's split
// whole; the public plan reports it in the split modes and never in the fused ones. CPU only (the GPU half: EmulatedGemmAllGather.
// SplitModesRunWeaveGemmsKSplitOrGemvBitwise).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "fused/all_gather/plan.hpp"
#include "fused/split_gemm_leg.hpp"
#include "support/fused_config.hpp"
#include "weave/gemm.hpp"

using namespace weave;

namespace {

GemmProblem problem(ScaleMode q, int64_t m, int64_t n, int64_t k, DType out = DType::kBF16) {
  return GemmProblem{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = out};
}

GemmAllGatherConfig ag_config(ScaleMode q, GemmAllGatherMode mode, int64_t n, int64_t k, int64_t m_max,
                              DType out = DType::kBF16) {
  GemmAllGatherConfig c = test::fused_op_config<GemmAllGatherConfig>(q, mode, n, k, m_max);
  c.out_dtype = out;
  return c;
}

constexpr uint64_t kRoom = uint64_t{1} << 40;  // scratch that never binds

}  // namespace

// The leg is weave::Gemm's plan at the same CTAs (blockscale's A scales as given where it would copy them), taken exactly
// where that plan is the GEMV or a K split.
TEST(SplitGemmLeg, IsWeaveGemmsPlanWhereItIsTheGemvOrAKSplit) {
  struct Case {
    ScaleMode q;
    int64_t m, n, k;
    DType out;
    int ctas;
    fused::SplitLegKind want;
  };
  const Case cases[] = {
      {ScaleMode::kBlockscale, 32, 576, 7168, DType::kBF16, 65, fused::SplitLegKind::kSplitK},
      {ScaleMode::kBlockscale, 256, 576, 7168, DType::kBF16, 132, fused::SplitLegKind::kSplitK},
      {ScaleMode::kBF16, 256, 2048, 7168, DType::kF32, 65, fused::SplitLegKind::kSplitK},
      {ScaleMode::kPtpc, 64, 2048, 7168, DType::kBF16, 32, fused::SplitLegKind::kSplitK},
      {ScaleMode::kBF16, 1, 2048, 7168, DType::kF32, 132, fused::SplitLegKind::kGemv},
      {ScaleMode::kPtpc, 8, 7168, 2048, DType::kBF16, 132, fused::SplitLegKind::kGemv},
      // Enough tiles for the SMs, or K too short to split: one pass of the tile.
      {ScaleMode::kBF16, 4096, 2048, 7168, DType::kF32, 132, fused::SplitLegKind::kTiles},
      {ScaleMode::kBlockscale, 256, 576, 1024, DType::kBF16, 65, fused::SplitLegKind::kTiles},
      // mxfp8: the op's own bf16 route decides, never the leg.
      {ScaleMode::kMxfp8, 32, 576, 7168, DType::kBF16, 65, fused::SplitLegKind::kTiles},
      {ScaleMode::kMxfp8, 1, 576, 7168, DType::kBF16, 132, fused::SplitLegKind::kTiles},
  };
  for (const Case& c : cases) {
    const GemmProblem p = problem(c.q, c.m, c.n, c.k, c.out);
    SCOPED_TRACE(std::string(to_string(c.q)) + " " + std::to_string(c.m) + "x" + std::to_string(c.n) + "x" +
                 std::to_string(c.k) + " on " + std::to_string(c.ctas));
    const fused::SplitGemmLeg leg = fused::plan_split_gemm_leg(p, c.ctas, {.gemv = true, .scratch_bytes = kRoom});
    EXPECT_EQ(static_cast<int>(leg.kind), static_cast<int>(c.want)) << leg.note;
    if (leg.kind == fused::SplitLegKind::kTiles) {
      EXPECT_TRUE(leg.note.empty());
      continue;
    }
    GemmPlanOverrides o;
    GemmPlan want = gemm_plan(p, c.ctas, o);
    if (want.scale_a_mn_copy) {
      o.scale_a_route = ScaleARoute::kAsGiven;
      want = gemm_plan(p, c.ctas, o);
    }
    EXPECT_EQ(leg.plan.kernel, want.kernel);
    EXPECT_EQ(leg.plan.split_k, want.split_k);
    EXPECT_EQ(leg.plan.gemv, want.gemv);
    EXPECT_EQ(leg.plan.grid, want.grid);
    if (leg.kind == fused::SplitLegKind::kSplitK) {
      EXPECT_GT(leg.plan.split_k, 1);
      EXPECT_LE(leg.plan.grid, c.ctas);
      EXPECT_EQ(leg.partials_bytes, uint64_t(leg.plan.split_k) * uint64_t(c.m) * uint64_t(c.n) * 4);
      EXPECT_NE(leg.note.find("splits K"), std::string::npos) << leg.note;
    } else {
      EXPECT_NE(leg.note.find("GEMV"), std::string::npos) << leg.note;
    }
  }
}

// Where ranks share the GPU the GEMV is not taken (the tiles' plan instead); a K split whose
// partials do not fit the scratch is cut to what fits, or not taken (the control of the fit).
TEST(SplitGemmLeg, NoGemvWithoutRoomAndNoSplitWhosePartialsDoNotFit) {
  const GemmProblem one = problem(ScaleMode::kBF16, 1, 2048, 7168, DType::kF32);
  EXPECT_EQ(fused::plan_split_gemm_leg(one, 132, {.gemv = true, .scratch_bytes = kRoom}).kind,
            fused::SplitLegKind::kGemv);
  const fused::SplitGemmLeg shared = fused::plan_split_gemm_leg(one, 65, {.gemv = false, .scratch_bytes = kRoom});
  EXPECT_NE(shared.kind, fused::SplitLegKind::kGemv);
  EXPECT_FALSE(shared.plan.gemv);

  const GemmProblem p = problem(ScaleMode::kBlockscale, 32, 576, 7168);
  const fused::SplitGemmLeg fits = fused::plan_split_gemm_leg(p, 65, {.gemv = false, .scratch_bytes = kRoom});
  ASSERT_EQ(fits.kind, fused::SplitLegKind::kSplitK);
  EXPECT_EQ(fused::plan_split_gemm_leg(p, 65, {.gemv = false, .scratch_bytes = fits.partials_bytes}).kind,
            fused::SplitLegKind::kSplitK);
  // One byte short of 7 splits: the most that fit and still pay (the same tile), named as cut.
  const fused::SplitGemmLeg cut =
      fused::plan_split_gemm_leg(p, 65, {.gemv = false, .scratch_bytes = fits.partials_bytes - 1});
  ASSERT_EQ(cut.kind, fused::SplitLegKind::kSplitK) << cut.note;
  EXPECT_LT(cut.plan.split_k, fits.plan.split_k);
  EXPECT_GE(cut.plan.split_k, 2);
  EXPECT_EQ(cut.plan.block_m * 1000 + cut.plan.block_n, fits.plan.block_m * 1000 + fits.plan.block_n);
  EXPECT_LT(cut.partials_bytes, fits.partials_bytes);
  EXPECT_NE(cut.note.find("would not fit"), std::string::npos) << cut.note;
  // Room for fewer than two splits' partials: no split at all.
  EXPECT_EQ(fused::plan_split_gemm_leg(p, 65, {.gemv = false, .scratch_bytes = 2 * uint64_t(32 * 576 * 4) - 1}).kind,
            fused::SplitLegKind::kTiles);
}

// GemmAllGather at random shapes, CTAs and m: gag.partials holds every call's K split whole (the
// bound of gag_partials_bytes: no split is ever cut for room), and the split calls are many (else
// the bound says nothing). Control: a region one split short would have cut some of them.
TEST(GagSplitLeg, PartialsRegionHoldsEveryCallsSplit) {
  std::mt19937_64 rng(20261207);
  const ScaleMode quants[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale};
  int split = 0, trials = 0, tight = 0;
  for (int t = 0; t < 3000; ++t) {
    const ScaleMode q = quants[rng() % 3];
    const DType out = q == ScaleMode::kBF16 && rng() % 2 ? DType::kF32 : DType::kBF16;
    const int world = 1 + static_cast<int>(rng() % 8);
    const int64_t n = 64 * (1 + static_cast<int64_t>(rng() % 48)), k = 1024 * (2 + static_cast<int64_t>(rng() % 15));
    const int64_t m_max = 1 + static_cast<int64_t>(rng() % 4096), m = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(m_max, 1024));
    const int ctas = world == 1 ? 132 : 132 / world - 1;
    const GemmAllGatherConfig cfg = ag_config(q, GemmAllGatherMode::kSplitLsa, n, k, m_max, out);
    const uint64_t region = fused::gag_partials_bytes(cfg, ctas);
    const fused::SplitGemmLeg leg = fused::gag_split_leg(cfg, m, ctas, false);
    ++trials;
    EXPECT_NE(leg.kind, fused::SplitLegKind::kGemv);
    if (leg.kind != fused::SplitLegKind::kSplitK) continue;
    ++split;
    EXPECT_LE(leg.partials_bytes, region);
    EXPECT_EQ(leg.note.find("would not fit"), std::string::npos) << leg.note;
    const GemmProblem p = problem(q, m, n, k, out);
    const fused::SplitGemmLeg shorter =
        fused::plan_split_gemm_leg(p, ctas, {.gemv = false, .scratch_bytes = leg.partials_bytes - 1});
    if (shorter.kind != fused::SplitLegKind::kSplitK || shorter.plan.split_k < leg.plan.split_k) ++tight;
  }
  EXPECT_GT(split, trials / 20) << "too few calls split K for the bound to say anything";
  EXPECT_EQ(tight, split) << "a region one byte short must cut every split";
  std::printf("  %d of %d random calls split K; gag.partials held each whole\n", split, trials);
}

// The public plan: the split modes report the leg (auto's split-lsa, gemm-only at world 1), the
// fused modes never (they run the tile), a forced tile or the hook off neither.
TEST(GagSplitLeg, ThePlanReportsItInTheSplitModesOnly) {
  const GemmAllGatherConfig autoc = ag_config(ScaleMode::kBlockscale, GemmAllGatherMode::kAuto, 576, 7168, 1024);
  const GemmAllGatherPlan p = gemm_all_gather_plan(autoc, 2, 32);
  EXPECT_EQ(p.mode, GemmAllGatherMode::kSplitLsa) << p.reason;
  EXPECT_GT(p.gemm_split_k, 1) << p.reason;
  EXPECT_FALSE(p.gemm_gemv);
  EXPECT_NE(p.reason.find("splits K"), std::string::npos) << p.reason;

  const GemmAllGatherPlan decode = gemm_all_gather_plan(autoc, 2, 1);
  EXPECT_TRUE(decode.gemm_gemv) << decode.reason;
  EXPECT_EQ(decode.gemm_split_k, 1);
  const GemmAllGatherPlan world1 = gemm_all_gather_plan(autoc, 1, 4);
  EXPECT_EQ(world1.mode, GemmAllGatherMode::kGemmOnly);
  EXPECT_TRUE(world1.gemm_gemv) << world1.reason;

  const GemmAllGatherPlan fused =
      gemm_all_gather_plan(ag_config(ScaleMode::kBlockscale, GemmAllGatherMode::kFusedLsa, 576, 7168, 1024), 2, 32);
  EXPECT_EQ(fused.gemm_split_k, 1) << fused.reason;
  EXPECT_FALSE(fused.gemm_gemv);
  EXPECT_EQ(fused.reason.find("splits K"), std::string::npos) << fused.reason;

  EXPECT_EQ(fused::gag_split_leg(autoc, 32, 132, true, /*use=*/false).kind, fused::SplitLegKind::kTiles);
  EXPECT_EQ(fused::gag_split_leg(autoc, 32, 132, true, true, fused::FusedTile{128, 128}).kind,
            fused::SplitLegKind::kTiles);
  // Many tiles: no leg, and the reason does not mention one.
  const GemmAllGatherPlan big = gemm_all_gather_plan(autoc, 2, 1024);
  EXPECT_EQ(big.gemm_split_k, 1);
  EXPECT_FALSE(big.gemm_gemv);
}
