// weave::gemm_all_reduce_plan: the op's per-call planner without an op or a GPU, and the lookup of
// the fused kernel and the calibration table the op and the planner share.
#include <optional>
#include <string>

#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/params.hpp"
#include "fused/all_reduce/plan.hpp"
#include "gemm/dispatch.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave::fused {

const gemm::GemmKernelEntry<AllReduceParams>* gar_fused_kernel(const GemmAllReduceConfig& c) {
  return gemm::find_gemm_kernel<AllReduceParams>(c.quant, DType::kBF16, gemm::EpilogueKind::kAllReduce, kGarBlockM,
                                                 kGarBlockN, gemm::instance_scale_layout(c.quant, c.scale_layout),
                                                 gemm::SchedulerKind::kBandRound);
}

std::optional<Calibration> gar_calibration(const GemmAllReduceConfig& cfg, int world, ArLeg leg) {
  if (cfg.calibration.empty()) return std::nullopt;
  const std::string field = std::string(gar_op_name(leg)) + "Config.calibration";
  WEAVE_EXPECT_ARG(cfg.mode == GemmAllReduceMode::kAuto,
                   field << ": only mode auto consults a calibration (mode " << to_string(cfg.mode) << " is explicit)");
  return load_calibration_for(cfg.calibration, field, leg == ArLeg::kAllReduce ? "gemm-ar" : "gemm-rs", cfg.quant,
                              cfg.scale_layout, DType::kBF16, cfg.n, cfg.k, world);
}

}  // namespace weave::fused

namespace weave {

GemmAllReducePlan gemm_all_reduce_plan(const GemmAllReduceConfig& config, int world, std::int64_t m,
                                       const FusedPlanMachine& machine) {
  const std::string bad = GemmAllReduce::validate(config, world);
  WEAVE_EXPECT_ARG(bad.empty(), "gemm_all_reduce_plan: " << bad);
  WEAVE_EXPECT_ARG(m >= 1 && m <= config.m_max,
                   "gemm_all_reduce_plan: argument 'm' must be in 1..m_max (" << config.m_max << "), got " << m);
  WEAVE_EXPECT_ARG(machine.num_sms >= 1, "gemm_all_reduce_plan: FusedPlanMachine.num_sms must be >= 1, got "
                                             << machine.num_sms);
  const std::optional<fused::Calibration> cal = fused::gar_calibration(config, world);
  // The constructor's capabilities, from the machine described instead of a group.
  const fused::GarCapabilities caps = fused::gar_capabilities(config, fused::placement_of(machine, world,
                                                                fused::gar_fused_kernel(config) != nullptr));
  return fused::gar_plan(fused::gar_plan_config(config, caps), world, m, fused::ctas_per_rank(machine.num_sms, config.max_sms), caps.fused, machine.nccl,
                         gemm_all_reduce_window_bytes(config, world), cal ? &*cal : nullptr);
}

}  // namespace weave
