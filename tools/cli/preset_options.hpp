// --preset for `weave plan|bench gemm-ar|gemm-rs|gemm-ag`: a layer of the library's preset table
// (weave/presets.hpp) fills the shape options (gemm-rs takes the gemm-ar layers: both are
// row-parallel). The preset sets N, K (gemm-ar, gemm-rs: K_r = K / world),
// the default quant, the output dtype and the default -m list; -m, --m-max and --quant (one the
// model ships) may still be given; -n, -k and --out may not (exit 2 naming both the option and the
// preset). Every check is on the CPU and throws Error(kInvalidArgument) before any GPU work.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "weave/layer_presets.hpp"
#include "weave/presets.hpp"

namespace weave::cli {

// The shape options a preset fills, as registered, so that one the user typed can be refused.
struct PresetTyped {
  const CLI::Option* m = nullptr;
  const CLI::Option* n = nullptr;
  const CLI::Option* k = nullptr;
  const CLI::Option* quant = nullptr;
  const CLI::Option* out = nullptr;  // gemm-ag only
};

// --preset's value split at commas; "" gives none. `many` false: more than one name is refused.
std::vector<std::string> preset_names(const std::string& text, bool many);

// Whether the user typed option `o` (registered; null: not registered).
bool typed(const CLI::Option* o);
// Refuses -n, -k and --out where the user typed them beside --preset `name`, which sets `sets`
// ("N and K (K_r = K / world)") and the output dtype `out` (kInvalidArgument naming the option).
void refuse_preset_shape_options(const PresetTyped& t, const std::string& name, const char* sets, std::string_view out);

// The preset `name` for the op `op` ("--preset NAME: ... is a gemm-ag layer" otherwise), with
// every option in `typed` that the preset sets refused by name. Returns the preset; `quant` is
// --quant's value when typed, else the preset's default. `subcommand`: the command that takes
// `op`'s layers when it is not `op` itself (gemm-rs takes the gemm-ar layers), for the refusal.
const ModelPreset& preset_for_op(const std::string& name, PresetOp op, const PresetTyped& typed, std::string& quant,
                                 std::string_view subcommand = {});

// "--preset NAME at world W: N = .., K = .. -> per rank .." (a header line for plans and benches).
std::string preset_line(const ModelPreset& preset, const PresetShard& shard);
// The header line of --preset `name` at `world` in `quant`, whichever table holds it (a model
// preset, or a GEMM of the decoder layer table as ag-gemm takes them).
std::string preset_header(const std::string& name, int world, ScaleMode quant);

// `weave plan --presets`: the table, one block per preset (name, op, shape, quants, output, the
// per-rank shape at world 1, 2, 4, 8 or why not, summary and source).
std::string presets_listing();
// Its second part: the decoder layers of weave/layer_presets.hpp (`weave plan|bench decode`), each
// GEMM with its split, whole shape and tp-8 shard.
std::string layer_presets_listing();

}  // namespace weave::cli
