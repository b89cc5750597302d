// Internal side of the GEMM planner (the public verbs are in weave/gemm.hpp): every rule a problem
// breaks (for `weave plan gemm`), and the tile rule on an explicit candidate list (CPU tests).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "weave/gemm.hpp"

namespace weave::gemm {

// ceil(a / b) for positive b (the planner files' tile and wave counts).
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Every rule `problem` breaks, one sentence each; empty if it can run on the tiled kernels.
std::vector<std::string> gemm_problem_violations(const GemmProblem& problem);

struct TileCandidate {
  int block_m = 0, block_n = 0, block_k = 0, stages = 0;
  std::string kernel;        // the instance writing the problem's output dtype
  std::string split_kernel;  // the fp32-output instance of the same tile (split-K partials); "" if not built
  int cluster_m = 1;         // CTAs per cluster (gemm/kernel.cuh "Clusters")
};
// Tiles built for (mode, mxfp8 scale layout, out dtype) with the local-store epilogue, each with
// its fp32-output twin for split-K when that is built: the instances of `cluster` CTAs per cluster
// (GemmPlanOverrides::cluster: 0 and 1 name the plain ones, 2 the 2-CTA clusters').
std::vector<TileCandidate> gemm_tile_candidates(const GemmProblem& problem, int cluster = 1);

// Limits the library checks and the CLI's options show (one place for both): m, n and k are TMA
// coordinates (32-bit); num_sms is an SM count (H100/H200: 132), and a persistent grid has at most
// one CTA per SM.
inline constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
inline constexpr int kMaxSms = 1024;
// Throws Error(kInvalidArgument) naming num_sms or the override field when one is out of range.
void check_plan_limits(int num_sms, const GemmPlanOverrides& overrides);

// split-K rule constants (see gemm_plan_tiles).
inline constexpr int kMaxSplitK = 16;
// Row blocks per L2 group of the tile order unless overridden (GemmPlan::group_rows).
inline constexpr int kDefaultGroupRows = 8;
inline constexpr int64_t kMinSplitKElems = 1024;  // K elements per split the planner keeps at least
// 64-row tiles are offered at m <= this only, where they were measured (planner_tiles.cpp).
inline constexpr int64_t kHalfRowTileMaxM = 128;

// K blocks of each split for a plan with `split_k` splits of `k_blocks` blocks: every split is
// non-empty because the planner normalises split_k to ceil(k_blocks / k_blocks_per_split).
inline int64_t split_k_blocks_per_split(int64_t k_blocks, int split_k) { return (k_blocks + split_k - 1) / split_k; }

// The modelled time (us) of a one-wave grid of block_m x block_n tiles at `split` K splits of
// `k_blocks` blocks (the split-K rule of planner_tiles.cpp; CPU tests hold its choices to the H100
// measurements).
double split_k_model_us(const GemmProblem& problem, int block_m, int block_n, int64_t k_blocks, int64_t split);

// How the planner picks a K split where the tiles leave SMs idle: by the split-K model (bf16, ptpc,
// blockscale: measured), or as many splits as fill the SMs (mxfp8 and its bf16 route, whose route
// model was fitted with that rule; the model is not measured there).
enum class SplitRule { kModel, kFillSms };

// The tile rule's modelled cost of `problem` in block_m x block_n tiles on num_sms CTAs (waves x
// tile area / the tile's relative work rate, planner_tiles.cpp): the rule picks the least; the
// ratio of two tiles' costs is their modelled time ratio.
double tile_cost(const GemmProblem& problem, int num_sms, int block_m, int block_n);

// The tiled-kernel planning rule on an explicit list (see gemm_plan). No GEMV choice here.
GemmPlan gemm_plan_tiles(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides,
                         const std::vector<TileCandidate>& candidates, SplitRule split_rule = SplitRule::kModel);

// mxfp8: the modelled time of each route (planner_routes.cpp says how; `weave plan gemm` prints it).
// A route whose kernels are not built in this build models as infinite.
struct MxRouteModel {
  double native_us = 1e30, bf16_us = 1e30, convert_us = 0;  // bf16_us includes convert_us
  double native_eff = 0, bf16_eff = 0;                        // wave efficiency of each route's plan
};
MxRouteModel mx_route_model(const GemmProblem& problem, int num_sms);
// The tiled plan of an mxfp8 problem on the route the overrides name or the model prefers.
GemmPlan plan_mxfp8_tiles(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides);

// blockscale with row-major A scales: what the MN-major copy would save and cost (planner_routes.cpp says
// how; `weave plan gemm` prints it). Without a built MN-major kernel the copy never pays.
struct ScaleACopyModel {
  double kernel_us = 0;    // the MN-major plan's modelled kernel time
  double saved_us = 0;     // what the MN-major kernel saves against the one reading the scales as given
  double copy_us = 1e30;   // the copy pass, launch included
  double wave_eff = 0;     // the MN-major plan's wave efficiency
};
ScaleACopyModel scale_a_copy_model(const GemmProblem& problem, int num_sms);
// The tiled plan of a blockscale problem with scale_layout raw: A's scales as given, or copied to
// MN-major first (GemmPlan::scale_a_mn_copy), as the overrides name or the model prefers.
GemmPlan plan_blockscale_raw_tiles(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides);

// Whether weave::Gemm runs `problem` (m <= detail::kGemvMaxM) on the decode GEMV or the tiled
// kernels, and the one-line reason (planner_gemv_route.cpp: the rule and the measurement behind it).
struct GemvRoute {
  bool gemv = false;
  std::string reason;
};
GemvRoute gemv_route(const GemmProblem& problem);

}  // namespace weave::gemm
