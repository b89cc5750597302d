// The layer preset table (weave/layer_presets.hpp) on the CPU: every GEMM's N and K against the
// models' config.json values (written out here, not read back from the table), the per-rank
// shards at the worlds serving engines use, the rules that refuse a shard (each message naming
// the layer, the GEMM, the world and the rule), and every shard accepted by weave::Gemm's planner
// at the decode M range (the GEMV's up to M = 8).
#include <gtest/gtest.h>

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "support/expect_error.hpp"
#include "weave/gemm.hpp"
#include "weave/layer_presets.hpp"
#include "weave/presets.hpp"

using namespace weave;

namespace {

struct Whole {
  std::int64_t n, k;
  LayerSplit split;
};

// Llama-3-70B: hidden 8192, intermediate 28672, 64 heads, 8 KV heads, head_dim 128. Qwen3-32B:
// hidden 5120, intermediate 25600, 64 heads, 8 KV heads, head_dim 128. DeepSeek-V3: hidden 7168,
// intermediate 18432, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v 128.
const std::map<std::string, std::vector<std::pair<std::string, Whole>>>& expected() {
  using enum LayerSplit;
  static const std::map<std::string, std::vector<std::pair<std::string, Whole>>> m = {
      {"llama3-70b",
       {{"qkv_proj", {10240, 8192, kColumn}},
        {"o_proj", {8192, 8192, kRow}},
        {"gate_up_proj", {57344, 8192, kColumn}},
        {"down_proj", {8192, 28672, kRow}}}},
      {"qwen3-32b",
       {{"qkv_proj", {10240, 5120, kColumn}},
        {"o_proj", {5120, 8192, kRow}},
        {"gate_up_proj", {51200, 5120, kColumn}},
        {"down_proj", {5120, 25600, kRow}}}},
      {"deepseek-v3",
       {{"qkv_a_proj", {2112, 7168, kReplicated}},
        {"q_b_proj", {24576, 1536, kColumn}},
        {"o_proj", {7168, 16384, kRow}},
        {"gate_up_proj", {36864, 7168, kColumn}},
        {"down_proj", {7168, 18432, kRow}}}},
  };
  return m;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(LayerPresets, EveryGemmHasTheModelsDimensionsInDecodeOrder) {
  std::set<std::string> seen;
  for (const LayerPreset& l : layer_presets()) {
    const std::string name(l.name);
    EXPECT_TRUE(seen.insert(name).second) << "two layer presets named " << name;
    ASSERT_TRUE(expected().count(name)) << "no expectation written for " << name;
    const auto& want = expected().at(name);
    ASSERT_EQ(l.gemms.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(l.gemms[i].name, want[i].first) << name << " gemm " << i;
      EXPECT_EQ(l.gemms[i].n, want[i].second.n) << name << "." << want[i].first;
      EXPECT_EQ(l.gemms[i].k, want[i].second.k) << name << "." << want[i].first;
      EXPECT_EQ(l.gemms[i].split, want[i].second.split) << name << "." << want[i].first;
      EXPECT_FALSE(l.gemms[i].source.empty()) << name << "." << want[i].first;
    }
    EXPECT_FALSE(l.quants.empty()) << name;
    EXPECT_FALSE(l.ms.empty()) << name;
    EXPECT_EQ(find_layer_preset(name), &l);
  }
  EXPECT_EQ(seen.size(), expected().size());
}

TEST(LayerPresets, RowParallelGemmsAreTheModelPresetsOfTheSameLayer) {
  // The attention output and down projections are also single-layer presets for GemmAllReduce:
  // both tables must give them the same shape.
  for (const LayerPreset& l : layer_presets())
    for (const LayerGemm& g : l.gemms) {
      if (g.split != LayerSplit::kRow) continue;
      const std::string single = std::string(l.name) + "." + std::string(g.name);
      const ModelPreset* p = find_model_preset(single);
      ASSERT_NE(p, nullptr) << single << " is a row-parallel GEMM of a layer preset but no model preset";
      EXPECT_EQ(p->n, g.n) << single;
      EXPECT_EQ(p->k, g.k) << single;
    }
}

TEST(LayerPresets, ShardsSplitTheRightDimension) {
  const auto tp8 = shard_layer_preset(layer_preset("llama3-70b"), 8, ScaleMode::kBF16);
  ASSERT_EQ(tp8.size(), 4u);
  EXPECT_EQ(tp8[0].n, 1280);  // (8 + 2) heads x 128
  EXPECT_EQ(tp8[0].k, 8192);
  EXPECT_EQ(tp8[1].n, 8192);
  EXPECT_EQ(tp8[1].k, 1024);
  EXPECT_EQ(tp8[2].n, 7168);  // 2 x 28672 / 8
  EXPECT_EQ(tp8[3].k, 3584);

  const auto ds = shard_layer_preset(layer_preset("deepseek-v3"), 8, ScaleMode::kBlockscale);
  ASSERT_EQ(ds.size(), 5u);
  EXPECT_EQ(ds[0].n, 2112);  // replicated: whole at every world
  EXPECT_EQ(ds[0].k, 7168);
  EXPECT_EQ(ds[1].n, 3072);  // 16 heads x 192
  EXPECT_EQ(ds[2].k, 2048);
  EXPECT_EQ(ds[3].n, 4608);
  EXPECT_EQ(ds[4].k, 2304);

  for (const LayerPreset& l : layer_presets()) {
    const auto one = shard_layer_preset(l, 1, l.quants.front());
    for (size_t i = 0; i < one.size(); ++i) {
      EXPECT_EQ(one[i].n, l.gemms[i].n) << l.name << " at world 1";
      EXPECT_EQ(one[i].k, l.gemms[i].k) << l.name << " at world 1";
    }
  }
}

TEST(LayerPresets, EveryShippedShardAtTheServingWorldsPlansInTheDecodeRange) {
  for (const LayerPreset& l : layer_presets())
    for (const ScaleMode q : l.quants)
      for (const int world : {1, 2, 4, 8}) {
        ASSERT_EQ(layer_shard_violation(l, world, q), "") << l.name << " " << to_string(q) << " world " << world;
        for (const LayerGemmShard& s : shard_layer_preset(l, world, q))
          for (const std::int64_t m : l.ms) {
            const GemmProblem p{.m = m, .n = s.n, .k = s.k, .mode = q};
            EXPECT_EQ(gemm_validate_problem(p), "") << l.name << "." << s.name;
            const GemmPlan plan = gemm_plan(p, 132);
            // One route per (m, mode) for every shard of a layer (src/gemm/planner_gemv_route.cpp):
            // the GEMV up to M = 8, the tiled kernels past it; never mixed in one step.
            const bool gemv = m <= 8;
            EXPECT_EQ(plan.gemv, gemv) << l.name << "." << s.name << " m " << m << ": " << plan.reason;
          }
      }
}

TEST(LayerPresets, RefusalsNameTheLayerTheGemmTheWorldAndTheRule) {
  const LayerPreset& llama = layer_preset("llama3-70b");
  const std::string w16 = layer_shard_violation(llama, 16, ScaleMode::kBF16);
  EXPECT_TRUE(contains(w16, "llama3-70b at world 16: world must be in 1..8")) << w16;

  const std::string w3 = layer_shard_violation(llama, 3, ScaleMode::kBF16);
  EXPECT_TRUE(contains(w3, "llama3-70b.qkv_proj at world 3: 8 units")) << w3;
  EXPECT_TRUE(contains(w3, "not divisible by 3")) << w3;
  EXPECT_TRUE(contains(w3, "llama3-70b.o_proj at world 3")) << w3;

  const std::string bs = layer_shard_violation(llama, 2, ScaleMode::kBlockscale);
  EXPECT_TRUE(contains(bs, "quant blockscale is not one the model ships (bf16, ptpc)")) << bs;

  // The block rule, on a layer made here: 24 heads of 32 rows split 4 ways is 192 rows per rank,
  // which divides the heads but not the 128-row weight blocks.
  constexpr std::array<ScaleMode, 1> kBs{ScaleMode::kBlockscale};
  constexpr std::array<std::int64_t, 1> kM{1};
  const std::array<LayerGemm, 1> gemms{
      LayerGemm{.name = "proj", .n = 24 * 32, .k = 1024, .split = LayerSplit::kColumn, .units = 24}};
  const LayerPreset made{.name = "made", .gemms = gemms, .quants = kBs, .ms = kM};
  EXPECT_EQ(layer_shard_violation(made, 2, ScaleMode::kBlockscale), "");
  const std::string block = layer_shard_violation(made, 4, ScaleMode::kBlockscale);
  EXPECT_TRUE(contains(block, "made.proj at world 4: N / world = 192 is not a multiple of 128")) << block;
  // Two stacked parts: each rank's share of each part must be whole blocks.
  const std::array<LayerGemm, 1> stacked{LayerGemm{
      .name = "gate_up", .n = 2 * 24 * 32, .k = 1024, .split = LayerSplit::kColumn, .units = 24, .parts = 2}};
  const LayerPreset made2{.name = "made2", .gemms = stacked, .quants = kBs, .ms = kM};
  const std::string parts = layer_shard_violation(made2, 4, ScaleMode::kBlockscale);
  EXPECT_TRUE(contains(parts, "N / world / 2 parts = 192")) << parts;

  const std::string thrown = test::error_of([&] { shard_layer_preset(llama, 3, ScaleMode::kBF16); });
  EXPECT_TRUE(contains(thrown, "llama3-70b.qkv_proj at world 3")) << thrown;
  const std::string unknown = test::error_of([] { layer_preset("llama3-8b"); });
  EXPECT_TRUE(contains(unknown, "no such layer (known: llama3-70b, qwen3-32b, deepseek-v3)")) << unknown;
}

TEST(LayerPresets, SplitNames) {
  EXPECT_EQ(to_string(LayerSplit::kColumn), "column");
  EXPECT_EQ(to_string(LayerSplit::kRow), "row");
  EXPECT_EQ(to_string(LayerSplit::kReplicated), "replicated");
}
