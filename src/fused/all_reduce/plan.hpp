// GemmAllReduce's pure planning: validation, the window layout at capacity, the fused schedule's
// chunk choice and the per-call model that auto and `weave plan gemm-ar` use. CPU only.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "comm/op_layout.hpp"
#include "fused/model_rates.hpp"
#include "fused/all_reduce/params.hpp"
#include "fused/all_reduce/schedule.hpp"
#include "fused/calibration.hpp"
#include "fused/capabilities.hpp"
#include "fused/tile_choice.hpp"
#include "gemm/dispatch.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/window_layout.hpp"

namespace weave::fused {

// auto considers fused from this many waves of tiles on (a round of chunks must span about a wave
// for the own chunks to find their partials landed), then by the model with a 5% margin for split.
// Modelled, not yet calibrated on NVLink (the 2-GPU issue measures it).
inline constexpr double kGarMinFusedWaves = 2.0;
inline constexpr int kGarMinBandChunks = 2;  // gar_tile_plan
// gar_tile_plan: the most GEMM time (modelled) a pipelined band is worth: the one-chunk schedule
// measured 15% slower than two chunks (blockscale 1024 x 7168 x 2048, emulated W = 2), at a tile
// the model costs 1.09x; modelled, not calibrated further.
inline constexpr double kGarPipelinedTileMaxCost = 1.15;
// As kGagBoundSplitBlocks: window sizes reported before an op exists assume this grid cap.
inline constexpr int kGarBoundSplitBlocks = 264;

// What the op hands its ranks: GemmAllReduce's whole sum, or GemmReduceScatter's band of it (the
// same op without the gather leg: weave/gemm_reduce_scatter.hpp).
enum class ArLeg : uint8_t { kAllReduce, kReduceScatter };
inline const char* gar_op_name(ArLeg leg) {
  return leg == ArLeg::kAllReduce ? "GemmAllReduce" : "GemmReduceScatter";
}
// GemmReduceScatter's fused mode needs every band to be whole tiles: m a multiple of world x block_m.
// Its rule is stated for 128 rows (every mode has a 128-row tile); a call takes 256-row tiles only
// where m is a multiple of world x 256 too (gar_tile_plan).
inline constexpr int kGrsFusedRows = 128;
inline bool grs_fused_fits(int64_t m, int world) { return m % (int64_t(world) * kGrsFusedRows) == 0; }

struct GarLayout {
  uint64_t control = 0, credits = 0, flags = 0, staging = 0, out = 0;
  uint64_t pull = 0;          // fused-ce: the copy streams' words (fused/all_reduce/pull.hpp)
  uint64_t decode_ll = 0;     // decode-fused: the GEMV's LL lines (gemv/gemv_all_reduce.hpp)
  uint64_t slot_stride = 0;   // bytes of one source's staging slot (band_cap_rows x N bf16, aligned)
  int64_t band_cap_rows = 0;  // rows of the largest band at m_max, over every candidate tile
  comm::OpOffsets split;      // the split all-reduce's regions (if any)
  bool has_split = false, has_staging = false, has_pull = false, has_decode_ll = false;
};

// Which paths an op of `mode` may take (auto: fused and split-lsa).
bool gar_hosts_fused(GemmAllReduceMode mode);
GemmAllReduceMode gar_split_mode(GemmAllReduceMode mode);  // kSplitLsa / kSplitCe, or kAuto for none

using GarCapabilities = Capabilities<GemmAllReduceMode>;
// What an op of `cfg` can run at `at` (fused/capabilities.hpp). `unavailable` names the rule the
// requested mode breaks there, as the constructor raises it (kUnavailable).
GarCapabilities gar_capabilities(const GemmAllReduceConfig& cfg, const Placement& at, ArLeg leg = ArLeg::kAllReduce);
// The split collective: an all-reduce of m_max x N, or a reduce-scatter of m_max / world x N per rank (in place).
comm::OpShape gar_split_shape(const GemmAllReduceConfig& cfg, int world, int max_blocks, ArLeg leg = ArLeg::kAllReduce);
// The op's regions, named "<prefix>.control" etc. (several ops share a window under distinct prefixes).
// cal: the op's calibration table as loaded (gar_calibration), or null: decode-fused's lines for an
// auto op depend on it (gar_hosts_decode_fused).
GarLayout add_gar_regions(WindowLayout& layout, const GemmAllReduceConfig& cfg, int world, int split_max_blocks,
                          const std::string& prefix = "gar", ArLeg leg = ArLeg::kAllReduce,
                          const Calibration* cal = nullptr);
// Bytes of an op's window (gemm_all_reduce_window_bytes without its checks), with its loaded table.
std::size_t gar_window_bytes(const GemmAllReduceConfig& cfg, int world, const Calibration* cal);

// auto takes decode only where it was measured faster than split-lsa (the 128x128 GEMM + the same
// all-reduce; emulated world W = 2, N = 7168, K_r = 2048, 2026-12-01, docs/perf/fused.md):
//   bf16   M <= 16 (25.5 vs 32.1 us at M = 1, 28.7 vs 31.2 at 16; 33.4 vs 32.4 at 32)
//   mxfp8  M <= 16 (20.7 vs 26.9 at 1, 23.5 vs 27.6 at 16; 30.6 vs 28.3 at 32: its tile GEMM is slow)
//   ptpc, blockscale: never (the fp8 GEMV reads B at 26-37% of HBM, docs/gemm.md; ptpc 19.0 vs
//   19.5 at M = 1 is within the noise, and it loses from 16; blockscale loses at every M)
inline constexpr int64_t kGarDecodeMaxMBf16 = 16, kGarDecodeMaxMMxfp8 = 16;
int64_t gar_decode_max_m(ScaleMode quant);  // 0: auto never takes decode for this quant
bool gar_decode_pays(ScaleMode quant, int64_t m);

// "" if mode decode can run m rows of `cfg` (the decode GEMV implements the problem), else why not.
std::string gar_decode_unsupported_reason(const GemmAllReduceConfig& cfg, int64_t m);
// Modes decode and decode-fused (the GEMV, M <= 32).
inline bool gar_decode_mode(GemmAllReduceMode mode) {
  return mode == GemmAllReduceMode::kDecode || mode == GemmAllReduceMode::kDecodeFused;
}

// Chunks per band for m rows in block_m x block_n tiles on `ctas` CTAs per rank (cfg.chunks, or
// floor(waves / 2) clamped to 1 .. kMaxChunks); ar_schedule clamps to the band and normalises.
int gar_chunks(const GemmAllReduceConfig& cfg, int64_t m, int ctas, int block_m, int block_n);

struct GarRates {
  double gemm_tflops = 0;       // sustained GEMM rate of this quant
  double link_gbps = kModelledLinkGbps;       // NVLink bytes per second per direction per GPU, SM / TMA stores
  double comm_latency_us = 15;  // fixed cost of one weave all-reduce call
};
GarRates gar_rates(ScaleMode quant);

// The fused kernel of `cfg` at tile block_m x block_n (its GEMM instance), or null where this build
// has none.
const gemm::GemmKernelEntry<AllReduceParams>* gar_fused_kernel(const GemmAllReduceConfig& cfg, int block_m, int block_n);
// The tiles an op of `cfg` chooses from (fused/tile_choice.hpp): built with both the all-reduce
// epilogue and the local store; every local tile where no fused one is built.
std::vector<gemm::TileCandidate> gar_tile_candidates(const GemmAllReduceConfig& cfg);
bool gar_fused_built(const GemmAllReduceConfig& cfg);  // a fused kernel at any tile
// Their names, one per candidate tile, in one line (kernel_names_line; "" where none is built).
std::string gar_fused_kernel_names(const GemmAllReduceConfig& cfg);
// The tile GEMM's plan of one call of m rows on `ctas` CTAs per rank (forced: the tests' tile):
// the planner's rule on the tiles whose fused schedule cuts every band into at least
// kGarMinBandChunks chunks (rounds pipeline a band's chunks; one chunk leaves its whole compute and
// gather exposed: measured 15% slower, docs/perf/fused.md "planner's tiles"), else on those it may
// run, else on all, where the GEMM model costs that tile at most kGarPipelinedTileMaxCost times the
// planner's free pick (else the free pick) (64-row tiles count only at m <= the planner's
// kHalfRowTileMaxM); GemmReduceScatter, where its fused mode can run m (grs_fused_fits), keeps to
// tiles whose rows divide m / world (whole-tile bands). Split runs the same tile as fused.
GemmPlan gar_tile_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas,
                       const std::vector<gemm::TileCandidate>& cands, FusedTile forced = {},
                       ArLeg leg = ArLeg::kAllReduce);

// cfg.calibration's table for an op in a world of `world` ranks (nothing when none is named); refuses
// a table for another op shape, or one named with an explicit mode (kInvalidArgument).
std::optional<Calibration> gar_calibration(const GemmAllReduceConfig& cfg, int world, ArLeg leg = ArLeg::kAllReduce);

// Whether an op of `cfg` hosts decode-fused's LL lines (gemv/gemv_all_reduce.hpp) in its window:
// mode decode-fused, or auto whose calibration table `cal` (cfg.calibration as loaded) measured
// decode-fused fastest at some M (only then: the lines take 2 x world x 32 x N x 4 bytes); never at
// world 1 or for GemmReduceScatter.
bool gar_hosts_decode_fused(const GemmAllReduceConfig& cfg, int world, ArLeg leg, const Calibration* cal);

// cal: the op's calibration table (auto takes its measured best where it can run it), or null.
// decode_fused_available: the op hosts decode-fused and its GEMV fits one wave (auto may then take a
// calibration's decode-fused).
GemmAllReducePlan gar_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes = 0, const Calibration* cal = nullptr,
                           ArLeg leg = ArLeg::kAllReduce, bool decode_fused_available = false);
// The same on the call's tile GEMM plan (gar_tile_plan) and a schedule of m rows made of it (any
// rank's: the plan reads only its shape).
GemmAllReducePlan gar_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal, const GemmPlan& tile,
                           const ArSchedule& s, ArLeg leg = ArLeg::kAllReduce, bool decode_fused_available = false);
// The configuration the planner reads for an op of `cfg` with capabilities `caps` (its plan_mode).
inline GemmAllReduceConfig gar_plan_config(GemmAllReduceConfig cfg, const GarCapabilities& caps) {
  cfg.mode = caps.plan_mode;
  return cfg;
}

}  // namespace weave::fused
