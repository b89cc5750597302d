// AllGatherGemm's pure planning: validation, what an op can run where, the window layout at
// capacity and the per-call model that auto and `weave plan ag-gemm` use. CPU only.
//
// Window (prefix "agm.", every region at capacity, offsets independent of m):
//   agm.control / agm.credits / agm.flags   the op's protocol words (OpRuntime: the error record,
//                                           the call order; the split modes' gathers have their own)
//   agm.a      [world * m_max, K] A's elements; a call of m rows gathers into the first world * m
//              rows, rank s's at [s m, (s + 1) m)
//   agm.sa     A's scales, [world * m_max] rows of scale_row_bytes (none for bf16), laid out as agm.a
//   agm.out    [world * m_max, N] out_dtype: the output of a call without the caller's `out`
//   agm.landed fused-ce: world x kMaxChunks words, landed[q][c] = 1 once this rank's copy stream
//              pulled chunk c of rank q's rows (fused/ag_gemm/fused_ce.hpp)
//   agm.split.a / agm.split.sa   the split modes' all-gathers of agm.a and agm.sa in place
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "comm/op_layout.hpp"
#include "fused/calibration.hpp"
#include "fused/ag_gemm/fused_ce.hpp"
#include "fused/tile_choice.hpp"
#include "fused/capabilities.hpp"
#include "gemm/dispatch.hpp"
#include "weave/all_gather_gemm.hpp"
#include "weave/gemm.hpp"
#include "weave/window_layout.hpp"

namespace weave::fused {

// The gathers' flag words depend on their grid cap: sizes reported before an op exists assume the
// most an H100/H200 gives (as kGagBoundSplitBlocks).
inline constexpr int kAgmBoundSplitBlocks = 264;

// Bytes of one row of A's scales as they travel: fp32 for ptpc, K/128 fp32 for blockscale, K/32
// ue8m0 for mxfp8, none for bf16.
std::int64_t agm_scale_row_bytes(const AllGatherGemmConfig& cfg);
// Bytes of one element of A (2 for bf16, 1 for e4m3).
std::int64_t agm_elem_bytes(const AllGatherGemmConfig& cfg);
// Whether fused-ce runs this quant and output (its kernels: fused/ag_gemm/instances.cmake).
bool agm_fused_ce_quant(ScaleMode quant, DType out_dtype);
// fused-ce's GEMM kernel for cfg's quant in this build; nullptr where none is built.
const gemm::GemmKernelEntry<AgmRowsParams>* agm_fused_kernel(const AllGatherGemmConfig& cfg, int block_m, int block_n);
// fused-ce's tiles (fused/tile_choice.hpp): every local tile of the quant whose fused-ce twin is
// built; its kernel runs the planner's tile of the W m gathered rows on the op's CTAs, no K split.
std::vector<gemm::TileCandidate> agm_tile_candidates(const AllGatherGemmConfig& cfg);
bool agm_fused_built(const AllGatherGemmConfig& cfg);  // a fused-ce kernel at any tile
std::string agm_fused_kernel_names(const AllGatherGemmConfig& cfg);  // one line (kernel_names_line)
GemmPlan agm_tile_plan(const AllGatherGemmConfig& cfg, int world, int64_t m, int ctas,
                       const std::vector<gemm::TileCandidate>& cands, FusedTile forced = {});

// cfg.calibration's table for an op in a world of `world` ranks (nothing when none is named);
// refuses (kInvalidArgument) a table with an explicit mode, or one for another op shape.
std::optional<Calibration> agm_calibration(const AllGatherGemmConfig& cfg, int world);
// Whether an auto op with table `cal` holds fused-ce's words and copy streams: W > 1, a row names
// fused-ce, fused-ce runs the quant and out dtype and the build has the ce transport. (Whether it
// then runs fused-ce also takes the placement: the NVLink domain, its kernel, stream memory ops.)
bool agm_auto_hosts_fused_ce(const AllGatherGemmConfig& cfg, int world, const Calibration* cal);

using AgmCapabilities = Capabilities<AllGatherGemmMode>;
// What an op of `cfg` (with its table `cal`, if any) can run at `at`; `unavailable` names the rule
// the requested mode breaks.
AgmCapabilities agm_capabilities(const AllGatherGemmConfig& cfg, const Placement& at, const Calibration* cal = nullptr);

struct AgmLayout {
  uint64_t control = 0, credits = 0, flags = 0;
  uint64_t a = 0, sa = 0, out = 0;  // offsets of agm.a, agm.sa, agm.out
  uint64_t landed = 0;              // agm.landed (fused-ce only)
  comm::OpOffsets split_a, split_sa;
  bool has_split = false, has_split_scales = false;
};

// The hosted gathers' shapes (external buffers: they gather agm.a / agm.sa in place).
comm::OpShape agm_split_shape(const AllGatherGemmConfig& cfg, int world, int max_blocks, bool scales);
AgmLayout add_agm_regions(WindowLayout& layout, const AllGatherGemmConfig& cfg, int world, int split_max_blocks,
                          const std::string& prefix = "agm", const Calibration* cal = nullptr);

// The GEMM of a call of m rows per rank on `ctas` SMs: weave::Gemm's planner for [world m, N, K]
// (tile, grid, routes, the decode GEMV at world m <= 32), without a K split (its partials would
// need a workspace sized by the call); the overrides that make a weave::Gemm run exactly it.
struct AgmGemm {
  GemmProblem problem;
  GemmPlan plan;
  GemmPlanOverrides overrides;
};
AgmGemm agm_gemm(const AllGatherGemmConfig& cfg, int world, int64_t m, int ctas);
// The workspace every call's GEMM fits in on `ctas` CTAs: its routes' buffers at world x m_max
// rows and the most K-split partials any call's plan asks for (fused/split_gemm_leg.hpp).
std::size_t agm_gemm_workspace_bytes(const AllGatherGemmConfig& cfg, int world, int ctas);

// The mode a call of m rows per rank runs (cheap: the op calls it per call): the capabilities' plan
// mode as requested (split-nccl for auto across NVLink domains); auto: gemm-only at world 1, else
// the table's measured best near m where it is fused-ce and fused-ce runs here (fused_ce_runs),
// else split-lsa.
AllGatherGemmMode agm_mode(AllGatherGemmMode plan_mode, int world, int64_t m = 0, const Calibration* cal = nullptr,
                           bool fused_ce_runs = false);

// The plan of one call of m rows per rank on `ctas` CTAs per rank; nccl_available: the group has
// an NCCL communicator (as the other fused planners); forced: the op's testing tile (fused-ce's);
// cal, fused_ce_runs: auto's table and whether fused-ce can run here (agm_mode).
AllGatherGemmPlan agm_plan(const AllGatherGemmConfig& cfg, int world, int64_t m, int ctas, bool nccl_available,
                           uint64_t window_bytes, FusedTile forced = {}, const Calibration* cal = nullptr,
                           bool fused_ce_runs = false);

}  // namespace weave::fused
