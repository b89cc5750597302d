// The layer preset table (weave/layer_presets.hpp) and its sharding rules. As in
// model_presets.cpp, every N and K is written as the product of the config.json fields it comes
// from; docs/presets.md lists the same sources.
#include "weave/layer_presets.hpp"

#include <array>
#include <sstream>

#include "common/check.hpp"
#include "weave/error.hpp"
#include "weave/window_handle.hpp"

namespace weave {
namespace {

using enum ScaleMode;
using enum LayerSplit;

constexpr std::array kDeepSeekQuants{kBlockscale, kBF16};
constexpr std::array kLlamaQuants{kBF16, kPtpc};
constexpr std::array kQwenQuants{kBF16, kBlockscale, kPtpc};
// Decode steps: a token per sequence, batches of 1 to 32 sequences.
constexpr std::array<std::int64_t, 6> kDecodeMs{1, 2, 4, 8, 16, 32};

// Llama-3-70B config.json: hidden_size 8192, intermediate_size 28672, num_attention_heads 64,
// num_key_value_heads 8, head_dim 8192 / 64 = 128. A KV group is one K head, one V head and the 8
// query heads that share them; tensor parallelism keeps groups whole.
constexpr std::array kLlama70b{
    LayerGemm{.name = "qkv_proj", .n = (64 + 2 * 8) * 128, .k = 8192, .split = kColumn, .units = 8,
              .source = "N = (num_attention_heads 64 + 2 x num_key_value_heads 8) x head_dim 128; K = hidden_size 8192"},
    LayerGemm{.name = "o_proj", .n = 8192, .k = 64 * 128, .split = kRow, .units = 64,
              .source = "N = hidden_size 8192; K = num_attention_heads 64 x head_dim 128"},
    LayerGemm{.name = "gate_up_proj", .n = 2 * 28672, .k = 8192, .split = kColumn, .units = 28672, .parts = 2,
              .source = "N = 2 x intermediate_size 28672 (gate and up stacked); K = hidden_size 8192"},
    LayerGemm{.name = "down_proj", .n = 8192, .k = 28672, .split = kRow, .units = 28672,
              .source = "N = hidden_size 8192; K = intermediate_size 28672"},
};

// Qwen3-32B config.json: hidden_size 5120, intermediate_size 25600, num_attention_heads 64,
// num_key_value_heads 8, head_dim 128 (q_norm / k_norm are no GEMMs).
constexpr std::array kQwen32b{
    LayerGemm{.name = "qkv_proj", .n = (64 + 2 * 8) * 128, .k = 5120, .split = kColumn, .units = 8,
              .source = "N = (num_attention_heads 64 + 2 x num_key_value_heads 8) x head_dim 128; K = hidden_size 5120"},
    LayerGemm{.name = "o_proj", .n = 5120, .k = 64 * 128, .split = kRow, .units = 64,
              .source = "N = hidden_size 5120; K = num_attention_heads 64 x head_dim 128"},
    LayerGemm{.name = "gate_up_proj", .n = 2 * 25600, .k = 5120, .split = kColumn, .units = 25600, .parts = 2,
              .source = "N = 2 x intermediate_size 25600 (gate and up stacked); K = hidden_size 5120"},
    LayerGemm{.name = "down_proj", .n = 5120, .k = 25600, .split = kRow, .units = 25600,
              .source = "N = hidden_size 5120; K = intermediate_size 25600"},
};

// DeepSeek-V3 config.json: hidden_size 7168, intermediate_size 18432, num_attention_heads 128,
// q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128;
// one of the first_k_dense_replace = 3 dense layers (an MoE layer's experts are not one GEMM).
constexpr std::array kDeepSeekV3{
    LayerGemm{.name = "qkv_a_proj", .n = 1536 + 512 + 64, .k = 7168, .split = kReplicated,
              .source = "q_a_proj and kv_a_proj_with_mqa stacked, as serving engines run them: N = q_lora_rank 1536 "
                        "+ kv_lora_rank 512 + qk_rope_head_dim 64; K = hidden_size 7168; every rank holds all"},
    LayerGemm{.name = "q_b_proj", .n = 128 * (128 + 64), .k = 1536, .split = kColumn, .units = 128,
              .source = "N = num_attention_heads 128 x (qk_nope_head_dim 128 + qk_rope_head_dim 64); K = q_lora_rank 1536"},
    LayerGemm{.name = "o_proj", .n = 7168, .k = 128 * 128, .split = kRow, .units = 128,
              .source = "N = hidden_size 7168; K = num_attention_heads 128 x v_head_dim 128"},
    LayerGemm{.name = "gate_up_proj", .n = 2 * 18432, .k = 7168, .split = kColumn, .units = 18432, .parts = 2,
              .source = "N = 2 x intermediate_size 18432 (gate and up stacked); K = hidden_size 7168"},
    LayerGemm{.name = "down_proj", .n = 7168, .k = 18432, .split = kRow, .units = 18432,
              .source = "N = hidden_size 7168; K = intermediate_size 18432"},
};

const std::array kLayers{
    LayerPreset{.name = "llama3-70b", .gemms = kLlama70b, .quants = kLlamaQuants, .ms = kDecodeMs,
                .summary = "one decoder layer of Llama-3-70B (GQA attention, SwiGLU MLP)"},
    LayerPreset{.name = "qwen3-32b", .gemms = kQwen32b, .quants = kQwenQuants, .ms = kDecodeMs,
                .summary = "one decoder layer of Qwen3-32B (GQA attention, SwiGLU MLP)"},
    LayerPreset{.name = "deepseek-v3", .gemms = kDeepSeekV3, .quants = kDeepSeekQuants, .ms = kDecodeMs,
                .summary = "one dense decoder layer of DeepSeek-V3 (MLA attention, SwiGLU MLP)",
                .left_out = "kv_b_proj: in decode, MLA absorbs it into the attention (per-head products with the "
                            "latent cache), so it is no GEMM over the tokens"},
};

// Weight block rows / K group of a block-scaled mode (0: no blocks).
int weight_block(ScaleMode quant) {
  if (quant == kBlockscale) return 128;
  if (quant == kMxfp8) return 32;
  return 0;
}

}  // namespace

std::string_view to_string(LayerSplit split) noexcept {
  switch (split) {
    case kColumn: return "column";
    case kRow: return "row";
    case kReplicated: return "replicated";
  }
  return "?";
}

std::span<const LayerPreset> layer_presets() noexcept { return kLayers; }

const LayerPreset* find_layer_preset(std::string_view name) noexcept {
  for (const LayerPreset& l : kLayers)
    if (l.name == name) return &l;
  return nullptr;
}

const LayerPreset& layer_preset(std::string_view name) {
  const LayerPreset* l = find_layer_preset(name);
  if (l != nullptr) return *l;
  std::string known;
  for (const LayerPreset& q : kLayers) known += (known.empty() ? "" : ", ") + std::string(q.name);
  WEAVE_EXPECT_ARG(false, "layer preset '" << name << "': no such layer (known: " << known << ")");
  return kLayers[0];  // not reached
}

namespace {

// The rules of layer_shard_violation for the layer itself (world, quant) and, if `only` is not
// null, for that GEMM alone, else for every GEMM.
std::string shard_violation(const LayerPreset& layer, const LayerGemm* only, int world, ScaleMode quant) {
  std::ostringstream why;
  auto rule = [&](bool ok, std::string_view gemm, const std::string& text) {
    if (ok) return;
    why << (why.tellp() > 0 ? "; " : "") << layer.name << (gemm.empty() ? "" : ".") << gemm << " at world " << world
        << ": " << text;
  };
  const std::string_view whole = only == nullptr ? std::string_view{} : only->name;
  rule(world >= 1 && world <= kMaxWorld, whole, "world must be in 1.." + std::to_string(kMaxWorld));
  bool shipped = false;
  std::string quants;
  for (const ScaleMode q : layer.quants) {
    shipped = shipped || q == quant;
    quants += (quants.empty() ? "" : ", ") + std::string(to_string(q));
  }
  rule(shipped, whole, "quant " + std::string(to_string(quant)) + " is not one the model ships (" + quants + ")");
  if (world < 1 || world > kMaxWorld) return why.str();
  const int block = weight_block(quant);
  for (const LayerGemm& g : layer.gemms) {
    if (g.split == kReplicated || (only != nullptr && &g != only)) continue;
    const bool column = g.split == kColumn;
    const std::int64_t dim = column ? g.n : g.k;
    const char* dim_name = column ? "N" : "K";
    const bool divides = g.units % world == 0;
    rule(divides, g.name,
         std::to_string(g.units) + " units (" + std::string(column ? "output" : "reduction") +
             " heads or rows) are not divisible by " + std::to_string(world) + " (" + std::string(to_string(g.split)) +
             " split of " + dim_name + " = " + std::to_string(dim) + ")");
    if (!divides || block == 0) continue;
    const std::int64_t share = dim / world / g.parts;
    rule(share % block == 0, g.name,
         std::string(dim_name) + " / world" + (g.parts > 1 ? " / " + std::to_string(g.parts) + " parts" : "") + " = " +
             std::to_string(share) + " is not a multiple of " + std::to_string(block) + " (" +
             std::string(to_string(quant)) + ": weights are scaled per " + std::to_string(block) + "-wide block)");
  }
  return why.str();
}

LayerGemmShard shard_of(const LayerGemm& g, int world) {
  LayerGemmShard s{.name = g.name, .n = g.n, .k = g.k, .split = g.split};
  if (g.split == kColumn) s.n /= world;
  if (g.split == kRow) s.k /= world;
  return s;
}

}  // namespace

std::string layer_shard_violation(const LayerPreset& layer, int world, ScaleMode quant) {
  return shard_violation(layer, nullptr, world, quant);
}

std::vector<LayerGemmShard> shard_layer_preset(const LayerPreset& layer, int world, ScaleMode quant) {
  const std::string bad = layer_shard_violation(layer, world, quant);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  std::vector<LayerGemmShard> out;
  for (const LayerGemm& g : layer.gemms) out.push_back(shard_of(g, world));
  return out;
}

std::string LayerGemmRef::name() const {
  return layer == nullptr || gemm == nullptr ? std::string() : std::string(layer->name) + "." + std::string(gemm->name);
}

LayerGemmRef find_layer_gemm(std::string_view name) noexcept {
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos) return {};
  const LayerPreset* l = find_layer_preset(name.substr(0, dot));
  if (l == nullptr) return {};
  for (const LayerGemm& g : l->gemms)
    if (g.name == name.substr(dot + 1)) return {l, &g};
  return {};
}

std::vector<LayerGemmRef> layer_gemms() {
  std::vector<LayerGemmRef> out;
  for (const LayerPreset& l : kLayers)
    for (const LayerGemm& g : l.gemms) out.push_back({&l, &g});
  return out;
}

std::string layer_gemm_shard_violation(const LayerGemmRef& ref, int world, ScaleMode quant) {
  return shard_violation(*ref.layer, ref.gemm, world, quant);
}

LayerGemmShard shard_layer_gemm(const LayerGemmRef& ref, int world, ScaleMode quant) {
  const std::string bad = layer_gemm_shard_violation(ref, world, quant);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  return shard_of(*ref.gemm, world);
}

}  // namespace weave
