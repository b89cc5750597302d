// weave-gemm's share plan (tools/cli/share_plan.hpp): weave::Gemm's plan for a rank's SM share,
// forced through GemmPlanOverrides, is what the planner then takes on every SM of the GPU, field
// by field, the decode GEMV's route and K split included. CPU only.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/share_plan.hpp"
#include "comm/protocol.hpp"
#include "weave/gemm.hpp"

using namespace weave;

namespace {

constexpr int kH100Sms = 132;

GemmProblem problem(ScaleMode q, int64_t m, int64_t n, int64_t k, ScaleLayout layout = ScaleLayout::kRaw,
                    DType out = DType::kBF16) {
  return GemmProblem{.m = m, .n = n, .k = k, .mode = q, .scale_layout = layout, .out_dtype = out};
}

// Small m (the GEMV, K splits), mid m (the share's tile differs from the GPU's) and large m, every
// mode and both routes of the two-route modes.
std::vector<GemmProblem> problems() {
  return {
      problem(ScaleMode::kBF16, 4, 7168, 2048),                                  // GEMV
      problem(ScaleMode::kBF16, 48, 1280, 8192),                                 // small m, long K
      problem(ScaleMode::kBF16, 256, 5120, 4096),                                // qwen3-32b o_proj
      problem(ScaleMode::kBF16, 4096, 5120, 4096),
      problem(ScaleMode::kBF16, 64, 2048, 7168, ScaleLayout::kRaw, DType::kF32),  // fp32 out
      problem(ScaleMode::kPtpc, 8, 7168, 2048),                                  // GEMV
      problem(ScaleMode::kPtpc, 64, 1280, 8192),
      problem(ScaleMode::kPtpc, 1024, 7168, 2048),
      problem(ScaleMode::kPtpc, 2048, 28672, 8192),
      problem(ScaleMode::kBlockscale, 1, 576, 7168),                             // deepseek-v3 wkv_a: GEMV
      problem(ScaleMode::kBlockscale, 32, 576, 7168),                            // wkv_a: K split
      problem(ScaleMode::kBlockscale, 2048, 2048, 7168),                         // raw: the MN-major copy
      problem(ScaleMode::kBlockscale, 2048, 1024, 5120),                         // raw: as given
      problem(ScaleMode::kBlockscale, 1024, 7168, 2048, ScaleLayout::kMnMajor),
      problem(ScaleMode::kMxfp8, 16, 4096, 4096),                                // GEMV
      problem(ScaleMode::kMxfp8, 256, 4096, 4096),
      problem(ScaleMode::kMxfp8, 4096, 4096, 4096),
      problem(ScaleMode::kMxfp8, 2048, 7168, 2048, ScaleLayout::kPacked),
  };
}

// The SM shares of W = 1..4 ranks on one H100, from the function the fused ops cap their grids with.
std::vector<int> shares() {
  std::vector<int> out;
  for (int w = 1; w <= 4; ++w) out.push_back(comm::rank_sm_share(kH100Sms, w));
  return out;
}

std::string what(const GemmProblem& p, int sms) {
  return std::string(to_string(p.mode)) + " " + std::string(to_string(p.scale_layout)) + " m " +
         std::to_string(p.m) + " n " + std::to_string(p.n) + " k " + std::to_string(p.k) + " on " +
         std::to_string(sms) + " SMs";
}

}  // namespace

TEST(ShareSmPlan, SharesAreTheFusedOpsCaps) {
  EXPECT_EQ(shares(), (std::vector<int>{132, 65, 43, 32}));
}

TEST(ShareSmPlan, ForcedOnEverySmTheTiledPlanIsTheShares) {
  for (const GemmProblem& p : problems()) {
    for (int sms : shares()) {
      const GemmPlan share = gemm_plan(p, sms);
      if (share.gemv) continue;  // GemvKeepsItsRoute
      const GemmPlan pinned = gemm_plan(p, kH100Sms, cli::overrides_from(p, share));
      SCOPED_TRACE(what(p, sms) + ": " + share.reason);
      EXPECT_FALSE(pinned.gemv);
      EXPECT_EQ(pinned.kernel, share.kernel);
      EXPECT_EQ(pinned.block_m, share.block_m);
      EXPECT_EQ(pinned.block_n, share.block_n);
      EXPECT_EQ(pinned.block_k, share.block_k);
      EXPECT_EQ(pinned.stages, share.stages);
      EXPECT_EQ(pinned.cluster, share.cluster);
      EXPECT_EQ(pinned.grid, share.grid);
      EXPECT_EQ(pinned.tiles, share.tiles);
      EXPECT_EQ(pinned.split_k, share.split_k);
      EXPECT_EQ(pinned.group_rows, share.group_rows);
      EXPECT_EQ(pinned.mx_dequant, share.mx_dequant);
      EXPECT_EQ(pinned.scale_a_mn_copy, share.scale_a_mn_copy);
      EXPECT_EQ(gemm_workspace_bytes(p, pinned), gemm_workspace_bytes(p, share));
      EXPECT_EQ(cli::share_plan_unpinned(share).empty(), !share.mx_dequant);
    }
  }
}

// The GEMV takes its route and the share's K split (override split_k beside decode_route = gemv),
// also where the whole GPU's plan splits otherwise (ForcedGemvSplitDiffersSomewhere).
TEST(ShareSmPlan, GemvTakesTheSharesSplit) {
  for (const GemmProblem& p : problems()) {
    for (int sms : shares()) {
      const GemmPlan share = gemm_plan(p, sms);
      if (!share.gemv) continue;
      SCOPED_TRACE(what(p, sms) + ": " + share.reason);
      const GemmPlanOverrides o = cli::overrides_from(p, share);
      EXPECT_EQ(o.decode_route, DecodeRoute::kGemv);
      EXPECT_EQ(o.split_k, share.split_k);
      const GemmPlan pinned = gemm_plan(p, kH100Sms, o);
      EXPECT_TRUE(pinned.gemv);
      EXPECT_EQ(pinned.kernel, share.kernel);
      EXPECT_EQ(pinned.split_k, share.split_k);
      EXPECT_EQ(pinned.grid, share.grid);
      EXPECT_EQ(cli::share_plan_unpinned(share), "");
    }
  }
}

// The cases exercise what the overrides must pin: a share plan unlike the whole GPU's, each route.
TEST(ShareSmPlan, CasesCoverEveryRoute) {
  int gemv = 0, gemv_split_unlike_gpu = 0, split = 0, unlike_gpu = 0, mx_bf16 = 0, mx_native = 0, mn_copy = 0, as_given = 0;
  for (const GemmProblem& p : problems()) {
    const GemmPlan gpu = gemm_plan(p, kH100Sms);
    for (int sms : shares()) {
      const GemmPlan s = gemm_plan(p, sms);
      gemv += s.gemv;
      gemv_split_unlike_gpu += s.gemv && gpu.gemv && s.split_k != gpu.split_k;
      split += !s.gemv && s.split_k > 1;
      unlike_gpu += !s.gemv && (s.kernel != gpu.kernel || s.grid != gpu.grid || s.split_k != gpu.split_k);
      mx_bf16 += s.mx_dequant;
      mx_native += !s.gemv && p.mode == ScaleMode::kMxfp8 && !s.mx_dequant;
      const bool raw_blockscale = p.mode == ScaleMode::kBlockscale && p.scale_layout == ScaleLayout::kRaw;
      mn_copy += s.scale_a_mn_copy;
      as_given += !s.gemv && raw_blockscale && !s.scale_a_mn_copy;
    }
  }
  EXPECT_GT(gemv, 0);
  EXPECT_GT(gemv_split_unlike_gpu, 0);
  EXPECT_GT(split, 0);
  EXPECT_GT(unlike_gpu, 0);
  EXPECT_GT(mx_bf16, 0);
  EXPECT_GT(mx_native, 0);
  EXPECT_GT(mn_copy, 0);
  EXPECT_GT(as_given, 0);
}

TEST(ShareSmPlan, SummaryNamesKernelGridAndSplit) {
  const GemmProblem p = problem(ScaleMode::kBF16, 256, 5120, 4096);
  const GemmPlan plan = gemm_plan(p, 65);
  const std::string s = cli::plan_summary(plan);
  EXPECT_NE(s.find(plan.kernel), std::string::npos) << s;
  EXPECT_NE(s.find("grid " + std::to_string(plan.grid)), std::string::npos) << s;
  EXPECT_NE(s.find("split_k " + std::to_string(plan.split_k)), std::string::npos) << s;
  EXPECT_EQ(cli::plan_summary(gemm_plan(problem(ScaleMode::kBF16, 4, 7168, 2048), 65)).rfind("decode GEMV", 0), 0u);
}
