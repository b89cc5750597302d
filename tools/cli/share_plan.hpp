// weave-gemm in the emulated world: weave::Gemm planned for a rank's SM share (the CTAs the fused
// ops cap their grids to, comm::rank_sm_share) while it runs on the whole GPU. weave::Gemm plans for
// the device's SM count, so the share's plan is forced on it through GemmPlanOverrides. Pure
// functions (CPU tests: ShareSmPlan).
#pragma once
#include <string>

#include "weave/gemm.hpp"

namespace weave::cli {

// The overrides under which gemm_plan(problem, num_sms, ...) takes `plan` (a plan of `problem` on
// fewer SMs) on any num_sms >= plan.grid: a tiled plan's route, tile, cluster, K split, grid and
// group_rows; the decode GEMV's route and K split (its grid follows from them).
GemmPlanOverrides overrides_from(const GemmProblem& problem, const GemmPlan& plan);

// What those overrides leave to the SM count gemm_plan is given, in words ("" if nothing): the mxfp8
// bf16 route's native fallback (run only for scale bytes outside [10, 246]).
std::string share_plan_unpinned(const GemmPlan& plan);

// One line for rows and headers: "sm90_gemm_..., tile 128x256, grid 40, split_k 1" or
// "decode GEMV, grid 128, split 2".
std::string plan_summary(const GemmPlan& plan);

}  // namespace weave::cli
