// What `weave plan gemm-ag` and `weave bench gemm-ag` share: the op's shape and modes as the user
// types them, turned into a weave::GemmAllGatherConfig. Every rule GemmAllGather::validate reports
// comes back named after the option that sets it, as one Error(kInvalidArgument) (main() prints it
// and exits 2 before anything else is printed or any GPU is probed). CPU only.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/preset_options.hpp"
#include "weave/gemm_all_gather.hpp"

namespace weave::cli {

// Defaults: DeepSeek's wkv_gate projection in a context-parallel layer (bf16 in, fp32 out,
// N = 2048, K = 7168), a few M per rank from decode-like to prefill-like.
struct GemmAgOptions {
  std::vector<std::int64_t> ms = {128, 1024, 2048, 4096};  // rows per rank, one row each
  std::int64_t n = 2048, k = 7168;
  std::int64_t m_max = 0;  // 0: the largest of ms
  std::string quant = "bf16";
  std::string layout = "raw";  // mxfp8 scale layout
  std::string out;  // "": fp32 for bf16 inputs (wkv_gate), bf16 for fp8 (their only output)
  std::string mode = "auto";
  std::string mx_route = "auto";
  std::string preset;  // --preset NAME (bench: NAME[,NAME...]): the shape from weave/presets.hpp
  PresetTyped typed;   // the shape options as registered (which ones the user typed)
  bool many_presets = false;  // --preset may name several (a bench runs each in turn)
};

// Adds -m/--m, -n/--n, -k/--k, --m-max, --quant, --out, --preset (and --scale-layout / --mode
// when asked). `many`: --preset takes several names (a bench).
void add_gemm_ag_options(CLI::App& app, GemmAgOptions& o, bool with_layout, bool with_mode, bool many = false);

// The config of `o` for a world of `world` ranks; throws Error(kInvalidArgument) naming the
// option of every rule broken (an unknown name, an M above --m-max, a GemmAllGather::validate rule).
GemmAllGatherConfig gemm_ag_config(const GemmAgOptions& o, int world);

// The shapes to run for a world of `world` ranks: `o` itself without --preset, else one per
// preset name, each with N, K, the quant, the output dtype and (unless -m was typed) the preset's
// M list (rows per rank) filled in; every shape is checked by gemm_ag_config first (Error
// (kInvalidArgument) naming the preset, the world and the rule).
std::vector<GemmAgOptions> gemm_ag_shapes(const GemmAgOptions& o, int world);

// GemmAllGather::validate's rules ("; "-separated) with each one prefixed by the options that set
// what it is about ("--n 100: n must be a multiple of 8 ..."); "" when `why` is "".
std::string name_gemm_ag_rules(const std::string& why, const GemmAllGatherConfig& c, int world);

}  // namespace weave::cli
