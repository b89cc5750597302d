// Model presets: the tensor-parallel layers users run, named "<model>.<layer>" (llama3-70b.o_proj,
// deepseek-v3.down_proj, ...), each mapped to the fused operator it is and to the layer's whole
// GEMM (out [M, N] = A [M, K] B [N, K]^T, before any sharding). `weave plan --presets` lists them;
// `weave plan|bench gemm-ar|gemm-ag --preset NAME` and Python's weave.preset(NAME, world=W) take
// their shapes from this one table. docs/presets.md gives each entry's source.
//
// Sharding for a world of W ranks (shard_model_preset):
//   gemm-ar  row-parallel: every rank holds K_r = K / W of the reduction (W must divide K, and K_r
//            must hold whole scale groups: 128 for blockscale, 32 for mxfp8); N whole
//   gemm-ag  context-parallel: every rank computes its own M rows with the whole [N, K] weight, and
//            the gather stacks W x M rows; N and K are not split (M is the rank's token count)
// The op's own rules (GemmAllReduce::validate, GemmAllGather::validate) still apply to the shard.
//
// Pure and host-only: the table is constant data, safe from any thread.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "weave/export.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {

enum class PresetOp : std::uint8_t { kGemmAllReduce, kGemmAllGather };
std::string_view to_string(PresetOp op) noexcept;  // "gemm-ar" | "gemm-ag" (the CLI's names)

struct ModelPreset {
  std::string_view name;                // "<model>.<layer>", e.g. "llama3-70b.o_proj"
  PresetOp op = PresetOp::kGemmAllReduce;
  std::int64_t n = 0, k = 0;            // the layer's whole GEMM: B [N, K]
  std::span<const ScaleMode> quants;    // what the model ships in; the first is the default
  DType out = DType::kBF16;             // the layer's output dtype
  std::span<const std::int64_t> ms;     // default M list (rows per rank): decode- to prefill-like
  std::string_view summary;             // one line: what the layer is
  std::string_view source;              // where N and K come from (config.json fields)
};

// Every preset, in a fixed order (by model, then layer).
std::span<const ModelPreset> model_presets() noexcept;
// The preset called `name`, or nullptr.
const ModelPreset* find_model_preset(std::string_view name) noexcept;
// The same; throws Error(kInvalidArgument) naming `name` and listing the known names.
const ModelPreset& model_preset(std::string_view name);

// One rank's GEMM of a preset's layer in a world of `world` ranks.
struct PresetShard {
  std::int64_t n = 0, k = 0;  // gemm-ar: k = K_r = K / world; gemm-ag: N and K whole
  int world = 1;
  ScaleMode quant = ScaleMode::kBF16;
};

// "" if `preset` shards to `world` ranks in `quant`, else every rule it breaks, each naming the
// preset, the world and the rule ("deepseek-v3.o_proj at world 3: K = 16384 is not divisible by
// 3 (gemm-ar splits K: K_r = K / world)"). world must be 1..8; quant one of preset.quants.
std::string preset_shard_violation(const ModelPreset& preset, int world, ScaleMode quant);
// The shard; throws Error(kInvalidArgument) with preset_shard_violation's text.
PresetShard shard_model_preset(const ModelPreset& preset, int world, ScaleMode quant);

}  // namespace weave
