// What `weave plan gemm-rs` and `weave bench gemm-rs` share: the op's shape and modes as the user
// types them, turned into a weave::GemmReduceScatterConfig. The shape options are gemm-ar's (one
// row-parallel layer: every rank holds A_r [M, K_r] and B_r [N, K_r]); what differs is that M is
// the total rows, split over the ranks (rank r receives rows [r M/W, (r+1) M/W)), so every M must
// be a multiple of the world. Every rule comes back named after the option that sets it, as one
// Error(kInvalidArgument) (main() prints it and exits 2 before any GPU work). CPU only.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "cli/gemm_ar_options.hpp"
#include "weave/gemm_reduce_scatter.hpp"

namespace weave::cli {

// gemm-ar's shape options with gemm-rs's default M list: totals from decode-like to prefill-like,
// with 128 and 1000 only multiples of the world (split only: fused bands are whole 128-row tiles).
// Without -m they are rounded up per world (gemm_rs_default_ms).
struct GemmRsOptions : GemmArOptions {
  GemmRsOptions() { ms = {128, 1000, 1024, 4096, 8192}; }
};

// The default M list at `world`: each default M rounded up to a multiple of the world, those of
// 1024 and above to a multiple of world x 128 (so fused runs them at any world).
std::vector<std::int64_t> gemm_rs_default_ms(const std::vector<std::int64_t>& defaults, int world);

// Adds gemm-ar's shape options with gemm-rs's words (-m: the total rows, a multiple of the world;
// --mode: gemm-rs's modes; --preset: a row-parallel layer, its M list rounded up to the world).
void add_gemm_rs_options(CLI::App& app, GemmRsOptions& o, bool with_layout, bool with_mode, bool many = false);

// The config of `o` for a world of `world` ranks; throws Error(kInvalidArgument) naming the
// option of every rule broken (an unknown name, an M above --m-max or not a multiple of the world,
// a GemmReduceScatter::validate rule).
GemmReduceScatterConfig gemm_rs_config(const GemmRsOptions& o, int world);

// The shapes to run for a world of `world` ranks: `o` itself without --preset (its M list the
// defaults at this world unless -m was typed), else one per preset name (a gemm-ar layer), each
// with N, K_r = K / world, the quant and (unless -m was typed) the preset's M list rounded up to a
// multiple of the world; every shape is checked by gemm_rs_config first (Error(kInvalidArgument)
// naming the preset, the world and the rule).
std::vector<GemmRsOptions> gemm_rs_shapes(const GemmRsOptions& o, int world);

// GemmReduceScatter::validate's rules, each prefixed by the options that set what it is about.
std::string name_gemm_rs_rules(const std::string& why, const GemmReduceScatterConfig& c, int world);

}  // namespace weave::cli
