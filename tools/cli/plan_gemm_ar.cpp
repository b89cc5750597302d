// `weave plan gemm-ar`: what weave::GemmAllReduce would run for each M, and why: the same
// fused::gar_plan the op runs per call (with ctas = --sms CTAs per rank, one rank per GPU, an NCCL
// communicator assumed, the fused kernel available where this build has it unless --no-fused),
// plus the window it would allocate. This file is the operator's trait; the fused-plan engine
// (plan_fused_engine.hpp) does the rest.
#include <string>
#include <vector>

#include "cli/gemm_ar_options.hpp"
#include "cli/plan_fused_engine.hpp"
#include "cli/plan_row_parallel_trait.hpp"
#include "cli/registry.hpp"
#include "fused/all_reduce/plan.hpp"

namespace weave::cli::fused_plan {
namespace {

class GemmArPlanTrait final : public RowParallelPlanTrait<GemmArOptions, GemmAllReduceConfig> {
 public:
  static void add_shape_options(CLI::App& app, GemmArOptions& o) {
    add_gemm_ar_options(app, o, /*with_layout=*/true, /*with_mode=*/true);
  }
  GemmArPlanTrait(const GemmArOptions& options, const FusedPlanOptions& o)
      : RowParallelPlanTrait(options, o, gemm_ar_shapes, gemm_ar_config) {
    shape_.mode_needs_fused = cfg_.mode == GemmAllReduceMode::kFused || cfg_.mode == GemmAllReduceMode::kFusedRs ||
                              cfg_.mode == GemmAllReduceMode::kFusedCe;
  }

  const char* name() const override { return "gemm-ar"; }
  std::string fused_kernel() const override {
    return fused::gar_fused_kernel_names(cfg_);
  }
  std::size_t window_bytes() const override { return gemm_all_reduce_window_bytes(cfg_, world_); }
  PlanRow plan(std::int64_t m, const FusedPlanMachine& machine) const override {
    const GemmAllReducePlan p = gemm_all_reduce_plan(planned_, world_, m, machine);
    PlanRow row = plan_row(p, {p.band_blocks, p.chunks, p.chunk_blocks, p.rounds, p.bytes_rs, p.bytes_ag, p.window_bytes});
    row.gemv = p.mode == GemmAllReduceMode::kDecode || p.mode == GemmAllReduceMode::kDecodeFused;
    return row;
  }
  const std::vector<PlanColumn>& columns() const override {
    static const std::vector<PlanColumn> kColumns = {
        {.header = "band_blocks", .width = 11, .key = "band_blocks", .tiled = true},
        {.header = "chunks", .width = 6, .key = "chunks", .tiled = true},
        {.header = "chunk_blocks", .width = 12, .key = "chunk_blocks", .tiled = true},
        {.header = "rounds", .width = 6, .key = "rounds", .tiled = true},
        {.header = "bytes_rs", .width = 11, .key = "bytes_rs", .bytes = true},
        {.header = "bytes_ag", .width = 11, .key = "bytes_ag", .bytes = true},
        {.header = "window", .width = 11, .key = "window_bytes", .bytes = true}};
    return kColumns;
  }

  const char* collective() const override { return "all-reduce"; }
  std::string window_contents() const override {
    std::string s = "gar.out [m_max, N] bf16 and protocol words";
    if (fused::gar_hosts_fused(cfg_.mode) && world_ > 1) s += ", the fused partials' staging [world][band rows][N] bf16";
    if (cfg_.mode == GemmAllReduceMode::kFusedCe && world_ > 1) s += ", fused-ce's copy-stream words";
    if (fused::gar_split_mode(cfg_.mode) != GemmAllReduceMode::kAuto && world_ > 1) s += ", the split all-reduce's regions";
    return s;
  }
  std::vector<std::string> table_notes() const override {
    return {"# bytes_rs / bytes_ag: what this rank sends on the reduce-scatter / all-gather leg, (world - 1) / world "
            "of the bf16 [M, N] each, the same for split and fused",
            "# gemv rows (modes decode and decode-fused): the decode GEMV runs them (`weave plan decode` shows its "
            "K split); the tile columns and fused_us are the tiled kernels' and do not apply"};
  }
};

void add_plan_gemm_ar(CLI::App& plan) {
  add_fused_plan<GemmArPlanTrait>(
      plan,
      PlanHelp{
          .name = "gemm-ar",
          .description = "GemmAllReduce per M: tile, waves, bands, chunks, rounds, bytes per leg, window, modelled "
                         "times, the mode auto picks and why",
          .sms_note = "one rank per GPU; ",
          .no_fused_auto = "split-lsa",
          .calibration_match = "quant, N, K_r and world",
          .footer =
              "Every rank r holds A_r [M, K_r] and B_r [N, K_r]; every rank receives sum_r A_r B_r^T, [M, N] bf16.\n"
              "Modes: gemm-only (this rank's partial alone, nothing moves), split-nccl (GEMM then ncclAllReduce),\n"
              "split-lsa / split-ce (GEMM then weave's lsa / copy-engine all-reduce, in place), fused (one kernel:\n"
              "rows are owned in bands, band d by rank d; a peer's band goes out as bf16 partials into the owner's\n"
              "staging, the owner sums them into its own band one round later and stores the result to every rank),\n"
              "auto (fused where the model says it pays, else split-lsa).\n"
              "Columns: band_blocks (row blocks per band), chunks (of the largest band, one flag each per leg),\n"
              "chunk_blocks (row blocks per chunk), rounds (chunks + 1), bytes_rs / bytes_ag (per rank, per leg).\n"
              "Times are the planner's model (fused::gar_rates), not measurements."});
}

// A name with a hyphen, so not through WEAVE_REGISTER_PLAN_TOPIC (which pastes it into an identifier).
[[maybe_unused]] const bool kRegistered = register_plan_topic("gemm-ar", add_plan_gemm_ar);

}  // namespace
}  // namespace weave::cli::fused_plan
