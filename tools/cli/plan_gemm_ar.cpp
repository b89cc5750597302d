// `weave plan gemm-ar`: what weave::GemmAllReduce would run for each M, and why: the same
// fused::gar_plan the op runs per call (with ctas = --sms CTAs per rank, one rank per GPU, an NCCL
// communicator assumed, the fused kernel available where this build has it unless --no-fused),
// plus the window it would allocate. Pure planning: runs on a machine without a GPU.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "cli/gemm_ar_options.hpp"
#include "cli/registry.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/params.hpp"
#include "fused/all_reduce/plan.hpp"
#include "gemm/planner.hpp"
#include "gemm/dispatch.hpp"
#include "weave/error.hpp"

namespace weave::cli {
namespace {

struct PlanGemmArOptions {
  GemmArOptions shape;
  int world = 2;
  int sms = 132;
  bool no_fused = false;
  std::string json_path;
  std::string calibration;  // a `weave bench gemm-ar --calibrate` table auto consults
};

using gemm::kMaxSms;

std::string window_contents(const GemmAllReduceConfig& cfg, int world) {
  std::string s = "gar.out [m_max, N] bf16 and protocol words";
  if (fused::gar_hosts_fused(cfg.mode) && world > 1) s += ", the fused partials' staging [world][band rows][N] bf16";
  if (cfg.mode == GemmAllReduceMode::kFusedCe && world > 1) s += ", fused-ce's copy-stream words";
  if (fused::gar_split_mode(cfg.mode) != GemmAllReduceMode::kAuto && world > 1) s += ", the split all-reduce's regions";
  return s;
}

// Exit status: 0 planned, 1 an explicit mode this build or these options cannot run (printed),
// 2 bad usage (thrown before anything is printed).
int run_plan_gemm_ar(const PlanGemmArOptions& o) {
  check_output_file("--json", o.json_path);
  const GemmArOptions shape = gemm_ar_shapes(o.shape, o.world).front();  // --preset filled in
  const GemmAllReduceConfig cfg = gemm_ar_config(shape, o.world);
  // Checked here so a bad table is refused naming --calibration (exit 2); the planner reads it again.
  static_cast<void>(calibration_option(o.calibration, cfg.mode == GemmAllReduceMode::kAuto, "gemm-ar", cfg.quant,
                                       cfg.scale_layout, DType::kBF16, cfg.n, cfg.k, o.world));
  const auto* fused = fused::gar_fused_kernel(cfg);
  const bool fused_available = fused != nullptr && !o.no_fused;
  const fused::GarRates rates = fused::gar_rates(cfg.quant);
  const std::string quant(to_string(cfg.quant));
  const std::string chunks = cfg.chunks > 0 ? std::to_string(cfg.chunks) : "planner's";

  if (!shape.preset.empty()) {
    const ModelPreset& preset = model_preset(shape.preset);
    std::printf("%s\n", preset_line(preset, shard_model_preset(preset, o.world, cfg.quant)).c_str());
  }
  std::printf("gemm-ar: n=%lld k=%lld (K_r, per rank) %s%s -> bf16, world %d, mode %s, sms %d, m_max %lld, chunks %s%s\n",
              static_cast<long long>(cfg.n), static_cast<long long>(cfg.k), quant.c_str(),
              cfg.quant == ScaleMode::kMxfp8 || cfg.quant == ScaleMode::kBlockscale ? (" (" + std::string(to_string(cfg.scale_layout)) + " scales)").c_str() : "",
              o.world, std::string(to_string(cfg.mode)).c_str(), o.sms, static_cast<long long>(cfg.m_max), chunks.c_str(),
              cfg.exact_own ? ", exact own term (fused not bitwise equal to split)" : "");
  std::printf("fused kernel: %s\n", fused == nullptr ? "not in this build" :
                                    o.no_fused ? (std::string(fused->name) + " (taken as unavailable: --no-fused)").c_str()
                                               : fused->name);
  std::printf("model (fused::gar_rates): GEMM %.0f TFLOP/s, links %.0f GB/s per direction, all-reduce call %.0f us; "
              "an NCCL communicator is assumed (split-nccl available)\n",
              rates.gemm_tflops, rates.link_gbps, rates.comm_latency_us);
  std::printf("window per rank: %s (%s)\n", human_bytes(gemm_all_reduce_window_bytes(cfg, o.world)).c_str(),
              window_contents(cfg, o.world).c_str());
  std::printf("%7s %-7s %6s %6s %5s %11s %6s %12s %6s %11s %11s %11s %9s %9s %9s %9s  %-10s %s\n", "m", "tile", "tiles",
              "waves", "grid", "band_blocks", "chunks", "chunk_blocks", "rounds", "bytes_rs", "bytes_ag", "window",
              "gemm_us", "comm_us", "split_us", "fused_us", "mode", "reason");
  GemmAllReduceConfig planned = cfg;  // the public planner loads the (already checked) calibration itself
  planned.calibration = o.calibration;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::int64_t m : shape.ms) {
    const GemmAllReducePlan p =
        gemm_all_reduce_plan(planned, o.world, m, FusedPlanMachine{.num_sms = o.sms, .fused_kernels = !o.no_fused});
    const std::string tile = std::to_string(p.block_m) + "x" + std::to_string(p.block_n);
    std::printf("%7lld %-7s %6lld %6.2f %5d %11d %6d %12d %6d %11s %11s %11s %9.1f %9.1f %9.1f %9.1f  %-10s %s\n",
                static_cast<long long>(m), tile.c_str(), static_cast<long long>(p.tiles), p.waves, p.grid, p.band_blocks,
                p.chunks, p.chunk_blocks, p.rounds, human_bytes(static_cast<std::uint64_t>(p.bytes_rs)).c_str(),
                human_bytes(static_cast<std::uint64_t>(p.bytes_ag)).c_str(),
                human_bytes(static_cast<std::uint64_t>(p.window_bytes)).c_str(), p.model_gemm_us, p.model_comm_us,
                p.model_split_us, p.model_fused_us, std::string(to_string(p.mode)).c_str(), p.reason.c_str());
    rows.push_back({{"m", m}, {"block_m", p.block_m}, {"block_n", p.block_n}, {"tiles", p.tiles}, {"waves", p.waves},
                    {"grid", p.grid}, {"band_blocks", p.band_blocks}, {"chunks", p.chunks},
                    {"chunk_blocks", p.chunk_blocks}, {"rounds", p.rounds}, {"bytes_rs", p.bytes_rs},
                    {"bytes_ag", p.bytes_ag}, {"window_bytes", p.window_bytes}, {"model_gemm_us", p.model_gemm_us},
                    {"model_comm_us", p.model_comm_us}, {"model_split_us", p.model_split_us},
                    {"model_fused_us", p.model_fused_us}, {"mode", to_string(p.mode)}, {"reason", p.reason}});
  }
  std::printf("# bytes_rs / bytes_ag: what this rank sends on the reduce-scatter / all-gather leg, (world - 1) / world "
              "of the bf16 [M, N] each, the same for split and fused\n");
  std::printf("# model only (no GPU): the us columns come from the rates above, not from a measurement; "
              "`weave bench gemm-ar` measures\n");
  // An explicit mode the op would refuse here (kUnavailable at construction): say so, exit 1.
  std::string refused;
  if ((cfg.mode == GemmAllReduceMode::kFused || cfg.mode == GemmAllReduceMode::kFusedRs ||
       cfg.mode == GemmAllReduceMode::kFusedCe) && !fused_available)
    refused = fused == nullptr ? "no fused kernel for " + quant + " in this build" : "--no-fused";
  if (!refused.empty())
    std::printf("mode %s: the op would refuse it (kUnavailable): %s\n", std::string(to_string(cfg.mode)).c_str(),
                refused.c_str());
  if (!o.json_path.empty()) {
    nlohmann::json doc = {{"topic", "gemm-ar"},
                          {"preset", shape.preset},
                          {"n", cfg.n},
                          {"k_per_rank", cfg.k},
                          {"m_max", cfg.m_max},
                          {"quant", quant},
                          {"scale_layout", to_string(cfg.scale_layout)},
                          {"out", "bf16"},
                          {"world", o.world},
                          {"mode", to_string(cfg.mode)},
                          {"chunks", cfg.chunks},
                          {"exact_own", cfg.exact_own},
                          {"sms", o.sms},
                          {"fused_kernel", fused ? fused->name : ""},
                          {"fused_available", fused_available},
                          {"rates", {{"gemm_tflops", rates.gemm_tflops}, {"link_gbps", rates.link_gbps},
                                     {"comm_latency_us", rates.comm_latency_us}}},
                          {"rows", rows}};
    std::ofstream f(o.json_path);
    WEAVE_EXPECT_ARG(f.good(), "--json '" << o.json_path << "': cannot open for writing");
    f << doc.dump(2) << "\n";
  }
  return refused.empty() ? 0 : 1;
}

void add_plan_gemm_ar(CLI::App& plan) {
  auto opts = std::make_shared<PlanGemmArOptions>();
  CLI::App* c = plan.add_subcommand(
      "gemm-ar",
      "GemmAllReduce per M: tile, waves, bands, chunks, rounds, bytes per leg, window, modelled times, the mode auto "
      "picks and why");
  add_gemm_ar_options(*c, opts->shape, /*with_layout=*/true, /*with_mode=*/true);
  c->add_option("--world", opts->world, "ranks (1..8)")->capture_default_str();
  c->add_option("--sms", opts->sms, "CTAs per rank to plan for (one rank per GPU; H100/H200: 132 SMs)")
      ->check(int_range(1, kMaxSms))->capture_default_str();
  c->add_flag("--no-fused", opts->no_fused, "plan as if the fused kernel were unavailable (auto then picks split-lsa)");
  c->add_option("--json", opts->json_path, "also write the rows as JSON to FILE (checked before planning)");
  c->add_option("--calibration", opts->calibration,
                "auto takes the mode measured fastest per M in FILE (written by `weave bench gemm-ar --calibrate`; "
                "must be for this quant, N, K_r and world)");
  c->footer(
      "Every rank r holds A_r [M, K_r] and B_r [N, K_r]; every rank receives sum_r A_r B_r^T, [M, N] bf16.\n"
      "Modes: gemm-only (this rank's partial alone, nothing moves), split-nccl (GEMM then ncclAllReduce),\n"
      "split-lsa / split-ce (GEMM then weave's lsa / copy-engine all-reduce, in place), fused (one kernel:\n"
      "rows are owned in bands, band d by rank d; a peer's band goes out as bf16 partials into the owner's\n"
      "staging, the owner sums them into its own band one round later and stores the result to every rank),\n"
      "auto (fused where the model says it pays, else split-lsa).\n"
      "Columns: band_blocks (row blocks per band), chunks (of the largest band, one flag each per leg),\n"
      "chunk_blocks (row blocks per chunk), rounds (chunks + 1), bytes_rs / bytes_ag (per rank, per leg).\n"
      "Times are the planner's model (fused::gar_rates), not measurements.");
  c->callback([opts] { exit_code() = run_plan_gemm_ar(*opts); });
}

// A name with a hyphen, so not through WEAVE_REGISTER_PLAN_TOPIC (which pastes it into an identifier).
[[maybe_unused]] const bool kRegistered = register_plan_topic("gemm-ar", add_plan_gemm_ar);

}  // namespace
}  // namespace weave::cli
