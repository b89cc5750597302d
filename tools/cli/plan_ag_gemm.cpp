// `weave plan ag-gemm`: what weave::AllGatherGemm would run for each m rows per rank, and why: the
// same public planner the op runs per call (weave::all_gather_gemm_plan, with --sms CTAs per rank,
// one rank per GPU in one NVLink domain, an NCCL communicator assumed), plus the window it would
// allocate. The fused mode, fused-ce, is modelled beside the split modes (fused_us) where it can run
// (bf16, ptpc, blockscale with bf16 out, W > 1); auto takes it only from a calibration table
// (--calibration), so there is no --no-fused. This file is the operator's trait; the fused-plan
// engine (plan_fused_engine.hpp) does the rest.
#include <optional>
#include <string>
#include <vector>

#include "cli/ag_gemm_options.hpp"
#include "cli/plan_fused_engine.hpp"
#include "cli/registry.hpp"
#include "fused/ag_gemm/plan.hpp"
#include "fused/all_gather/plan.hpp"

namespace weave::cli::fused_plan {
namespace {

class AgGemmPlanTrait final : public OpPlanTrait<AgGemmOptions, AllGatherGemmConfig> {
 public:
  static void add_shape_options(CLI::App& app, AgGemmOptions& o) {
    add_ag_gemm_options(app, o, /*with_layout=*/true, /*with_mode=*/true);
  }
  AgGemmPlanTrait(const AgGemmOptions& options, const FusedPlanOptions& o)
      : OpPlanTrait(options, o, ag_gemm_shapes, ag_gemm_config) {
    shape_.out = cfg_.out_dtype;
    shape_.mode_needs_fused = cfg_.mode == AllGatherGemmMode::kFusedCe;
  }

  const char* name() const override { return "ag-gemm"; }
  std::string fused_kernel() const override {
    return fused::agm_fused_kernel_names(cfg_);
  }
  // fused-ce's time is shown where the planner models it (model_fused_us > 0); elsewhere the
  // column is "-" and the JSON rows have no model_fused_us, as for an op without a fused mode.
  std::string no_fused_mode() const override {
    if (!fused::agm_fused_ce_quant(cfg_.quant, cfg_.out_dtype))
      return "fused-ce runs quant bf16, ptpc and blockscale with bf16 output, not " +
             std::string(to_string(cfg_.quant)) + " -> " + std::string(to_string(cfg_.out_dtype)) +
             ": AllGatherGemm runs its gathers, then the GEMM";
    if (world_ == 1) return "world 1: nothing to gather, so nothing for fused-ce to overlap";
    return "";
  }
  // The op's model takes GemmAllGather's rates: one gather call's fixed cost per operand (rows, and
  // scales where A has them).
  PlanRates rates() const override { return plan_rates(fused::gag_rates(cfg_.quant)); }
  // planned_: the config with --calibration (a table naming fused-ce adds its words to the window).
  std::size_t window_bytes() const override { return all_gather_gemm_window_bytes(planned_, world_); }
  PlanRow plan(std::int64_t m, const FusedPlanMachine& machine) const override {
    const AllGatherGemmPlan p = all_gather_gemm_plan(planned_, world_, m, machine);
    return plan_row(p, {p.rows, p.bytes_per_peer, p.window_bytes});
  }
  const std::vector<PlanColumn>& columns() const override {
    static const std::vector<PlanColumn> kColumns = {
        {.header = "rows", .width = 7, .key = "rows"},
        {.header = "bytes/peer", .width = 12, .key = "bytes_per_peer", .bytes = true},
        {.header = "window", .width = 12, .key = "window_bytes", .bytes = true}};
    return kColumns;
  }

  const char* rates_source() const override { return "fused::gag_rates"; }
  const char* collective() const override { return "all-gather"; }
  std::string window_contents() const override {
    const bool scales = fused::agm_scale_row_bytes(cfg_) > 0;
    const bool split = world_ > 1 && (cfg_.mode == AllGatherGemmMode::kAuto || cfg_.mode == AllGatherGemmMode::kSplitLsa ||
                                      cfg_.mode == AllGatherGemmMode::kSplitCe);
    const std::optional<fused::Calibration> cal = fused::agm_calibration(planned_, world_);
    const bool fused_ce = fused::agm_capabilities(planned_, fused::world_only(world_), cal ? &*cal : nullptr).hosts_fused;
    return std::string("agm.a [world * m_max, K]") + (scales ? ", agm.sa (A's scales)" : "") +
           ", agm.out [world * m_max, N] and protocol words" +
           (fused_ce ? ", fused-ce's landed words (world x chunks)" : "") +
           (!split ? "" : scales ? ", the split all-gathers' regions (rows, scales)" : ", the split all-gather's regions");
  }
  std::string no_kernel_reason() const override {
    return "no fused-ce GEMM kernel for " + std::string(to_string(cfg_.quant)) + " -> " +
           std::string(to_string(cfg_.out_dtype)) + " in this build";
  }
  std::vector<std::string> table_notes() const override {
    return {std::string("# rows: the gathered GEMM's rows (world x m); bytes/peer: this rank's m rows of A and their "
                        "scales, sent to each peer (e4m3 plus scales in the fp8 modes, bf16 in bf16); fused_us: ") +
            (no_fused_mode().empty() ? "fused-ce's model (the pulls under its GEMM at the planner's tile, plus one chunk's pull and "
                                       "its enter / arrive kernels), whatever the mode; auto takes it only from --calibration"
                                     : "- (fused-ce cannot run here)")};
  }
};

void add_plan_ag_gemm(CLI::App& plan) {
  add_fused_plan<AgGemmPlanTrait>(
      plan,
      PlanHelp{
          .name = "ag-gemm",
          .description = "AllGatherGemm per m rows per rank: tile, waves, gathered rows, bytes per peer, window, "
                         "modelled times (split and fused-ce), the mode auto picks and why",
          .sms_note = "one rank per GPU; ",
          .no_fused_auto = "",       // auto takes fused-ce only from a table: no --no-fused
          .calibration_match = "quant, out dtype, N, K and world",
          .footer =
              "Every rank r holds A_r [m, K] (the same m on every rank) and the column shard B [N, K]; every rank\n"
              "computes [A_0; ...; A_{W-1}] B^T, [W m, N] (sequence parallelism's column-parallel layer): the\n"
              "activations are all-gathered first, as the GEMM consumes them (e4m3 plus their scales in the fp8\n"
              "modes, bf16 in bf16), then one GEMM of W m rows: weave::Gemm as its planner chooses for the\n"
              "rank's SMs (tile, routes, its K split where the tiles leave SMs idle: the reason names it;\n"
              "\"gemv\" in the tile column: the decode GEMV at W m <= 32).\n"
              "Not gemm-ag (GemmAllGather): that one computes its own rows first and gathers the output.\n"
              "Modes: gemm-only (the GEMM over the gathered region with only this rank's rows put there; nothing\n"
              "moves), split-nccl (ncclAllGather of A's rows and scales in one NCCL group, then the GEMM),\n"
              "split-lsa / split-ce (weave's lsa / copy-engine all-gather of the rows and of the scales, in place\n"
              "in the op's window, then the GEMM), auto (split-lsa; split-nccl across NVLink domains; gemm-only at\n"
              "world 1; with --calibration the mode the table measured fastest near m: split-lsa or fused-ce),\n"
              "fused-ce (copy engines pull the peers' rows and scales chunk by chunk into the window\n"
              "while the GEMM runs at the planner's tile, this rank's rows first, each tile waiting for the chunks it\n"
              "reads; bf16, ptpc and blockscale with bf16 out). Without --calibration auto never takes fused-ce\n"
              "(its model is not calibrated on NVLink), so there is no --no-fused; fused_us is fused-ce's model\n"
              "beside split_us wherever fused-ce can run (\"-\" elsewhere).\n"
              "A's scales travel with their rows: --scale-layout must be raw; mxfp8 needs K a multiple of 128.\n"
              "--preset LAYER.GEMM: a column-parallel or replicated GEMM of the decoder layer table (`weave plan\n"
              "--presets`: llama3-70b.qkv_proj, llama3-70b.gate_up_proj, deepseek-v3.qkv_a_proj, ...) sets N (the\n"
              "rank's column shard), K, the default --quant and bf16 out.\n"
              "Times are the planner's model (GemmAllGather's rates, fused::gag_rates; two gather calls where A\n"
              "has scales), not measurements."});
}

// A name with a hyphen, so not through WEAVE_REGISTER_PLAN_TOPIC (which pastes it into an identifier).
[[maybe_unused]] const bool kRegistered = register_plan_topic("ag-gemm", add_plan_ag_gemm);

}  // namespace
}  // namespace weave::cli::fused_plan
