#include "cli/share_plan.hpp"

#include <string>

namespace weave::cli {

GemmPlanOverrides overrides_from(const GemmProblem& problem, const GemmPlan& plan) {
  GemmPlanOverrides o;
  if (plan.gemv) {  // the route and its K split (the planner refuses any tiled-kernel override beside it)
    o.decode_route = DecodeRoute::kGemv;
    o.split_k = plan.split_k;
    return o;
  }
  o.decode_route = DecodeRoute::kTiles;
  o.block_m = plan.block_m;
  o.block_n = plan.block_n;
  o.cluster = plan.cluster;
  o.split_k = plan.split_k;  // 1 forces no split (0 would let the planner split for the larger SM count)
  o.grid = plan.grid;
  o.group_rows = plan.group_rows;
  // Each route override is refused outside its mode, and left on auto the route model would price
  // the larger SM count.
  if (problem.mode == ScaleMode::kMxfp8) o.mx_route = plan.mx_dequant ? MxRoute::kBf16 : MxRoute::kNative;
  if (problem.mode == ScaleMode::kBlockscale && problem.scale_layout == ScaleLayout::kRaw)
    o.scale_a_route = plan.scale_a_mn_copy ? ScaleARoute::kMnMajorCopy : ScaleARoute::kAsGiven;
  return o;
}

std::string share_plan_unpinned(const GemmPlan& plan) {
  if (plan.mx_dequant)
    return "the mxfp8 native fallback (run only for scale bytes outside [10, 246]) is planned for every SM";
  return "";
}

std::string plan_summary(const GemmPlan& plan) {
  if (plan.gemv) return "decode GEMV, grid " + std::to_string(plan.grid) + ", split " + std::to_string(plan.split_k);
  std::string s = plan.kernel + ", grid " + std::to_string(plan.grid) + ", split_k " + std::to_string(plan.split_k);
  if (plan.mx_dequant) s += ", mxfp8 bf16 route";
  if (plan.scale_a_mn_copy) s += ", A scales copied to MN-major";
  return s;
}

}  // namespace weave::cli
