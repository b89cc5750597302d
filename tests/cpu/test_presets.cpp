// The model preset table (weave/presets.hpp) on the CPU: every layer's N and K against the model's
// config.json values (written out here from the configs, not read back from the table), sharding
// at world 1, 2, 4, 8 for every quant each model ships, the rules that refuse a shard (each message
// naming the preset, the world and the rule), and every shard planned by the ops' own planners
// (the row-parallel layers also as GemmReduceScatter, as `weave plan|bench gemm-rs` takes them).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fused/all_gather/plan.hpp"
#include "fused/all_reduce/plan.hpp"
#include "support/expect_error.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/gemm_reduce_scatter.hpp"
#include "weave/presets.hpp"

using namespace weave;

namespace {

struct Expected {
  PresetOp op;
  std::int64_t n, k;
};

// From the configs: DeepSeek-V3 hidden_size 7168, intermediate_size 18432, moe_intermediate_size
// 2048, 128 heads x v_head_dim 128, kv_lora_rank 512 + qk_rope_head_dim 64; Llama-3-70B hidden 8192,
// intermediate 28672, 64 heads x 128; Qwen3-32B hidden 5120, intermediate 25600, 64 heads x 128.
// DeepSeek-V4 (no config.json): the reference operator's wkv_gate shapes.
const std::map<std::string, Expected>& expected_layers() {
  static const std::map<std::string, Expected> m = {
      {"deepseek-v3.o_proj", {PresetOp::kGemmAllReduce, 7168, 16384}},
      {"deepseek-v3.down_proj", {PresetOp::kGemmAllReduce, 7168, 18432}},
      {"deepseek-v3.shared_down_proj", {PresetOp::kGemmAllReduce, 7168, 2048}},
      {"deepseek-v3.wkv_a", {PresetOp::kGemmAllGather, 576, 7168}},
      {"deepseek-v4-pro.wkv_gate", {PresetOp::kGemmAllGather, 2048, 7168}},
      {"deepseek-v4.1-flash.wkv_gate", {PresetOp::kGemmAllGather, 1024, 5120}},
      {"llama3-70b.o_proj", {PresetOp::kGemmAllReduce, 8192, 8192}},
      {"llama3-70b.down_proj", {PresetOp::kGemmAllReduce, 8192, 28672}},
      {"qwen3-32b.o_proj", {PresetOp::kGemmAllReduce, 5120, 8192}},
      {"qwen3-32b.down_proj", {PresetOp::kGemmAllReduce, 5120, 25600}},
  };
  return m;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Presets, EveryLayerHasTheModelsDimensions) {
  std::set<std::string> seen;
  for (const ModelPreset& p : model_presets()) {
    const std::string name(p.name);
    EXPECT_TRUE(seen.insert(name).second) << "two presets named " << name;
    const auto it = expected_layers().find(name);
    ASSERT_NE(it, expected_layers().end()) << name << ": add its config.json values to this test";
    EXPECT_EQ(p.op, it->second.op) << name;
    EXPECT_EQ(p.n, it->second.n) << name;
    EXPECT_EQ(p.k, it->second.k) << name;
    EXPECT_FALSE(p.quants.empty()) << name;
    EXPECT_FALSE(p.ms.empty()) << name;
    EXPECT_TRUE(std::is_sorted(p.ms.begin(), p.ms.end())) << name;
    EXPECT_FALSE(p.summary.empty()) << name;
    EXPECT_FALSE(p.source.empty()) << name;
    EXPECT_EQ(find_model_preset(name), &p);
  }
  EXPECT_EQ(seen.size(), expected_layers().size()) << "a layer of this test is missing from the table";
}

TEST(Presets, EveryLayerShardsAtWorldOneTwoFourEightInEveryQuantItShips) {
  for (const ModelPreset& p : model_presets())
    for (const ScaleMode q : p.quants)
      for (const int w : {1, 2, 4, 8}) {
        SCOPED_TRACE(std::string(p.name) + " " + std::string(to_string(q)) + " world " + std::to_string(w));
        ASSERT_EQ(preset_shard_violation(p, w, q), "");
        const PresetShard s = shard_model_preset(p, w, q);
        EXPECT_EQ(s.world, w);
        EXPECT_EQ(s.quant, q);
        EXPECT_EQ(s.n, p.n);
        if (p.op == PresetOp::kGemmAllReduce) {
          EXPECT_EQ(s.k * w, p.k);  // the ranks' shards tile K exactly
          if (q == ScaleMode::kBlockscale) {
            EXPECT_EQ(s.k % 128, 0);
          }
        } else {
          EXPECT_EQ(s.k, p.k);  // the gather splits rows, not the weight
        }
      }
}

TEST(Presets, AWorldThatDoesNotDivideKIsRefusedNamingThePresetTheWorldAndTheRule) {
  const ModelPreset& o_proj = model_preset("deepseek-v3.o_proj");  // K = 16384 = 2^14
  const std::string why = test::error_of([&] { shard_model_preset(o_proj, 3, ScaleMode::kBlockscale); });
  EXPECT_TRUE(contains(why, "deepseek-v3.o_proj at world 3")) << why;
  EXPECT_TRUE(contains(why, "K = 16384 is not divisible by 3")) << why;
  EXPECT_TRUE(contains(why, "K_r = K / world")) << why;
  for (const int w : {0, 9, -1}) {
    const std::string out_of_range = preset_shard_violation(o_proj, w, ScaleMode::kBlockscale);
    EXPECT_TRUE(contains(out_of_range, "world must be in 1..8")) << w << ": " << out_of_range;
  }
}

TEST(Presets, AShardThatSplitsAScaleBlockIsRefusedForThatQuantOnly) {
  // K = 1536 over 8 ranks: K_r = 192, a whole number of mxfp8's 32-wide groups but not of
  // blockscale's 128-wide blocks. No table entry breaks this rule at W <= 8, so a made-up layer.
  static constexpr ScaleMode kQuants[] = {ScaleMode::kBlockscale, ScaleMode::kMxfp8, ScaleMode::kBF16};
  static constexpr std::int64_t kMs[] = {128};
  const ModelPreset layer{.name = "test.k1536", .op = PresetOp::kGemmAllReduce, .n = 1024, .k = 1536,
                          .quants = kQuants, .ms = kMs, .summary = "a test layer", .source = "this test"};
  const std::string why = preset_shard_violation(layer, 8, ScaleMode::kBlockscale);
  EXPECT_TRUE(contains(why, "test.k1536 at world 8: K_r = K / world = 192 is not a multiple of 128")) << why;
  EXPECT_EQ(preset_shard_violation(layer, 8, ScaleMode::kMxfp8), "");
  EXPECT_EQ(preset_shard_violation(layer, 8, ScaleMode::kBF16), "");
  EXPECT_EQ(preset_shard_violation(layer, 4, ScaleMode::kBlockscale), "");  // K_r = 384
  EXPECT_EQ(shard_model_preset(layer, 4, ScaleMode::kBlockscale).k, 384);
}

TEST(Presets, AQuantTheModelDoesNotShipIsRefused) {
  const ModelPreset& llama = model_preset("llama3-70b.o_proj");
  const std::string why = preset_shard_violation(llama, 2, ScaleMode::kMxfp8);
  EXPECT_TRUE(contains(why, "llama3-70b.o_proj at world 2: quant mxfp8 is not one the model ships (bf16, ptpc)")) << why;
}

TEST(Presets, AnUnknownNameIsRefusedListingTheKnownOnes) {
  EXPECT_EQ(find_model_preset("llama3-70b.qkv_proj"), nullptr);
  const std::string why = test::error_of([] { model_preset("llama3-70b.qkv_proj"); });
  EXPECT_TRUE(contains(why, "preset 'llama3-70b.qkv_proj': no such preset")) << why;
  for (const ModelPreset& p : model_presets()) EXPECT_TRUE(contains(why, std::string(p.name))) << why;
}

// Every shard at W = 2, 4, 8 through the op's validate() and its planner, at every default M: the
// op takes it, and every plan names a resolved mode and says why.
TEST(Presets, EveryShardPlansAtWorldTwoFourEight) {
  for (const ModelPreset& p : model_presets())
    for (const ScaleMode q : p.quants)
      for (const int w : {2, 4, 8}) {
        SCOPED_TRACE(std::string(p.name) + " " + std::string(to_string(q)) + " world " + std::to_string(w));
        const PresetShard s = shard_model_preset(p, w, q);
        const std::int64_t m_max = p.ms.back();
        if (p.op == PresetOp::kGemmAllReduce) {
          GemmAllReduceConfig cfg;
          cfg.n = s.n;
          cfg.k = s.k;
          cfg.m_max = m_max;
          cfg.quant = q;
          ASSERT_EQ(GemmAllReduce::validate(cfg, w), "");
          for (const std::int64_t m : p.ms) {
            const GemmAllReducePlan plan = fused::gar_plan(cfg, w, m, 132, /*fused_available=*/true,
                                                          /*nccl_available=*/true, gemm_all_reduce_window_bytes(cfg, w));
            EXPECT_NE(plan.mode, GemmAllReduceMode::kAuto) << "m " << m;
            EXPECT_FALSE(plan.reason.empty()) << "m " << m;
          }
        } else {
          GemmAllGatherConfig cfg;
          cfg.n = s.n;
          cfg.k = s.k;
          cfg.m_max = m_max;
          cfg.quant = q;
          cfg.out_dtype = p.out;
          ASSERT_EQ(GemmAllGather::validate(cfg, w), "");
          for (const std::int64_t m : p.ms) {
            const GemmAllGatherPlan plan = fused::gag_plan(cfg, w, m, 132, /*fused_available=*/true,
                                                          /*nccl_available=*/true, gemm_all_gather_window_bytes(cfg, w));
            EXPECT_NE(plan.mode, GemmAllGatherMode::kAuto) << "m " << m;
            EXPECT_FALSE(plan.reason.empty()) << "m " << m;
          }
        }
      }
}

// The row-parallel (gemm-ar) layers as GemmReduceScatter, the way `weave plan|bench gemm-rs
// --preset` takes them: the same K_r shard, each default M rounded up to a multiple of the world
// (the op needs M % W == 0), at every world the preset shards to. The op takes every shard, and
// every plan names a resolved mode and says why; fused only where M is a multiple of W x 128.
TEST(Presets, EveryRowParallelShardPlansAsAReduceScatter) {
  for (const ModelPreset& p : model_presets()) {
    if (p.op != PresetOp::kGemmAllReduce) continue;
    for (const ScaleMode q : p.quants)
      for (int w = 1; w <= 8; ++w) {
        if (!preset_shard_violation(p, w, q).empty()) continue;  // refused by the shard rules (tested above)
        SCOPED_TRACE(std::string(p.name) + " " + std::string(to_string(q)) + " world " + std::to_string(w));
        const PresetShard s = shard_model_preset(p, w, q);
        std::vector<std::int64_t> ms;
        for (const std::int64_t m : p.ms) ms.push_back((m + w - 1) / w * w);
        GemmReduceScatterConfig cfg;
        cfg.n = s.n;
        cfg.k = s.k;
        cfg.m_max = ms.back();
        cfg.quant = q;
        ASSERT_EQ(GemmReduceScatter::validate(cfg, w), "");
        for (const std::int64_t m : ms) {
          const GemmReduceScatterPlan plan = gemm_reduce_scatter_plan(cfg, w, m);
          EXPECT_NE(plan.mode, GemmReduceScatterMode::kAuto) << "m " << m;
          EXPECT_FALSE(plan.reason.empty()) << "m " << m;
          if (w > 1 && m % (w * 128) != 0) EXPECT_NE(plan.mode, GemmReduceScatterMode::kFused) << "m " << m;
        }
      }
  }
}
