// `weave plan gemm-rs`: what weave::GemmReduceScatter would run for each M (the total rows), and
// why: the same public planner the op runs per call (weave::gemm_reduce_scatter_plan, with
// --sms CTAs per rank, one rank per GPU, an NCCL communicator assumed, the fused kernel available
// where this build has it unless --no-fused), plus the window it would allocate. This file is
// the operator's trait; the fused-plan engine (plan_fused_engine.hpp) does the rest.
#include <string>
#include <vector>

#include "cli/gemm_rs_options.hpp"
#include "cli/plan_fused_engine.hpp"
#include "cli/plan_row_parallel_trait.hpp"
#include "cli/registry.hpp"
#include "fused/all_reduce/plan.hpp"
#include "fused/reduce_scatter/impl.hpp"

namespace weave::cli::fused_plan {
namespace {

class GemmRsPlanTrait final : public RowParallelPlanTrait<GemmRsOptions, GemmReduceScatterConfig> {
 public:
  static void add_shape_options(CLI::App& app, GemmRsOptions& o) {
    add_gemm_rs_options(app, o, /*with_layout=*/true, /*with_mode=*/true);
  }
  GemmRsPlanTrait(const GemmRsOptions& options, const FusedPlanOptions& o)
      : RowParallelPlanTrait(options, o, gemm_rs_shapes, gemm_rs_config) {
    shape_.mode_needs_fused = cfg_.mode == GemmReduceScatterMode::kFused;
  }

  const char* name() const override { return "gemm-rs"; }
  std::string fused_kernel() const override {
    return fused::gar_fused_kernel_names(fused::grs_ar_config(cfg_));  // GemmAllReduce's kernel, no gather
  }
  std::size_t window_bytes() const override { return gemm_reduce_scatter_window_bytes(cfg_, world_); }
  PlanRow plan(std::int64_t m, const FusedPlanMachine& machine) const override {
    const GemmReduceScatterPlan p = gemm_reduce_scatter_plan(planned_, world_, m, machine);
    return plan_row(p, {m / world_, p.band_blocks, p.chunks, p.chunk_blocks, p.rounds, p.bytes_rs, p.window_bytes});
  }
  const std::vector<PlanColumn>& columns() const override {
    static const std::vector<PlanColumn> kColumns = {
        {.header = "rows/rank", .width = 9, .key = "rows_per_rank"},
        {.header = "band_blocks", .width = 11, .key = "band_blocks"},
        {.header = "chunks", .width = 6, .key = "chunks"},
        {.header = "chunk_blocks", .width = 12, .key = "chunk_blocks"},
        {.header = "rounds", .width = 6, .key = "rounds"},
        {.header = "bytes_rs", .width = 11, .key = "bytes_rs", .bytes = true},
        {.header = "window", .width = 11, .key = "window_bytes", .bytes = true}};
    return kColumns;
  }

  const char* collective() const override { return "reduce-scatter"; }
  std::string window_contents() const override {
    const GemmAllReduceMode mode = fused::grs_ar_mode(cfg_.mode);
    std::string s = "grs.out [m_max, N] bf16 (this rank's partial; its band is the output) and protocol words";
    if (fused::gar_hosts_fused(mode) && world_ > 1) s += ", the fused partials' staging [world][band rows][N] bf16";
    if (fused::gar_split_mode(mode) != GemmAllReduceMode::kAuto && world_ > 1) s += ", the split reduce-scatter's regions";
    return s;
  }
  std::vector<std::string> table_notes() const override {
    return {"# rows/rank: the M / world rows rank r receives (rows [r M/W, (r+1) M/W)); bytes_rs: what this rank sends, "
            "(world - 1) / world of its bf16 [M, N] partial, the same for split and fused; fused needs M a multiple of "
            "world x " + std::to_string(fused::kGrsFusedRows) + " (bands of whole tiles)"};
  }
};

void add_plan_gemm_rs(CLI::App& plan) {
  add_fused_plan<GemmRsPlanTrait>(
      plan,
      PlanHelp{
          .name = "gemm-rs",
          .description = "GemmReduceScatter per M (the total rows, a multiple of --world): tile, waves, rows per rank, "
                         "bands, chunks, rounds, bytes sent, window, modelled times, the mode auto picks and why",
          .sms_note = "one rank per GPU; ",
          .no_fused_auto = "split-lsa",
          .calibration_match = "quant, N, K_r and world",
          .footer =
              "Every rank r holds A_r [M, K_r] and B_r [N, K_r]; rank r receives rows [r M/W, (r+1) M/W) of\n"
              "sum_q A_q B_q^T, [M/W, N] bf16 (sequence parallelism's row-parallel layer). M is the total rows and\n"
              "must be a multiple of the world W; mode fused needs a multiple of W x 128 (its bands are whole tiles).\n"
              "Modes: gemm-only (this rank's partial rows alone, nothing moves), split-nccl (GEMM then\n"
              "ncclReduceScatter), split-lsa / split-ce (GEMM then weave's lsa / copy-engine reduce-scatter, in\n"
              "place), fused (one kernel: band d is rank d's rows; a peer's band goes out as bf16 partials into the\n"
              "owner's staging, the owner sums them into its own band one round later), auto (fused where M allows it\n"
              "and the model says it pays, else split-lsa).\n"
              "Columns: rows/rank (M / W), band_blocks (row blocks per band), chunks (per band, one flag each),\n"
              "chunk_blocks (row blocks per chunk), rounds (chunks + 1), bytes_rs (per rank).\n"
              "--preset takes the row-parallel (gemm-ar) layers; the preset's M list is rounded up to a multiple of W.\n"
              "Times are the planner's model (fused::gar_rates), not measurements."});
}

// A name with a hyphen, so not through WEAVE_REGISTER_PLAN_TOPIC (which pastes it into an identifier).
[[maybe_unused]] const bool kRegistered = register_plan_topic("gemm-rs", add_plan_gemm_rs);

}  // namespace
}  // namespace weave::cli::fused_plan
