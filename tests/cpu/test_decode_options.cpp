// `weave plan|bench decode` options on the CPU: the runs a command line resolves to (presets,
// worlds, quants, M lists), every refusal named after its option and gathered into one error,
// the weight bytes a layer streams, and the decode targets.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli/decode_options.hpp"
#include "support/expect_error.hpp"

using namespace weave;
using namespace weave::cli;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string refusal(const DecodeOptions& o) {
  return test::error_of([&] { resolve_decode_runs(o); });
}

}  // namespace

TEST(DecodeOptions, DefaultsRunEveryPresetAtTp8InItsDefaultQuant) {
  const auto runs = resolve_decode_runs(DecodeOptions{});
  ASSERT_EQ(runs.size(), layer_presets().size());
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].layer, &layer_presets()[i]);
    EXPECT_EQ(runs[i].tp, 8);
    EXPECT_EQ(runs[i].quant, layer_presets()[i].quants.front());
    EXPECT_EQ(runs[i].ms, (std::vector<std::int64_t>{1, 2, 4, 8, 16, 32}));
    EXPECT_EQ(runs[i].gemms.size(), layer_presets()[i].gemms.size());
  }
  EXPECT_EQ(runs[0].layer->name, "llama3-70b");
  EXPECT_EQ(runs[0].gemms[0].n, 1280);  // the tp8 shard, not the whole weight
}

TEST(DecodeOptions, AQuantRunsForThePresetsThatShipIt) {
  DecodeOptions o;
  o.quants = {"blockscale", "bf16"};
  o.tps = {2, 8};
  o.ms = {32, 1, 4};
  const auto runs = resolve_decode_runs(o);
  // llama3-70b ships bf16 only of the two; qwen3-32b and deepseek-v3 both: (1 + 2 + 2) x 2 worlds.
  ASSERT_EQ(runs.size(), 10u);
  EXPECT_EQ(runs[0].layer->name, "llama3-70b");
  EXPECT_EQ(runs[0].quant, ScaleMode::kBF16);
  EXPECT_EQ(runs[0].tp, 2);
  EXPECT_EQ(runs[1].tp, 8);
  EXPECT_EQ(runs[2].layer->name, "qwen3-32b");
  EXPECT_EQ(runs[2].quant, ScaleMode::kBlockscale);  // --quant's order
  EXPECT_EQ(runs[3].quant, ScaleMode::kBF16);
  EXPECT_EQ(runs[0].ms, (std::vector<std::int64_t>{1, 4, 32}));  // sorted
}

TEST(DecodeOptions, EveryRefusalIsNamedAfterItsOptionInOneError) {
  DecodeOptions o;
  o.presets = "llama3-70b,llama3-8b";
  o.quants = {"fp4"};
  o.ms = {0, 4, 4};
  o.tps = {3};
  const std::string why = refusal(o);
  EXPECT_TRUE(contains(why, "--preset llama3-8b: no such layer (known: llama3-70b, qwen3-32b, deepseek-v3)")) << why;
  EXPECT_TRUE(contains(why, "--quant")) << why;
  EXPECT_TRUE(contains(why, "fp4")) << why;
  EXPECT_TRUE(contains(why, "-m 0: tokens per step must be in 1..256")) << why;
  EXPECT_TRUE(contains(why, "-m 4: given twice")) << why;

  DecodeOptions world;
  world.presets = "llama3-70b";
  world.tps = {3, 8, 8};
  const std::string w = refusal(world);
  EXPECT_TRUE(contains(w, "--tp 3: llama3-70b.qkv_proj at world 3")) << w;
  EXPECT_TRUE(contains(w, "--tp 8: given twice")) << w;

  DecodeOptions unshipped;
  unshipped.presets = "llama3-70b";
  unshipped.quants = {"blockscale"};
  const std::string u = refusal(unshipped);
  EXPECT_TRUE(contains(u, "--quant blockscale: no chosen preset ships it")) << u;
  EXPECT_TRUE(contains(u, "--preset llama3-70b: ships none of --quant's modes (it ships bf16, ptpc)")) << u;

  DecodeOptions partly;  // blockscale runs for deepseek-v3; llama3-70b ships none of the list
  partly.presets = "llama3-70b,deepseek-v3";
  partly.quants = {"blockscale"};
  EXPECT_TRUE(contains(refusal(partly), "--preset llama3-70b: ships none")) << refusal(partly);

  DecodeOptions every;  // no --preset: the presets that ship blockscale run, the others are left out
  every.quants = {"blockscale"};
  const auto runs = resolve_decode_runs(every);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].layer->name, "qwen3-32b");
  EXPECT_EQ(runs[1].layer->name, "deepseek-v3");

  DecodeOptions empty_name;
  empty_name.presets = "llama3-70b,";
  EXPECT_TRUE(contains(refusal(empty_name), "an empty name"));
  DecodeOptions no_tp;
  no_tp.tps = {};
  EXPECT_TRUE(contains(refusal(no_tp), "--tp: give at least one world"));

  DecodeOptions bad_route;
  bad_route.route = "fast";
  EXPECT_TRUE(contains(refusal(bad_route), "--decode-route 'fast': expected auto, gemv or tiles")) << refusal(bad_route);
  DecodeOptions gemv_past_32;
  gemv_past_32.route = "gemv";
  gemv_past_32.ms = {16, 64};
  EXPECT_TRUE(contains(refusal(gemv_past_32), "--decode-route gemv: -m 64 is past the GEMV's 32 tokens"))
      << refusal(gemv_past_32);
}

TEST(DecodeOptions, TheDecodeRouteReachesEveryRun) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, DecodeRoute>>{
           {"auto", DecodeRoute::kAuto}, {"gemv", DecodeRoute::kGemv}, {"tiles", DecodeRoute::kTiles}}) {
    DecodeOptions o;
    o.route = text;
    o.ms = {1, 16};
    for (const DecodeRun& r : resolve_decode_runs(o)) EXPECT_EQ(r.route, want) << text;
  }
}

TEST(DecodeOptions, WeightBytesCountValuesAndScales) {
  EXPECT_EQ(weight_bytes(1280, 8192, ScaleMode::kBF16), 2 * 1280 * 8192);
  EXPECT_EQ(weight_bytes(1280, 8192, ScaleMode::kPtpc), 1280 * 8192 + 4 * 1280);
  EXPECT_EQ(weight_bytes(2112, 7168, ScaleMode::kBlockscale), 2112 * 7168 + 4 * 17 * 56);  // 16.5 -> 17 blocks
  EXPECT_EQ(weight_bytes(100, 64, ScaleMode::kMxfp8), 100 * 64 + 4 * 2);
  DecodeOptions o;
  o.presets = "llama3-70b";
  const auto runs = resolve_decode_runs(o);
  // tp8 bf16: (1280 + 7168) x 8192 + 8192 x (1024 + 3584) columns, 2 bytes each.
  EXPECT_EQ(layer_weight_bytes(runs[0]), 2 * ((1280 + 7168) * 8192 + 8192 * (1024 + 3584)));
  EXPECT_EQ(decode_row_name(runs[0], 4), "llama3-70b tp8 m4");
}

TEST(DecodeOptions, TargetsFollowTheIssue) {
  EXPECT_DOUBLE_EQ(decode_target(1).min_hbm_fraction, 0.75);
  EXPECT_DOUBLE_EQ(decode_target(8).min_hbm_fraction, 0.75);
  EXPECT_DOUBLE_EQ(decode_target(9).min_hbm_fraction, 0.60);
  EXPECT_DOUBLE_EQ(decode_target(32).min_hbm_fraction, 0.60);
  EXPECT_DOUBLE_EQ(decode_target(32).max_ratio, 0.8);
  EXPECT_DOUBLE_EQ(decode_target(33).min_hbm_fraction, 0);
  EXPECT_DOUBLE_EQ(decode_target(256).max_ratio, 1.0);
}

TEST(DecodeOptions, AJudgementNamesEveryMissAndANaNIsAMiss) {
  EXPECT_TRUE(judge_decode(4, 0.80, 0.75).met);
  EXPECT_EQ(judge_decode(4, 0.80, 0.75).text, "met");
  EXPECT_EQ(judge_decode(4, 0.62, 0.75).text, "HBM 62% < 75%");
  EXPECT_EQ(judge_decode(16, 0.62, 0.91).text, "0.91x cuBLASLt > 0.80x");  // 60% suffices from M 9
  EXPECT_EQ(judge_decode(1, 0.5, 0.9).text, "HBM 50% < 75%, 0.90x cuBLASLt > 0.80x");
  EXPECT_FALSE(judge_decode(2, 0.9, std::nan("")).met) << "no cuBLASLt chain: the relative target cannot be met";
  EXPECT_FALSE(judge_decode(2, std::nan(""), 0.5).met);
  EXPECT_TRUE(judge_decode(64, 0.1, 0.99).met) << "above 32: no HBM target";
  EXPECT_FALSE(judge_decode(64, 0.9, 1.01).met);
  // A ratio target below the streaming read of the same bytes is named as such.
  EXPECT_EQ(judge_decode(4, 0.80, 1.07, 0.89).text, "1.07x cuBLASLt > 0.80x (below the read: 0.89x)");
  EXPECT_EQ(judge_decode(4, 0.80, 0.85, 0.70).text, "0.85x cuBLASLt > 0.80x");
  EXPECT_TRUE(judge_decode(4, 0.80, 0.75, 0.89).met);
}
