// The preset table (weave/presets.hpp) and its sharding rules. Every N and K below is written as
// the product of the model's config.json fields it comes from, so a reader checks it against the
// config, not against another number; docs/presets.md lists the same sources.
#include "weave/presets.hpp"

#include <array>
#include <sstream>

#include "common/check.hpp"
#include "weave/error.hpp"
#include "weave/window_handle.hpp"

namespace weave {
namespace {

using enum ScaleMode;

// What each model ships in (the first is the preset's default quant).
constexpr std::array kDeepSeekQuants{kBlockscale, kBF16};   // fp8 e4m3, 128x128 weight blocks
constexpr std::array kBf16Only{kBF16};                      // layers kept in bf16 by the checkpoint
constexpr std::array kLlamaQuants{kBF16, kPtpc};            // bf16; fp8 per-channel / per-token
constexpr std::array kQwenQuants{kBF16, kBlockscale, kPtpc};  // bf16; the official 128-block fp8; ptpc

// Default M lists (rows per rank). All-reduce layers see every token on every rank: a decode batch
// up to a long prefill chunk. All-gather layers see a context-parallel rank's share of a prefill.
constexpr std::array<std::int64_t, 5> kArMs{16, 128, 1024, 4096, 8192};
constexpr std::array<std::int64_t, 4> kAgMs{1024, 2048, 4096, 8192};
constexpr std::array<std::int64_t, 3> kV4AgMs{2048, 8192, 16384};  // the M the reference measured

constexpr PresetOp kAr = PresetOp::kGemmAllReduce;
constexpr PresetOp kAg = PresetOp::kGemmAllGather;

// DeepSeek-V3 config.json: hidden_size 7168, intermediate_size 18432, moe_intermediate_size 2048,
// n_shared_experts 1, num_attention_heads 128, v_head_dim 128, kv_lora_rank 512,
// qk_rope_head_dim 64; quantization_config fp8 e4m3, weight_block_size [128, 128].
// Llama-3-70B config.json: hidden_size 8192, intermediate_size 28672, num_attention_heads 64,
// head_dim 8192 / 64 = 128. Qwen3-32B config.json: hidden_size 5120, intermediate_size 25600,
// num_attention_heads 64, head_dim 128.
// DeepSeek-V4: no config.json was available; the two all-gather shapes are the ones the reference
// operator's pull requests name and measure (V4-Pro wkv_gate, V4.1-Flash's combined projection).
const std::array kPresets{
    ModelPreset{.name = "deepseek-v3.o_proj", .op = kAr, .n = 7168, .k = 128 * 128, .quants = kDeepSeekQuants,
                .out = DType::kBF16, .ms = kArMs,
                .summary = "MLA attention output projection (wo), row-parallel over heads",
                .source = "N = hidden_size 7168; K = num_attention_heads 128 x v_head_dim 128"},
    ModelPreset{.name = "deepseek-v3.down_proj", .op = kAr, .n = 7168, .k = 18432, .quants = kDeepSeekQuants,
                .out = DType::kBF16, .ms = kArMs,
                .summary = "dense MLP down projection (the first_k_dense_replace = 3 dense layers)",
                .source = "N = hidden_size 7168; K = intermediate_size 18432"},
    ModelPreset{.name = "deepseek-v3.shared_down_proj", .op = kAr, .n = 7168, .k = 2048 * 1,
                .quants = kDeepSeekQuants, .out = DType::kBF16, .ms = kArMs,
                .summary = "MoE layers' shared-expert down projection, row-parallel",
                .source = "N = hidden_size 7168; K = moe_intermediate_size 2048 x n_shared_experts 1"},
    ModelPreset{.name = "deepseek-v3.wkv_a", .op = kAg, .n = 512 + 64, .k = 7168, .quants = kDeepSeekQuants,
                .out = DType::kBF16, .ms = kAgMs,
                .summary = "MLA latent KV projection (kv_a_proj_with_mqa) in a context-parallel prefill: every "
                           "rank needs every token's latent",
                .source = "N = kv_lora_rank 512 + qk_rope_head_dim 64; K = hidden_size 7168"},
    ModelPreset{.name = "deepseek-v4-pro.wkv_gate", .op = kAg, .n = 2048, .k = 7168, .quants = kBf16Only,
                .out = DType::kF32, .ms = kV4AgMs,
                .summary = "context-parallel prefill: each rank scores its own tokens, every rank needs all "
                           "scores (bf16 in, fp32 out)",
                .source = "N = 2048, K = 7168 as named and measured by the reference operator's gemm_ag pull "
                          "request (no config.json available)"},
    ModelPreset{.name = "deepseek-v4.1-flash.wkv_gate", .op = kAg, .n = 2 * 512, .k = 5120, .quants = kBf16Only,
                .out = DType::kF32, .ms = kV4AgMs,
                .summary = "V4.1-Flash's two 512-wide projections combined into one gather (bf16 in, fp32 out)",
                .source = "N = 2 x 512, K = 5120 as named and measured by the reference operator's gemm_ag pull "
                          "request (no config.json available)"},
    ModelPreset{.name = "llama3-70b.o_proj", .op = kAr, .n = 8192, .k = 64 * 128, .quants = kLlamaQuants,
                .out = DType::kBF16, .ms = kArMs, .summary = "attention output projection, row-parallel over heads",
                .source = "N = hidden_size 8192; K = num_attention_heads 64 x head_dim 128"},
    ModelPreset{.name = "llama3-70b.down_proj", .op = kAr, .n = 8192, .k = 28672, .quants = kLlamaQuants,
                .out = DType::kBF16, .ms = kArMs, .summary = "MLP down projection, row-parallel",
                .source = "N = hidden_size 8192; K = intermediate_size 28672"},
    ModelPreset{.name = "qwen3-32b.o_proj", .op = kAr, .n = 5120, .k = 64 * 128, .quants = kQwenQuants,
                .out = DType::kBF16, .ms = kArMs, .summary = "attention output projection, row-parallel over heads",
                .source = "N = hidden_size 5120; K = num_attention_heads 64 x head_dim 128"},
    ModelPreset{.name = "qwen3-32b.down_proj", .op = kAr, .n = 5120, .k = 25600, .quants = kQwenQuants,
                .out = DType::kBF16, .ms = kArMs, .summary = "MLP down projection, row-parallel",
                .source = "N = hidden_size 5120; K = intermediate_size 25600"},
};

std::string quant_list(const ModelPreset& p) {
  std::string s;
  for (const ScaleMode q : p.quants) s += (s.empty() ? "" : ", ") + std::string(to_string(q));
  return s;
}

}  // namespace

std::string_view to_string(PresetOp op) noexcept {
  return op == PresetOp::kGemmAllReduce ? "gemm-ar" : "gemm-ag";
}

std::span<const ModelPreset> model_presets() noexcept { return kPresets; }

const ModelPreset* find_model_preset(std::string_view name) noexcept {
  for (const ModelPreset& p : kPresets)
    if (p.name == name) return &p;
  return nullptr;
}

const ModelPreset& model_preset(std::string_view name) {
  const ModelPreset* p = find_model_preset(name);
  if (p != nullptr) return *p;
  std::string known;
  for (const ModelPreset& q : kPresets) known += (known.empty() ? "" : ", ") + std::string(q.name);
  WEAVE_EXPECT_ARG(false, "preset '" << name << "': no such preset (known: " << known << ")");
  return kPresets[0];  // not reached
}

std::string preset_shard_violation(const ModelPreset& p, int world, ScaleMode quant) {
  std::ostringstream why;
  auto rule = [&](bool ok, const std::string& text) {
    if (ok) return;
    why << (why.tellp() > 0 ? "; " : "") << p.name << " at world " << world << ": " << text;
  };
  rule(world >= 1 && world <= kMaxWorld, "world must be in 1.." + std::to_string(kMaxWorld));
  bool shipped = false;
  for (const ScaleMode q : p.quants) shipped = shipped || q == quant;
  rule(shipped, "quant " + std::string(to_string(quant)) + " is not one the model ships (" + quant_list(p) + ")");
  if (p.op == PresetOp::kGemmAllReduce && world >= 1) {
    const bool divides = p.k % world == 0;
    rule(divides, "K = " + std::to_string(p.k) + " is not divisible by " + std::to_string(world) +
                      " (gemm-ar splits K: K_r = K / world)");
    const int group = scale_granularity(quant).a_k;  // one scale per this many K elements (0: none along K)
    if (divides && group > 1)
      rule((p.k / world) % group == 0, "K_r = K / world = " + std::to_string(p.k / world) + " is not a multiple of " +
                                           std::to_string(group) + " (" + std::string(to_string(quant)) +
                                           ": one scale per " + std::to_string(group) + " K elements)");
  }
  return why.str();
}

PresetShard shard_model_preset(const ModelPreset& p, int world, ScaleMode quant) {
  const std::string bad = preset_shard_violation(p, world, quant);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  PresetShard s;
  s.n = p.n;
  s.k = p.op == PresetOp::kGemmAllReduce ? p.k / world : p.k;
  s.world = world;
  s.quant = quant;
  return s;
}

}  // namespace weave
