// What `weave plan gemm-ar` and `weave bench gemm-ar` share: the op's shape and modes as the user
// types them, turned into a weave::GemmAllReduceConfig (gemm-rs takes the same shape options:
// gemm_rs_options.hpp). Every rule GemmAllReduce::validate reports comes back named after the
// option that sets it, as one Error(kInvalidArgument) (main() prints it and exits 2 before
// anything else is printed or any GPU is probed). CPU only.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/fused_options.hpp"
#include "cli/preset_options.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave::cli {

// Defaults: DeepSeek-V3's attention output projection (wo: N = 7168, K = 128 heads x 128 = 16384)
// row-parallel over 8 ranks, so K_r = 2048 per rank; a few M from decode-like to prefill-like.
struct GemmArOptions {
  std::vector<std::int64_t> ms = {128, 1024, 4096, 8192};  // rows, one row each (every rank has M rows)
  std::int64_t n = 7168, k = 2048;                         // k: this rank's K shard K_r
  std::int64_t m_max = 0;                                  // 0: the largest of ms
  std::string quant = "bf16";
  std::string layout = "raw";  // mxfp8 scale layout
  std::string mode = "auto";
  std::string mx_route = "auto";
  int chunks = 0;              // fused: chunks per band (0: the planner's)
  bool exact_own = false;      // fused: the own term in fp32
  std::string preset;          // --preset NAME (bench: NAME[,NAME...]): the shape from weave/presets.hpp
  PresetTyped typed;           // the shape options as registered (which ones the user typed)
  bool many_presets = false;   // --preset may name several (a bench runs each in turn)
};

// Adds -m/--m, -n/--n, -k/--k, --m-max, --quant, --chunks, --exact-own, --preset (and
// --scale-layout / --mode when asked). `many`: --preset takes several names (a bench).
void add_gemm_ar_options(CLI::App& app, GemmArOptions& o, bool with_layout, bool with_mode, bool many = false);

// The row-parallel ops (gemm-ar, gemm-rs) take the same shape options; what their help says of
// -m, --mode and --preset differs (gemm-rs: M is the total rows, split over the ranks).
struct RowParallelWords {
  std::string m;       // -m's help
  std::string mode;    // --mode's help (the op's modes)
  std::string preset;  // --preset's help after "NAME: ..." (what the preset sets)
};
void add_row_parallel_options(CLI::App& app, GemmArOptions& o, const RowParallelWords& words, bool with_layout,
                              bool with_mode, bool many);

// One --preset name's row-parallel shape for `world`, into `s`: N, K_r = K / world, the quant and
// (unless -m was typed) the preset's M list. `subcommand` ("gemm-ar", "gemm-rs") words a refusal
// of a layer of another op.
void fill_row_parallel_preset(GemmArOptions& s, const std::string& name, int world, const char* subcommand);

// The fields gemm-ar's and gemm-rs's configs share, from the options and their parsed quant and
// layout (the mode is each op's own).
template <class Config>
void fill_row_parallel_config(Config& c, const GemmArOptions& o, ScaleMode quant, ScaleLayout layout) {
  c.m_max = m_max_option(o.ms, o.m_max, "rows");
  c.n = o.n;
  c.k = o.k;
  c.quant = quant;
  c.scale_layout = layout;  // a layout the quant has not is refused by the op's validate, by name
  c.chunks = o.chunks;
  c.exact_own = o.exact_own;
  c.mx_route = mx_route_option(o.mx_route, quant);
}

// The config of `o` for a world of `world` ranks; throws Error(kInvalidArgument) naming the
// option of every rule broken (an unknown name, an M above --m-max, a GemmAllReduce::validate rule).
GemmAllReduceConfig gemm_ar_config(const GemmArOptions& o, int world);

// The shapes to run for a world of `world` ranks: `o` itself without --preset, else one per
// preset name, each with N, K_r = K / world, the quant and (unless -m was typed) the preset's M list
// filled in; every shape is checked by gemm_ar_config first, so a bad one stops the run before any
// GPU work (Error(kInvalidArgument) naming the preset, the world and the rule).
std::vector<GemmArOptions> gemm_ar_shapes(const GemmArOptions& o, int world);

// GemmAllReduce::validate's rules with each one prefixed by the options that set what it is about
// ("--n 100: n must be a multiple of 8 ..."); "" when `why` is "".
std::string name_gemm_ar_rules(const std::string& why, const GemmAllReduceConfig& c, int world);
// The options one of those rules is about ("" for a part no option claims; fused_options.hpp name_rules).
std::string gemm_ar_option_of(const std::string& rule, const GemmAllReduceConfig& c, int world);

}  // namespace weave::cli
