// Layer presets: every GEMM of one decoder layer of a model (QKV, attention output, gate+up,
// down), for benchmarks of a whole layer's chain, e.g. `weave bench decode --preset llama3-70b`.
// weave/presets.hpp names single layers for the fused operators; this table names whole layers,
// with how tensor parallelism splits each GEMM (Megatron's column / row split), so one rank's
// chain at world W is the list of its shards. docs/presets.md gives each entry's source.
//
// Splits (B [N, K]; the split runs over whole `units`: heads, KV groups, intermediate rows):
//   column      N is split: each rank computes its own output features (QKV, gate+up)
//   row         K is split: each rank holds K_r = K / W of the reduction and the outputs are
//               summed by an all-reduce (attention output, down)
//   replicated  every rank holds the whole weight (DeepSeek's small latent projections)
// Pure and host-only: the table is constant data, safe from any thread.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weave/export.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {

enum class LayerSplit : std::uint8_t { kColumn, kRow, kReplicated };
std::string_view to_string(LayerSplit split) noexcept;  // "column" | "row" | "replicated"

struct LayerGemm {
  std::string_view name;       // "qkv_proj", "o_proj", "gate_up_proj", "down_proj", ...
  std::int64_t n = 0, k = 0;   // the whole weight B [N, K]
  LayerSplit split = LayerSplit::kColumn;
  // The split dimension (N for column, K for row) is `units` indivisible units (attention
  // heads, KV groups, intermediate rows); a world must divide them. 0 for replicated.
  std::int64_t units = 0;
  // The split dimension stacks this many equal matrices (gate_up_proj: 2, gate then up); each
  // rank takes its share of every one, so block-scaled weights need each share block-aligned.
  int parts = 1;
  std::string_view source = {};  // where N and K come from (config.json fields)
};

struct LayerPreset {
  std::string_view name;             // the model, e.g. "llama3-70b"
  std::span<const LayerGemm> gemms;  // in the order a decode step runs them
  std::span<const ScaleMode> quants; // what the model ships in; the first is the default
  std::span<const std::int64_t> ms;  // default M list (tokens per step): decode batches
  std::string_view summary = {};     // one line: which layer
  std::string_view left_out = {};    // GEMM-like work of the layer not in `gemms`, and why ("" if none)
};

// Every layer preset, in a fixed order.
std::span<const LayerPreset> layer_presets() noexcept;
// The layer preset called `name`, or nullptr.
const LayerPreset* find_layer_preset(std::string_view name) noexcept;
// The same; throws Error(kInvalidArgument) naming `name` and listing the known names.
const LayerPreset& layer_preset(std::string_view name);

// One rank's GEMM of a layer in a world of W ranks.
struct LayerGemmShard {
  std::string_view name;
  std::int64_t n = 0, k = 0;  // column: N / W; row: K / W; replicated: whole
  LayerSplit split = LayerSplit::kColumn;
};

// "" if every GEMM of `layer` shards to `world` ranks in `quant`, else every rule broken, each
// naming the layer, the GEMM, the world and the rule ("llama3-70b.qkv_proj at world 16: ..."):
// world in 1..8, a quant the model ships, units divisible by the world, block-scaled shares
// whole scale blocks (blockscale: 128 along N and K; mxfp8: 32).
std::string layer_shard_violation(const LayerPreset& layer, int world, ScaleMode quant);
// The shards in the layer's order; throws Error(kInvalidArgument) with layer_shard_violation's text.
std::vector<LayerGemmShard> shard_layer_preset(const LayerPreset& layer, int world, ScaleMode quant);

// One GEMM of a layer by its full name "<layer>.<gemm>" ("llama3-70b.gate_up_proj"): what
// `weave plan|bench ag-gemm --preset` takes (the column-parallel and replicated GEMMs are the
// inputs of sequence parallelism's all-gather).
struct LayerGemmRef {
  const LayerPreset* layer = nullptr;
  const LayerGemm* gemm = nullptr;
  std::string name() const;  // "<layer>.<gemm>"
};
// The GEMM called `name`, or {nullptr, nullptr}.
LayerGemmRef find_layer_gemm(std::string_view name) noexcept;
// Every GEMM of every layer, in table order.
std::vector<LayerGemmRef> layer_gemms();
// layer_shard_violation's rules for one GEMM of the layer ("" if it shards).
std::string layer_gemm_shard_violation(const LayerGemmRef& ref, int world, ScaleMode quant);
// Its shard; throws Error(kInvalidArgument) with that text.
LayerGemmShard shard_layer_gemm(const LayerGemmRef& ref, int world, ScaleMode quant);

}  // namespace weave
