// What `weave plan decode` and `weave bench decode` share: which decoder layers (weave/
// layer_presets.hpp), tensor-parallel worlds, quantisations and token counts to run, resolved
// into one list of runs before any GPU work; the bytes a layer's GEMMs read; and the decode
// targets of the bench (issue 38). Every rule broken comes back named after its option in one
// Error(kInvalidArgument) (main() prints it and exits 2). CPU only (in weave_cli_args, so
// tests/cpu/test_decode_options.cpp calls it directly).
#pragma once
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "weave/gemm.hpp"
#include "weave/layer_presets.hpp"
#include "weave/types.hpp"

namespace weave::cli {

// Token counts the bench takes: decode (1-32) and the small-M range of batched decode and
// speculative verification (33-256).
inline constexpr std::int64_t kDecodeMaxM = 256;

struct DecodeOptions {
  std::string presets;               // --preset: layer presets, comma-separated ("": every one)
  std::vector<int> tps{8};           // --tp: tensor-parallel worlds (each rank's shards)
  std::vector<std::int64_t> ms;      // -m/--m: tokens per step (empty: each preset's list)
  std::vector<std::string> quants;   // --quant (empty: each preset's default)
  std::string route = "auto";        // --decode-route: auto | gemv | tiles (weave's GEMMs)
};

// One layer at one world and quantisation: the shards in decode order, and the M list.
struct DecodeRun {
  const LayerPreset* layer = nullptr;
  int tp = 1;
  ScaleMode quant = ScaleMode::kBF16;
  std::vector<LayerGemmShard> gemms;
  std::vector<std::int64_t> ms;
  DecodeRoute route = DecodeRoute::kAuto;  // every weave GEMM of the chain (GemmPlanOverrides)
};

// Adds --preset, --tp, -m/--m, --quant and --decode-route to a plan or bench subcommand.
void add_decode_options(CLI::App& app, DecodeOptions& o);

// Every (preset, tp, quant) to run, in preset, tp, quant order. A quant runs for the presets that
// ship it; one that no chosen preset ships, a preset named by --preset that ships none of them, an
// unknown preset, a world a layer does not shard to (the layer's rule, named after --tp) or an M
// outside 1..kDecodeMaxM are refused, all of them in one error (an empty --preset name at once);
// so are a --decode-route other than auto, gemv or tiles, and gemv with an M above 32.
std::vector<DecodeRun> resolve_decode_runs(const DecodeOptions& o);

// Bytes of one weight B [n, k] in `quant` with its scales (what a decode GEMM must stream).
std::int64_t weight_bytes(std::int64_t n, std::int64_t k, ScaleMode quant);
// The same over a run's GEMMs.
std::int64_t layer_weight_bytes(const DecodeRun& run);

// Issue 38's targets for a layer's chain at M tokens, against the HBM read ceiling and the
// cuBLASLt chain of the same run: M <= 8: >= 75% of the ceiling and <= 0.8x cuBLASLt; M 9-32:
// >= 60% and <= 0.8x; above 32 (small-M GEMM): no HBM target, <= 1.0x cuBLASLt.
struct DecodeTarget {
  double min_hbm_fraction = 0;  // 0: none
  double max_ratio = 1.0;       // time / cuBLASLt chain time
};
DecodeTarget decode_target(std::int64_t m);

// A row's verdict against decode_target(m): met, or what was missed ("HBM 62% < 75%, 0.91x
// cuBLASLt > 0.80x"). A NaN fraction or ratio (an arm that did not run) is a miss. `read_ratio`
// (the streaming read of the same weights / the cuBLASLt chain; NaN: not measured): where the
// ratio target lies below it, the miss says so (no kernel reading those bytes can meet it).
struct DecodeJudgement {
  bool met = true;
  std::string text;  // "met" or what was missed
};
DecodeJudgement judge_decode(std::int64_t m, double hbm_fraction, double ratio, double read_ratio = std::nan(""));

// "llama3-70b tp8 m4": a row's name.
std::string decode_row_name(const DecodeRun& run, std::int64_t m);

}  // namespace weave::cli
