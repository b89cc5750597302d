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
#include "gemm/dispatch.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/window_layout.hpp"

namespace weave::fused {

inline constexpr int kGarBlockM = 128, kGarBlockN = 128;  // the fused kernel's tile (also the split GEMM's)
// auto considers fused from this many waves of tiles on (a round of chunks must span about a wave
// for the own chunks to find their partials landed), then by the model with a 5% margin for split.
// Modelled, not yet calibrated on NVLink (the 2-GPU issue measures it).
inline constexpr double kGarMinFusedWaves = 2.0;
// As kGagBoundSplitBlocks: window sizes reported before an op exists assume this grid cap.
inline constexpr int kGarBoundSplitBlocks = 264;

// What the op hands its ranks: GemmAllReduce's whole sum, or GemmReduceScatter's band of it (the
// same op without the gather leg: weave/gemm_reduce_scatter.hpp).
enum class ArLeg : uint8_t { kAllReduce, kReduceScatter };
inline const char* gar_op_name(ArLeg leg) {
  return leg == ArLeg::kAllReduce ? "GemmAllReduce" : "GemmReduceScatter";
}
// GemmReduceScatter's fused mode needs every band to be whole tiles: m a multiple of world x block_m.
inline bool grs_fused_fits(int64_t m, int world) { return m % (int64_t(world) * kGarBlockM) == 0; }

struct GarLayout {
  uint64_t control = 0, credits = 0, flags = 0, staging = 0, out = 0;
  uint64_t pull = 0;          // fused-ce: the copy streams' words (fused/all_reduce/pull.hpp)
  uint64_t slot_stride = 0;   // bytes of one source's staging slot (band_cap_rows x N bf16, aligned)
  int64_t band_cap_rows = 0;  // rows of the largest band at m_max
  comm::OpOffsets split;      // the split all-reduce's regions (if any)
  bool has_split = false, has_staging = false, has_pull = false;
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
GarLayout add_gar_regions(WindowLayout& layout, const GemmAllReduceConfig& cfg, int world, int split_max_blocks,
                          const std::string& prefix = "gar", ArLeg leg = ArLeg::kAllReduce);

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

// Chunks per band for m rows on `ctas` CTAs per rank (cfg.chunks, or floor(waves / 2) clamped to
// 1 .. kMaxChunks); ar_schedule clamps to the band and normalises.
int gar_chunks(const GemmAllReduceConfig& cfg, int64_t m, int ctas);

struct GarRates {
  double gemm_tflops = 0;       // sustained GEMM rate of this quant
  double link_gbps = kModelledLinkGbps;       // NVLink bytes per second per direction per GPU, SM / TMA stores
  double comm_latency_us = 15;  // fixed cost of one weave all-reduce call
};
GarRates gar_rates(ScaleMode quant);

// The fused kernel an op of `cfg` runs (its GEMM instance), or null where this build has none.
const gemm::GemmKernelEntry<AllReduceParams>* gar_fused_kernel(const GemmAllReduceConfig& cfg);

// cfg.calibration's table for an op in a world of `world` ranks (nothing when none is named); refuses
// a table for another op shape, or one named with an explicit mode (kInvalidArgument).
std::optional<Calibration> gar_calibration(const GemmAllReduceConfig& cfg, int world, ArLeg leg = ArLeg::kAllReduce);

// cal: the op's calibration table (auto takes its measured best where it can run it), or null.
GemmAllReducePlan gar_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes = 0, const Calibration* cal = nullptr,
                           ArLeg leg = ArLeg::kAllReduce);
// The same from a schedule of m rows already made (any rank's: the plan reads only its shape).
GemmAllReducePlan gar_plan(const GemmAllReduceConfig& cfg, int world, int64_t m, int ctas, bool fused_available,
                           bool nccl_available, uint64_t window_bytes, const Calibration* cal, const ArSchedule& s,
                           ArLeg leg = ArLeg::kAllReduce);
// The configuration the planner reads for an op of `cfg` with capabilities `caps` (its plan_mode).
inline GemmAllReduceConfig gar_plan_config(GemmAllReduceConfig cfg, const GarCapabilities& caps) {
  cfg.mode = caps.plan_mode;
  return cfg;
}

}  // namespace weave::fused
