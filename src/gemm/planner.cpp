// The GEMM planner's public verbs (weave/gemm.hpp): gemm_validate_problem, and gemm_plan, which
// takes the decode GEMV where it pays (planner_gemv_route.cpp), else a route (planner_routes.cpp) or the
// tile rule (planner_tiles.cpp).
#include <string>

#include "common/check.hpp"
#include "gemm/planner.hpp"
#include "gemv/gemv.hpp"
#include "weave/gemm.hpp"

namespace weave {

std::string gemm_validate_problem(const GemmProblem& problem) {
  // The decode GEMV takes problems the tiled kernels refuse (e.g. mxfp8 at m <= 32).
  if (problem.m >= 1 && problem.m <= detail::kGemvMaxM && detail::gemv_unsupported_reason(problem).empty()) return "";
  const auto v = gemm::gemm_problem_violations(problem);
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "; " : "") + v[i];
  return out;
}

namespace {

GemmPlan tiled_plan(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides, bool blockscale_raw) {
  if (problem.mode == ScaleMode::kMxfp8) return gemm::plan_mxfp8_tiles(problem, num_sms, overrides);
  if (blockscale_raw) return gemm::plan_blockscale_raw_tiles(problem, num_sms, overrides);
  return gemm::gemm_plan_tiles(problem, num_sms, overrides, gemm::gemm_tile_candidates(problem, overrides.cluster));
}

}  // namespace

GemmPlan gemm_plan(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides) {
  const std::string bad = gemm_validate_problem(problem);
  WEAVE_EXPECT_ARG(bad.empty(), "problem m=" << problem.m << " n=" << problem.n << " k=" << problem.k << " mode "
                                             << to_string(problem.mode) << ": " << bad);
  gemm::check_plan_limits(num_sms, overrides);
  WEAVE_EXPECT_ARG(problem.mode == ScaleMode::kMxfp8 || overrides.mx_route == MxRoute::kAuto,
                   "override 'mx_route': applies to mode mxfp8 only (mode " << to_string(problem.mode) << ")");
  const bool blockscale_raw = problem.mode == ScaleMode::kBlockscale && problem.scale_layout == ScaleLayout::kRaw;
  WEAVE_EXPECT_ARG(blockscale_raw || overrides.scale_a_route == ScaleARoute::kAuto,
                   "override 'scale_a_route': applies to mode blockscale with scale_layout raw only (mode "
                       << to_string(problem.mode) << ", scale_layout " << to_string(problem.scale_layout) << ")");
  // A forced tile, K split, cluster, mxfp8 route, A-scale route or decode_route = tiles asks for the tiled
  // kernels; beside decode_route = gemv, split_k is the GEMV's K split (its cluster size).
  const bool gemv_forced = overrides.decode_route == DecodeRoute::kGemv;
  const bool tile_override = overrides.block_m != 0 || overrides.block_n != 0 || (!gemv_forced && overrides.split_k >= 2) ||
                             overrides.cluster == 2 || overrides.mx_route != MxRoute::kAuto ||
                             overrides.scale_a_route != ScaleARoute::kAuto;
  const bool tile_forced = tile_override || overrides.decode_route == DecodeRoute::kTiles;
  if (gemv_forced) {
    const std::string gemv_why = problem.m > detail::kGemvMaxM
                                     ? "m = " + std::to_string(problem.m) + " > " + std::to_string(detail::kGemvMaxM)
                                     : detail::gemv_unsupported_reason(problem);
    WEAVE_EXPECT_ARG(gemv_why.empty(), "override 'decode_route' = gemv: the GEMV cannot run this problem: " << gemv_why);
    WEAVE_EXPECT_ARG(!tile_override && overrides.grid == 0 && overrides.group_rows == 0,
                     "override 'decode_route' = gemv: conflicts with a tiled-kernel override (block_m, block_n, "
                     "grid, cluster, group_rows, mx_route, scale_a_route)");
    // Each CTA of the cluster gets at least one 64-byte step of K, as the GEMV's own planner keeps them.
    const int64_t k_steps = detail::gemv_k_steps(problem);
    WEAVE_EXPECT_ARG(overrides.split_k <= k_steps,
                     "override 'split_k' = " << overrides.split_k << " with decode_route = gemv: the GEMV splits K "
                         "in 64-byte steps, and K = " << problem.k << " has " << k_steps << ", so at most " << k_steps);
  }
  if (overrides.decode_route == DecodeRoute::kTiles) {
    const auto v = gemm::gemm_problem_violations(problem);
    WEAVE_EXPECT_ARG(v.empty(), "override 'decode_route' = tiles: the tiled kernels cannot run this problem: " << v[0]);
  }
  // Decode: the GEMV or the tiles, by the measured rule of planner_gemv_route.cpp (or forced).
  std::string tiles_because;
  if (problem.m <= detail::kGemvMaxM && !tile_forced) {
    gemm::GemvRoute route = gemm::gemv_route(problem);
    if (overrides.decode_route == DecodeRoute::kGemv && !route.gemv)
      route = {true, "m = " + std::to_string(problem.m) + ": decode GEMV (override decode_route; the planner: " +
                         route.reason + ")"};
    if (route.gemv) {
      GemmPlan plan;
      plan.gemv = true;
      plan.kernel = "gemv";
      const int forced_split = gemv_forced ? overrides.split_k : 0;
      detail::GemvConfig cfg;
      try {
        cfg = detail::gemv_config(problem, num_sms, forced_split);
      } catch (const Error& e) {  // a forced split the GEMV refuses is the override's error
        if (forced_split == 0 || e.status() != Status::kInvalidArgument) throw;
        WEAVE_EXPECT_ARG(false, "override 'split_k' = " << forced_split << " with decode_route = gemv: " << e.message());
      }
      plan.grid = static_cast<int>(cfg.n_blocks * cfg.split);
      plan.split_k = cfg.split;
      plan.reason = route.reason + " (" + cfg.describe() + ")";
      return plan;
    }
    tiles_because = "not the GEMV: " + route.reason + "; ";
  }
  GemmPlan plan = tiled_plan(problem, num_sms, overrides, blockscale_raw);
  plan.reason = tiles_because + plan.reason;
  return plan;
}

}  // namespace weave
