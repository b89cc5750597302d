// weave::gemm_all_reduce_plan: the op's per-call planner without an op or a GPU, and the lookup of
// the fused kernel and the calibration table the op and the planner share.
#include <algorithm>
#include <optional>
#include <string>

#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/params.hpp"
#include "fused/all_reduce/plan.hpp"
#include "gemm/dispatch.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave::fused {

const gemm::GemmKernelEntry<AllReduceParams>* gar_fused_kernel(const GemmAllReduceConfig& c, int block_m, int block_n) {
  return gemm::find_gemm_kernel<AllReduceParams>(c.quant, DType::kBF16, gemm::EpilogueKind::kAllReduce, block_m,
                                                 block_n, gemm::instance_scale_layout(c.quant, c.scale_layout),
                                                 gemm::SchedulerKind::kBandRound);
}

namespace {
GemmProblem tile_problem(const GemmAllReduceConfig& c, int64_t m) {
  return GemmProblem{.m = m, .n = c.n, .k = c.k, .mode = c.quant, .scale_layout = c.scale_layout, .out_dtype = DType::kBF16};
}
}  // namespace

std::vector<gemm::TileCandidate> gar_tile_candidates(const GemmAllReduceConfig& c) {
  return fused_tile_candidates(tile_problem(c, c.m_max),
                               [&](int bm, int bn) { return gar_fused_kernel(c, bm, bn) != nullptr; });
}

bool gar_fused_built(const GemmAllReduceConfig& c) {
  return any_fused_kernel(gar_tile_candidates(c), [&](int bm, int bn) { return gar_fused_kernel(c, bm, bn); });
}

std::string gar_fused_kernel_names(const GemmAllReduceConfig& c) {
  return fused_kernel_names(gar_tile_candidates(c), [&](int bm, int bn) { return gar_fused_kernel(c, bm, bn); });
}

GemmPlan gar_tile_plan(const GemmAllReduceConfig& c, int world, int64_t m, int ctas,
                       const std::vector<gemm::TileCandidate>& cands, FusedTile forced, ArLeg leg) {
  // GemmReduceScatter's fused bands must be whole tiles: where its fused mode can run m, only tiles
  // whose rows divide m / world (a rule, not a preference: split runs the same tile).
  const bool whole_bands = leg == ArLeg::kReduceScatter && world > 1 && grs_fused_fits(m, world);
  auto allowed = [&](const gemm::TileCandidate& t) { return !whole_bands || m % (int64_t(world) * t.block_m) == 0; };
  // The chunks of the largest band of the fused schedule at this tile (ar_schedule's, with the
  // planner's chunk count); 0 where the tile is not allowed or the planner would not offer it at
  // this m (64-row tiles).
  auto band_chunks = [&](const gemm::TileCandidate& t) -> int64_t {
    if (!allowed(t) || (t.block_m == 64 && m > gemm::kHalfRowTileMaxM)) return 0;
    return ar_schedule(m, c.n, t.block_m, t.block_n, world, 0, gar_chunks(c, m, ctas, t.block_m, t.block_n)).max_chunks;
  };
  // Tiles whose bands pipeline kGarMinBandChunks chunks, else any the op may run, else the
  // planner's pick; a kept tile only where the GEMM model costs it at most kGarPipelinedTileMaxCost
  // times the planner's free pick among the allowed tiles.
  const GemmProblem p = tile_problem(c, m);
  const GemmPlan free = fused_tile_plan(p, ctas, cands, forced, allowed);
  if (forced.forced()) return free;
  int64_t need = 1;
  for (const auto& t : cands) need = std::max<int64_t>(need, std::min<int64_t>(band_chunks(t), kGarMinBandChunks));
  const GemmPlan kept =
      fused_tile_plan(p, ctas, cands, {}, [&](const gemm::TileCandidate& t) { return band_chunks(t) >= need; });
  const double kept_cost = gemm::tile_cost(p, ctas, kept.block_m, kept.block_n);
  return kept_cost <= kGarPipelinedTileMaxCost * gemm::tile_cost(p, ctas, free.block_m, free.block_n) ? kept : free;
}

std::optional<Calibration> gar_calibration(const GemmAllReduceConfig& cfg, int world, ArLeg leg) {
  return auto_calibration(cfg.calibration, to_string(cfg.mode), std::string(gar_op_name(leg)) + "Config.calibration",
                          leg == ArLeg::kAllReduce ? "gemm-ar" : "gemm-rs", cfg.quant, cfg.scale_layout, DType::kBF16,
                          cfg.n, cfg.k, world);
}

bool gar_hosts_decode_fused(const GemmAllReduceConfig& cfg, int world, ArLeg leg, const Calibration* cal) {
  if (world <= 1 || leg != ArLeg::kAllReduce) return false;
  if (cfg.mode == GemmAllReduceMode::kDecodeFused) return true;
  return cfg.mode == GemmAllReduceMode::kAuto && cal != nullptr &&
         cal->names(to_string(GemmAllReduceMode::kDecodeFused)) && gar_decode_unsupported_reason(cfg, 1).empty();
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
                                                                fused::gar_fused_built(config)));
  // decode-fused's one-wave residency is the device's; the plan of a described machine assumes it fits.
  return fused::gar_plan(fused::gar_plan_config(config, caps), world, m, fused::ctas_per_rank(machine.num_sms, config.max_sms), caps.fused, machine.nccl,
                         fused::gar_window_bytes(config, world, cal ? &*cal : nullptr), cal ? &*cal : nullptr,
                         fused::ArLeg::kAllReduce,
                         fused::gar_hosts_decode_fused(config, world, fused::ArLeg::kAllReduce, cal ? &*cal : nullptr));
}

}  // namespace weave
