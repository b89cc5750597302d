// Internal side of the GEMM planner (the public verbs are in weave/gemm.hpp): every rule a problem
// breaks (for `weave plan gemm`), and the tile rule on an explicit candidate list (CPU tests).
#pragma once
#include <string>
#include <vector>

#include "weave/gemm.hpp"

namespace weave::gemm {

// Every rule `problem` breaks, one sentence each; empty if it can run on the tiled kernels.
std::vector<std::string> gemm_problem_violations(const GemmProblem& problem);

struct TileCandidate {
  int block_m = 0, block_n = 0, block_k = 0, stages = 0;
  std::string kernel;
};
// Instances built for (mode, out dtype) with the local-store epilogue.
std::vector<TileCandidate> gemm_tile_candidates(const GemmProblem& problem);

// The tiled-kernel planning rule on an explicit list (see gemm_plan). No GEMV choice here.
GemmPlan gemm_plan_tiles(const GemmProblem& problem, int num_sms, const GemmPlanOverrides& overrides,
                         const std::vector<TileCandidate>& candidates);

}  // namespace weave::gemm
