// The decode GEMV's planner (detail::gemv_config) without a GPU: the K split it picks under a
// cluster residency (the device's, here a stand-in with H100's GPC constraint), the splits it
// accepts, and the shared memory of A's real rows.
//
// Catches: a split whose clusters spill into a second wave when a one-wave split exists (on H100
// that cost 1.5x: docs/perf/gemm.md), a residency of 0 dividing by zero, a valid uneven split
// (3, 5, ...) refused or an invalid one (17) accepted, and A staged for all 8 x tiles tokens
// (forcing larger splits than the M real rows need).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gemv/gemv.hpp"
#include "gemv/gemv_params.hpp"
#include "weave/error.hpp"

namespace weave {
namespace {

using detail::GemvArgs;
using detail::GemvConfig;

GemmProblem problem(int64_t m, int64_t n, int64_t k, ScaleMode mode = ScaleMode::kBF16) {
  return GemmProblem{.m = m, .n = n, .k = k, .mode = mode, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
}

// A stand-in for an H100's answer: 132 SMs in GPCs of these sizes, two CTAs per SM, a cluster's
// CTAs on distinct SMs of one GPC. Clusters of 4 then fit 60 at once, not the 66 that 264 slots
// suggest.
int h100_like_clusters(const GemvConfig& cfg) {
  const std::vector<int> gpc_sms = {18, 18, 18, 18, 16, 16, 14, 14};
  int clusters = 0;
  for (int sms : gpc_sms) clusters += 2 * (sms / cfg.split);
  return clusters;
}

// Whether some split that fits shared memory holds every cluster in one wave.
bool one_wave_exists(const GemmProblem& p) {
  for (int s = 1; s <= detail::kGemvMaxSplit; ++s) {
    try {
      if (detail::gemv_config(p, 132, s, GemvArgs::Path::kRegisters, {}, h100_like_clusters).waves == 1) return true;
    } catch (const Error&) {  // A's slice does not fit at this split
    }
  }
  return false;
}

TEST(GemvPlan, KeepsTheClustersInOneWaveUnderTheDevicesResidency) {
  // llama3-70b down_proj at tp 2: 64 bands of 128 rows.
  const GemmProblem p = problem(1, 8192, 14336);
  const GemvConfig four = detail::gemv_config(p, 132, 4, GemvArgs::Path::kRegisters, {}, h100_like_clusters);
  EXPECT_EQ(four.clusters_per_wave, 60);
  EXPECT_EQ(four.waves, 2) << four.describe();  // what the planner picked before residency was asked
  const GemvConfig planned = detail::gemv_config(p, 132, 0, GemvArgs::Path::kRegisters, {}, h100_like_clusters);
  EXPECT_EQ(planned.waves, 1) << planned.describe();
  EXPECT_GE(planned.n_blocks * planned.split, 132) << "one wave, and at least one CTA per SM: " << planned.describe();
  EXPECT_TRUE(planned.device_residency);
  EXPECT_NE(planned.describe().find("1 wave of <= "), std::string::npos) << planned.describe();
  EXPECT_EQ(planned.describe().find("(modelled)"), std::string::npos) << planned.describe();
  // Every decode shape of the presets' large layers plans one wave under the same residency.
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
           {8192, 1280}, {7168, 2048}, {1280, 8192}, {8192, 4096}, {7168, 8192}, {8192, 3584}})
    for (int64_t m : {1, 8, 32})
      for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc}) {
        const GemvConfig c = detail::gemv_config(problem(m, n, k, mode), 132, 0, GemvArgs::Path::kRegisters, {},
                                                 h100_like_clusters);
        if (one_wave_exists(problem(m, n, k, mode)))
          EXPECT_EQ(c.waves, 1) << n << "x" << k << " M " << m << ": " << c.describe();
        else  // e.g. 7168 x 8192 at M = 32: A's 32 rows need split >= 6, whose 56 clusters take 2 waves
          EXPECT_EQ(c.n_blocks % c.clusters_per_wave, 0) << "whole waves where one wave cannot be: " << c.describe();
      }
  // 224 bands (a tp 1 gate_up_proj) cannot fit one wave at any split that fits shared memory
  // (2 CTAs per SM at most): the planner still takes the split of fewest waves it models.
  const GemvConfig big = detail::gemv_config(problem(8, 28672, 8192), 132, 0, GemvArgs::Path::kRegisters, {},
                                             h100_like_clusters);
  EXPECT_EQ(big.waves, 2) << big.describe();
}

TEST(GemvPlan, ModelWithoutADeviceAndAResidencyOfZero) {
  const GemvConfig modelled = detail::gemv_config(problem(1, 8192, 14336), 132);
  EXPECT_FALSE(modelled.device_residency);
  EXPECT_NE(modelled.describe().find("(modelled)"), std::string::npos) << modelled.describe();
  EXPECT_EQ(modelled.waves, 1) << modelled.describe();
  // A device that reports no room at all is planned as one cluster at a time, not a division by 0.
  const GemvConfig none =
      detail::gemv_config(problem(1, 1024, 1024), 132, 0, GemvArgs::Path::kRegisters, {}, [](const GemvConfig&) { return 0; });
  EXPECT_EQ(none.clusters_per_wave, 1);
  EXPECT_EQ(none.waves, none.n_blocks);
}

TEST(GemvPlan, AcceptsEverySplitFrom1To16AndRefusesTheRest) {
  const GemmProblem p = problem(4, 1024, 4096);
  for (int s = 1; s <= detail::kGemvMaxSplit; ++s) {
    const GemvConfig c = detail::gemv_config(p, 132, s, GemvArgs::Path::kRegisters);
    EXPECT_EQ(c.split, s);
    // 128 steps of 64 bytes shared out as evenly as whole steps allow (the last ranks may get less).
    EXPECT_EQ(c.k_slice_bytes, (128 + s - 1) / s * 64) << "split " << s;
  }
  for (int bad : {-1, 17, 64}) {
    try {
      detail::gemv_config(p, 132, bad, GemvArgs::Path::kRegisters);
      ADD_FAILURE() << "split " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("argument 'split'"), std::string::npos) << e.what();
    }
  }
}

TEST(GemvPlan, StagesOnlyTheRealRowsOfA) {
  // bf16, K = 14336: a whole row of A is 28 KB; 8 staged rows at split 1 would be 229 KB. Beyond A
  // (and the partial tile it becomes), only the cluster reduction's landing region (4.6 KB at M <= 8).
  const GemvConfig one = detail::gemv_config(problem(1, 8192, 14336), 132, 1, GemvArgs::Path::kRegisters);
  EXPECT_LT(one.smem_bytes, 32 * 1024 + detail::gemv::push_landing_bytes(1)) << one.describe();
  const GemvConfig three = detail::gemv_config(problem(3, 8192, 14336), 132, 1, GemvArgs::Path::kRegisters);
  EXPECT_GT(three.smem_bytes, 2 * one.smem_bytes) << three.describe();
  EXPECT_THROW(detail::gemv_config(problem(8, 8192, 14336), 132, 1, GemvArgs::Path::kRegisters), Error);
}

// The forced depth (steps in flight, a diagnostic) reaches the config only where an instance of it
// exists (registers path, one token tile), and only 0, 4 or 8 are accepted.
TEST(GemvPlan, ForcedDepthAppliesToOneTokenTileOnTheRegistersPath) {
  const auto regs = GemvArgs::Path::kRegisters;
  EXPECT_EQ(detail::gemv_config(problem(8, 8192, 4096), 132, 0, regs, {}, {}, false, 8).depth, 8);
  EXPECT_EQ(detail::gemv_config(problem(1, 8192, 4096, ScaleMode::kPtpc), 132, 0, regs, {}, {}, false, 4).depth, 4);
  EXPECT_EQ(detail::gemv_config(problem(8, 8192, 4096), 132, 0, regs, {}, {}, false, 0).depth, 0);
  EXPECT_EQ(detail::gemv_config(problem(9, 8192, 4096), 132, 0, regs, {}, {}, false, 8).depth, 0) << "two tiles";
  EXPECT_EQ(detail::gemv_config(problem(1, 8192, 4096), 132, 0, GemvArgs::Path::kTma, {}, {}, false, 8).depth, 0);
  EXPECT_NE(detail::gemv_config(problem(1, 8192, 4096), 132, 0, regs, {}, {}, false, 8).describe().find("depth 8"),
            std::string::npos);
  for (int bad : {-1, 2, 6, 16}) {
    try {
      detail::gemv_config(problem(1, 8192, 4096), 132, 0, regs, {}, {}, false, bad);
      ADD_FAILURE() << "depth " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("argument 'depth'"), std::string::npos) << e.what();
    }
  }
}

// The stream path (bf16): the registers path's K slices, no A slice (split 1 fits at any K and M),
// shared memory of the ring's stages, stages 2..16 only, and fp8 modes refused naming the rule.
TEST(GemvPlan, StreamPathPlansStagesAndRefusesFp8) {
  const auto stream = GemvArgs::Path::kStream;
  // 8 tokens of K = 14336 need no staged A: split 1 fits (the registers path needs split >= 3).
  const GemvConfig one = detail::gemv_config(problem(8, 8192, 14336), 132, 1, stream);
  EXPECT_EQ(one.path, detail::WeightPath::kStream);
  EXPECT_EQ(one.stages, detail::kGemvDefaultStreamStages);
  EXPECT_EQ(one.k_slice_bytes, 14336 * 2);
  // The ring, its 2 x 8 barriers and the abort word, then (at a 16-byte boundary) the landing
  // barrier and the cluster's partial rows of this CTA's share: 16 ranks x 9 rows x 8 tokens at most.
  EXPECT_EQ(one.smem_bytes, (8 * (2 * 128 * 64 + 2 * 8 * 64) + 16 * 8 + 8 + 15) / 16 * 16 + 16 + 143 * 8 * 4)
      << one.describe();
  EXPECT_NE(one.describe().find("stream stages 8"), std::string::npos) << one.describe();
  // K slices are the registers path's whole 64-byte steps (the two paths then sum K in one order):
  // 20 steps of K = 640 over 3 ranks are 7, 7, 6.
  EXPECT_EQ(detail::gemv_config(problem(1, 512, 640), 132, 3, stream).k_slice_bytes, 7 * 64);
  EXPECT_EQ(detail::gemv_config(problem(1, 512, 640), 132, 3, GemvArgs::Path::kRegisters).k_slice_bytes, 7 * 64);
  // Token tiles widen A's boxes and the landing region; 11 stages of 4 tiles (238 KB) do not fit, 10 do.
  EXPECT_EQ(detail::gemv_config(problem(32, 8192, 4096), 132, 1, stream, {}, {}, false, 0, 10).smem_bytes,
            (10 * (2 * 128 * 64 + 2 * 32 * 64) + 16 * 10 + 8 + 15) / 16 * 16 + 16 + 143 * 32 * 4);
  EXPECT_THROW(detail::gemv_config(problem(32, 8192, 4096), 132, 1, stream, {}, {}, false, 0, 11), Error);
  // The planner's path for bf16: stream from 32 bands of N (3969 rows), registers below (1280 x 8192:
  // 10 bands, measured 6-10% faster on registers); fp8 always registers.
  EXPECT_EQ(detail::gemv_config(problem(1, 4096, 8192), 132).path, detail::WeightPath::kStream);
  EXPECT_EQ(detail::gemv_config(problem(1, 3968, 8192), 132).path, detail::WeightPath::kRegisters);  // 31 bands
  EXPECT_EQ(detail::gemv_config(problem(1, 1280, 8192), 132).path, detail::WeightPath::kRegisters);
  EXPECT_EQ(detail::gemv_config(problem(1, 8192, 8192, ScaleMode::kPtpc), 132).path, detail::WeightPath::kRegisters);
  // The planner's split under the model: every split's ring fits, one CTA per SM streams at the full rate.
  const GemvConfig planned = detail::gemv_config(problem(1, 8192, 14336), 132, 0, stream);
  EXPECT_GE(planned.n_blocks * planned.split, 128) << planned.describe();
  EXPECT_EQ(planned.waves, 1) << planned.describe();
  // 200 bands (qwen3-32b gate_up at tp 2) take two waves of one CTA per SM at 8 stages: the planner
  // takes the 4-stage ring, two CTAs per SM, one wave; a forced stage count stays.
  const GemvConfig many = detail::gemv_config(problem(1, 25600, 5120), 132, 0, stream);
  EXPECT_EQ(many.stages, detail::kGemvShallowStreamStages) << many.describe();
  EXPECT_EQ(many.waves, 1) << many.describe();
  EXPECT_EQ(detail::gemv_config(problem(1, 25600, 5120), 132, 0, stream, {}, {}, false, 0, 8).stages, 8);
  for (int bad : {-1, 1, 17}) {
    try {
      detail::gemv_config(problem(1, 8192, 4096), 132, 0, stream, {}, {}, false, 0, bad);
      ADD_FAILURE() << "stages " << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("argument 'stages'"), std::string::npos) << e.what();
    }
  }
  for (ScaleMode fp8 : {ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    try {
      detail::gemv_config(problem(1, 8192, 4096, fp8), 132, 0, stream);
      ADD_FAILURE() << "stream path accepted for " << to_string(fp8);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("bf16 only"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace weave
