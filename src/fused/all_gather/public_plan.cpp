// weave::gemm_all_gather_plan: the op's per-call planner without an op or a GPU, and the lookup of
// the fused kernel and the calibration table the op and the planner share.
#include <optional>
#include <string>

#include "common/check.hpp"
#include "fused/all_gather/params.hpp"
#include "fused/all_gather/plan.hpp"
#include "gemm/dispatch.hpp"
#include "weave/gemm_all_gather.hpp"

namespace weave::fused {

const gemm::GemmKernelEntry<AllGatherParams>* gag_fused_kernel(const GemmAllGatherConfig& c, int block_m, int block_n) {
  return gemm::find_gemm_kernel<AllGatherParams>(c.quant, c.out_dtype, gemm::EpilogueKind::kAllGather, block_m,
                                                 block_n, gemm::instance_scale_layout(c.quant, c.scale_layout));
}

namespace {
GemmProblem tile_problem(const GemmAllGatherConfig& c, int64_t m) {
  return GemmProblem{.m = m, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout, .out_dtype = c.out_dtype};
}
}  // namespace

std::vector<gemm::TileCandidate> gag_tile_candidates(const GemmAllGatherConfig& c) {
  return fused_tile_candidates(tile_problem(c, c.m_max),
                               [&](int bm, int bn) { return gag_fused_kernel(c, bm, bn) != nullptr; });
}

bool gag_fused_built(const GemmAllGatherConfig& c) {
  return any_fused_kernel(gag_tile_candidates(c), [&](int bm, int bn) { return gag_fused_kernel(c, bm, bn); });
}

std::string gag_fused_kernel_names(const GemmAllGatherConfig& c) {
  return fused_kernel_names(gag_tile_candidates(c), [&](int bm, int bn) { return gag_fused_kernel(c, bm, bn); });
}

GemmPlan gag_tile_plan(const GemmAllGatherConfig& c, int64_t m, int ctas, const std::vector<gemm::TileCandidate>& cands,
                       FusedTile forced) {
  return fused_tile_plan(tile_problem(c, m), ctas, cands, forced);
}

std::optional<Calibration> gag_calibration(const GemmAllGatherConfig& cfg, int world) {
  return auto_calibration(cfg.calibration, to_string(cfg.mode), "GemmAllGatherConfig.calibration", "gemm-ag", cfg.quant,
                          cfg.scale_layout, cfg.out_dtype, cfg.n, cfg.k, world);
}

}  // namespace weave::fused

namespace weave {

GemmAllGatherPlan gemm_all_gather_plan(const GemmAllGatherConfig& config, int world, std::int64_t m,
                                       const FusedPlanMachine& machine) {
  const std::string bad = GemmAllGather::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "gemm_all_gather_plan: " << bad);
  WEAVE_EXPECT_ARG(m >= 1 && m <= config.m_max,
                   "gemm_all_gather_plan: argument 'm' must be in 1..m_max (" << config.m_max << "), got " << m);
  WEAVE_EXPECT_ARG(machine.num_sms >= 1, "gemm_all_gather_plan: FusedPlanMachine.num_sms must be >= 1, got "
                                             << machine.num_sms);
  const std::optional<fused::Calibration> cal = fused::gag_calibration(config, world);
  // The constructor's capabilities, from the machine described instead of a group.
  const fused::GagCapabilities caps = fused::gag_capabilities(config, fused::placement_of(machine, world,
                                                                fused::gag_fused_built(config)));
  return fused::gag_plan(fused::gag_plan_config(config, caps), world, m, fused::ctas_per_rank(machine.num_sms, config.max_sms), caps.fused, machine.nccl,
                         gemm_all_gather_window_bytes(config, world), cal ? &*cal : nullptr);
}

}  // namespace weave
