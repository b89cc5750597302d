// `weave plan gemm-ag`: what weave::GemmAllGather would run for each M per rank, and why: the
// same fused::gag_plan the op runs per call (with ctas = --sms, an NCCL communicator assumed, the
// fused kernel available where this build has it unless --no-fused), plus the window it would
// allocate. This file is the operator's trait; the fused-plan engine (plan_fused_engine.hpp) does the rest.
#include <string>
#include <vector>

#include "cli/gemm_ag_options.hpp"
#include "cli/plan_fused_engine.hpp"
#include "cli/registry.hpp"
#include "fused/all_gather/plan.hpp"

namespace weave::cli::fused_plan {
namespace {

class GemmAgPlanTrait final : public OpPlanTrait<GemmAgOptions, GemmAllGatherConfig> {
 public:
  static void add_shape_options(CLI::App& app, GemmAgOptions& o) {
    add_gemm_ag_options(app, o, /*with_layout=*/true, /*with_mode=*/true);
  }
  GemmAgPlanTrait(const GemmAgOptions& options, const FusedPlanOptions& o)
      : OpPlanTrait(options, o, gemm_ag_shapes, gemm_ag_config) {
    shape_.out = cfg_.out_dtype;
    shape_.mode_needs_fused = fused::gag_fused_mode(cfg_.mode);
  }

  const char* name() const override { return "gemm-ag"; }
  std::string fused_kernel() const override {
    return fused::gag_fused_kernel_names(cfg_);
  }
  PlanRates rates() const override { return plan_rates(fused::gag_rates(cfg_.quant)); }
  std::size_t window_bytes() const override { return gemm_all_gather_window_bytes(cfg_, world_); }
  PlanRow plan(std::int64_t m, const FusedPlanMachine& machine) const override {
    const GemmAllGatherPlan p = gemm_all_gather_plan(planned_, world_, m, machine);
    return plan_row(p, {p.chunks, p.bytes_per_peer, p.window_bytes, p.gemm_split_k, p.gemm_gemv ? 1 : 0});
  }
  const std::vector<PlanColumn>& columns() const override {
    static const std::vector<PlanColumn> kColumns = {
        {.header = "chunks", .width = 6, .key = "chunks"},
        {.header = "bytes/peer", .width = 12, .key = "bytes_per_peer", .bytes = true},
        {.header = "window", .width = 12, .key = "window_bytes", .bytes = true},
        {.header = "ksplit", .width = 6, .key = "gemm_split_k"},
        {.header = "gemv", .width = 4, .key = "gemm_gemv"}};
    return kColumns;
  }

  const char* rates_source() const override { return "fused::gag_rates"; }
  const char* collective() const override { return "all-gather"; }
  std::string window_contents() const override {
    const bool split = fused::gag_split_mode(cfg_.mode) != GemmAllGatherMode::kAuto && world_ > 1;
    const bool partials = fused::gag_partials_bytes(cfg_, fused::kGagBoundCtas) > 0;
    return std::string("gag.out [world * m_max, N] and protocol words") + (split ? ", the split all-gather's regions" : "") +
           (partials ? ", the split GEMM's K-split partials" : "");
  }
  std::string no_kernel_reason() const override {
    return "no fused kernel for " + std::string(to_string(cfg_.quant)) + " -> " +
           std::string(to_string(cfg_.out_dtype)) + " in this build";
  }
};

void add_plan_gemm_ag(CLI::App& plan) {
  add_fused_plan<GemmAgPlanTrait>(
      plan,
      PlanHelp{
          .name = "gemm-ag",
          .description = "GemmAllGather per M: tile, waves, chunks, bytes, window, modelled times, the mode auto picks "
                         "and why",
          .sms_note = "",
          .no_fused_auto = "a split mode",
          .calibration_match = "quant, out dtype, N, K and world",
          .footer =
              "Modes: gemm-only (the GEMM alone, nothing moves), split-nccl (GEMM then ncclAllGather), split-lsa /\n"
              "split-ce (GEMM then weave's lsa / copy-engine all-gather, in place), fused-lsa (one kernel: every tile\n"
              "stored to this rank's rows here and at every peer), fused-ce (the same kernel storing only here; each\n"
              "chunk's flag triggers the peers' copy-engine pulls of it while the GEMM runs), auto (fused-lsa where\n"
              "the model says it pays; never fused-ce).\n"
              "ksplit / gemv: the GEMM of gemm-only and the split modes where weave::Gemm would not run one pass of\n"
              "whole tiles (small M, long K): its K split (ksplit > 1) or its decode GEMV (gemv 1); the fused modes\n"
              "always run the tile.\n"
              "Times are the planner's model (fused::gag_rates), not measurements."});
}

// A name with a hyphen, so not through WEAVE_REGISTER_PLAN_TOPIC (which pastes it into an identifier).
[[maybe_unused]] const bool kRegistered = register_plan_topic("gemm-ag", add_plan_gemm_ag);

}  // namespace
}  // namespace weave::cli::fused_plan
