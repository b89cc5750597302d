// GemmAllGather's pure planning: validation, the window layout at capacity, and the per-call
// model that auto and `weave plan gemm-ag` use. CPU only.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "comm/op_layout.hpp"
#include "fused/all_gather/params.hpp"
#include "fused/calibration.hpp"
#include "fused/capabilities.hpp"
#include "gemm/dispatch.hpp"
#include "fused/model_rates.hpp"
#include "fused/split_gemm_leg.hpp"
#include "fused/tile_choice.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/window_layout.hpp"

namespace weave::fused {

// auto considers fused from this many waves of tiles on (then by the model, with a 5% margin for
// split). Modelled, not yet calibrated on NVLink (the 2-GPU issue measures it).
inline constexpr double kGagMinFusedWaves = 1.5;

// The split all-gather's flag words depend on its grid cap (the device's occupancy): sizes reported
// before an op exists (gemm_all_gather_window_bytes, plans) assume this many CTAs, the most an
// H100/H200 gives (132 SMs x 2), so they are upper bounds by at most a few KB.
inline constexpr int kGagBoundSplitBlocks = 264;

// CTAs per rank that sizes gag.partials before an op exists (the most an H100/H200 gives).
inline constexpr int kGagBoundCtas = 132;

struct GagLayout {
  uint64_t control = 0, credits = 0, flags = 0, out = 0;
  uint64_t out_bytes = 0;              // world * m_max * N * out element bytes
  uint64_t partials = 0, partials_bytes = 0;  // the split modes' K-split partials (0 bytes: none)
  comm::OpOffsets split;               // the split all-gather's regions (if any)
  bool has_split = false;
};

// The split mode an op of `mode` hosts in its window (kSplitLsa for auto), or kAuto for none.
GemmAllGatherMode gag_split_mode(GemmAllGatherMode mode);

using GagCapabilities = Capabilities<GemmAllGatherMode>;
// What an op of `cfg` can run at `at` (fused/capabilities.hpp). `unavailable` names the rule the
// requested mode breaks there, as the constructor raises it (kUnavailable).
GagCapabilities gag_capabilities(const GemmAllGatherConfig& cfg, const Placement& at);
// The split all-gather's shape (external buffers: it gathers gag.out in place).
comm::OpShape gag_split_shape(const GemmAllGatherConfig& cfg, int world, int max_blocks);
// Adds the op's regions, named "<prefix>.control" etc. (several ops share a window under distinct
// prefixes); `split_max_blocks` is the hosted collective's grid cap, `ctas` the op's per rank.
GagLayout add_gag_regions(WindowLayout& layout, const GemmAllGatherConfig& cfg, int world, int split_max_blocks,
                          int ctas, const std::string& prefix = "gag");

// What the model assumes (per rank; docs/perf/fused.md has the measured values to compare).
struct GagRates {
  double gemm_tflops = 0;    // sustained GEMM rate of this quant
  double link_gbps = kModelledLinkGbps;    // NVLink bytes per second per direction per GPU, SM / TMA stores
  double comm_latency_us = 12;  // fixed cost of one weave all-gather call
};
GagRates gag_rates(ScaleMode quant);

// The plan of one call of m rows per rank on `ctas` CTAs per rank. fused_available: the fused
// kernel exists and the mode may use it; nccl_available: the group has an NCCL communicator;
// window_bytes: what the plan reports as the op's window (the op's own, or
// gemm_all_gather_window_bytes before one exists; run() plans every call, so nothing is laid out here).
// cal: the op's calibration table (auto takes its measured best where it can run it), or null.
// The fused kernel of `cfg` at tile block_m x block_n (its GEMM instance), or null where this build
// has none.
const gemm::GemmKernelEntry<AllGatherParams>* gag_fused_kernel(const GemmAllGatherConfig& cfg, int block_m, int block_n);
// The tiles an op of `cfg` chooses from (fused/tile_choice.hpp): built with both the all-gather
// epilogue and the local store; every local tile where no fused one is built.
std::vector<gemm::TileCandidate> gag_tile_candidates(const GemmAllGatherConfig& cfg);
// Whether this build has a fused kernel for `cfg` at any tile.
bool gag_fused_built(const GemmAllGatherConfig& cfg);
// Their names, one per candidate tile, in one line (kernel_names_line; "" where none is built).
std::string gag_fused_kernel_names(const GemmAllGatherConfig& cfg);
// The tile GEMM's plan of one call of m rows per rank on `ctas` CTAs (forced: the tests' tile).
GemmPlan gag_tile_plan(const GemmAllGatherConfig& cfg, int64_t m, int ctas,
                       const std::vector<gemm::TileCandidate>& cands, FusedTile forced = {});

// fused-lsa or fused-ce: the modes whose GEMM epilogue stores and signals final tiles, so they
// never run the split modes' GEMM leg (gag_split_leg) nor need its partials.
inline bool gag_fused_mode(GemmAllGatherMode mode) {
  return mode == GemmAllGatherMode::kFusedLsa || mode == GemmAllGatherMode::kFusedCe;
}
// Bytes of gag.partials, the split modes' K-split partials (fp32 [S, m, N], local only) on `ctas`
// CTAs per rank: the most any call can need (split_k_partials_bound at m_max). 0 where no call
// splits: mxfp8 (its own route), K < 2048, or an op whose mode never runs a split GEMM (fused-lsa,
// fused-ce).
uint64_t gag_partials_bytes(const GemmAllGatherConfig& cfg, int ctas);
// The split modes' GEMM of a call of m rows (fused/split_gemm_leg.hpp) on `ctas` CTAs; `gemv_room`:
// no rank shares this rank's GPU. Its K split's partials go to gag.partials. A forced tile (the
// tests'), `use` false or a fused-only mode (fused-lsa, fused-ce) keeps the op's tile.
SplitGemmLeg gag_split_leg(const GemmAllGatherConfig& cfg, int64_t m, int ctas, bool gemv_room, bool use = true,
                           FusedTile forced = {});

// cfg.calibration's table for an op in a world of `world` ranks (nothing when none is named); refuses
// a table for another op shape, or one named with an explicit mode (kInvalidArgument).
std::optional<Calibration> gag_calibration(const GemmAllGatherConfig& cfg, int world);

// (The split modes' GEMM: gag_split_leg with gemv_room, as on GPUs of their own.)
GemmAllGatherPlan gag_plan(const GemmAllGatherConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes = 0, const Calibration* cal = nullptr);
// The same on the call's tile GEMM plan (gag_tile_plan), the chunks made of it (ag_chunks) and
// the split modes' GEMM (gag_split_leg).
GemmAllGatherPlan gag_plan(const GemmAllGatherConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal, const GemmPlan& tile,
                           const AgChunks& ch, const SplitGemmLeg& leg);
// The configuration the planner reads for an op of `cfg` with capabilities `caps` (its plan_mode).
inline GemmAllGatherConfig gag_plan_config(GemmAllGatherConfig cfg, const GagCapabilities& caps) {
  cfg.mode = caps.plan_mode;
  return cfg;
}

}  // namespace weave::fused
