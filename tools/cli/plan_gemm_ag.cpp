// `weave plan gemm-ag`: what weave::GemmAllGather would run for each M per rank, and why: the
// same fused::gag_plan the op runs per call (with ctas = --sms, an NCCL communicator assumed, the
// fused kernel available where this build has it unless --no-fused), plus the window it would
// allocate. Pure planning: runs on a machine without a GPU.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "cli/gemm_ag_options.hpp"
#include "cli/registry.hpp"
#include "common/check.hpp"
#include "fused/all_gather/params.hpp"
#include "fused/all_gather/plan.hpp"
#include "gemm/planner.hpp"
#include "gemm/dispatch.hpp"
#include "weave/error.hpp"

namespace weave::cli {
namespace {

struct PlanGemmAgOptions {
  GemmAgOptions shape;
  int world = 2;
  int sms = 132;
  bool no_fused = false;
  std::string json_path;
  std::string calibration;  // a `weave bench gemm-ag --calibrate` table auto consults
};

using gemm::kMaxSms;

// Exit status: 0 planned, 1 an explicit mode this build or these options cannot run (printed),
// 2 bad usage (thrown before anything is printed).
int run_plan_gemm_ag(const PlanGemmAgOptions& o) {
  check_output_file("--json", o.json_path);
  const GemmAgOptions shape = gemm_ag_shapes(o.shape, o.world).front();  // --preset filled in
  const GemmAllGatherConfig cfg = gemm_ag_config(shape, o.world);
  // Checked here so a bad table is refused naming --calibration (exit 2); the planner reads it again.
  static_cast<void>(calibration_option(o.calibration, cfg.mode == GemmAllGatherMode::kAuto, "gemm-ag", cfg.quant,
                                       cfg.scale_layout, cfg.out_dtype, cfg.n, cfg.k, o.world));
  const auto* fused = fused::gag_fused_kernel(cfg);
  const bool fused_available = fused != nullptr && !o.no_fused;
  const fused::GagRates rates = fused::gag_rates(cfg.quant);
  const std::string quant(to_string(cfg.quant)), out(to_string(cfg.out_dtype));

  if (!shape.preset.empty()) {
    const ModelPreset& preset = model_preset(shape.preset);
    std::printf("%s\n", preset_line(preset, shard_model_preset(preset, o.world, cfg.quant)).c_str());
  }
  std::printf("gemm-ag: n=%lld k=%lld %s%s -> %s, world %d, mode %s, sms %d, m_max %lld\n",
              static_cast<long long>(cfg.n), static_cast<long long>(cfg.k), quant.c_str(),
              cfg.quant == ScaleMode::kMxfp8 || cfg.quant == ScaleMode::kBlockscale ? (" (" + std::string(to_string(cfg.scale_layout)) + " scales)").c_str() : "",
              out.c_str(), o.world, std::string(to_string(cfg.mode)).c_str(), o.sms, static_cast<long long>(cfg.m_max));
  std::printf("fused kernel: %s\n", fused == nullptr ? "not in this build" :
                                    o.no_fused ? (std::string(fused->name) + " (taken as unavailable: --no-fused)").c_str()
                                               : fused->name);
  std::printf("model (fused::gag_rates): GEMM %.0f TFLOP/s, links %.0f GB/s per direction, all-gather call %.0f us; "
              "an NCCL communicator is assumed (split-nccl available)\n",
              rates.gemm_tflops, rates.link_gbps, rates.comm_latency_us);
  std::printf("window per rank: %s (gag.out [world * m_max, N] and protocol words%s)\n",
              human_bytes(gemm_all_gather_window_bytes(cfg, o.world)).c_str(),
              fused::gag_split_mode(cfg.mode) != GemmAllGatherMode::kAuto && o.world > 1 ? ", the split all-gather's regions" : "");
  std::printf("%7s %-7s %6s %6s %5s %6s %12s %12s %9s %9s %9s %9s  %-10s %s\n", "m", "tile", "tiles", "waves", "grid",
              "chunks", "bytes/peer", "window", "gemm_us", "comm_us", "split_us", "fused_us", "mode", "reason");
  GemmAllGatherConfig planned = cfg;  // the public planner loads the (already checked) calibration itself
  planned.calibration = o.calibration;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::int64_t m : shape.ms) {
    const GemmAllGatherPlan p =
        gemm_all_gather_plan(planned, o.world, m, FusedPlanMachine{.num_sms = o.sms, .fused_kernels = !o.no_fused});
    const std::string tile = std::to_string(p.block_m) + "x" + std::to_string(p.block_n);
    std::printf("%7lld %-7s %6lld %6.2f %5d %6d %12s %12s %9.1f %9.1f %9.1f %9.1f  %-10s %s\n", static_cast<long long>(m),
                tile.c_str(), static_cast<long long>(p.tiles), p.waves, p.grid, p.chunks,
                human_bytes(static_cast<std::uint64_t>(p.bytes_per_peer)).c_str(),
                human_bytes(static_cast<std::uint64_t>(p.window_bytes)).c_str(), p.model_gemm_us, p.model_comm_us,
                p.model_split_us, p.model_fused_us, std::string(to_string(p.mode)).c_str(), p.reason.c_str());
    rows.push_back({{"m", m}, {"block_m", p.block_m}, {"block_n", p.block_n}, {"tiles", p.tiles}, {"waves", p.waves},
                    {"grid", p.grid}, {"chunks", p.chunks}, {"bytes_per_peer", p.bytes_per_peer},
                    {"window_bytes", p.window_bytes}, {"model_gemm_us", p.model_gemm_us},
                    {"model_comm_us", p.model_comm_us}, {"model_split_us", p.model_split_us},
                    {"model_fused_us", p.model_fused_us}, {"mode", to_string(p.mode)}, {"reason", p.reason}});
  }
  std::printf("# model only (no GPU): the us columns come from the rates above, not from a measurement; "
              "`weave bench gemm-ag` measures\n");
  // An explicit mode the op would refuse here (kUnavailable at construction): say so, exit 1.
  std::string refused;
  const bool fused_mode = cfg.mode == GemmAllGatherMode::kFusedLsa || cfg.mode == GemmAllGatherMode::kFusedCe;
  if (fused_mode && !fused_available)
    refused = fused == nullptr ? "no fused kernel for " + quant + " -> " + out + " in this build" : "--no-fused";
  if (!refused.empty())
    std::printf("mode %s: the op would refuse it (kUnavailable): %s\n", std::string(to_string(cfg.mode)).c_str(),
                refused.c_str());
  if (!o.json_path.empty()) {
    nlohmann::json doc = {{"topic", "gemm-ag"},
                          {"preset", shape.preset},
                          {"n", cfg.n},
                          {"k", cfg.k},
                          {"m_max", cfg.m_max},
                          {"quant", quant},
                          {"scale_layout", to_string(cfg.scale_layout)},
                          {"out", out},
                          {"world", o.world},
                          {"mode", to_string(cfg.mode)},
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

void add_plan_gemm_ag(CLI::App& plan) {
  auto opts = std::make_shared<PlanGemmAgOptions>();
  CLI::App* c = plan.add_subcommand(
      "gemm-ag", "GemmAllGather per M: tile, waves, chunks, bytes, window, modelled times, the mode auto picks and why");
  add_gemm_ag_options(*c, opts->shape, /*with_layout=*/true, /*with_mode=*/true);
  c->add_option("--world", opts->world, "ranks (1..8)")->capture_default_str();
  c->add_option("--sms", opts->sms, "CTAs per rank to plan for (H100/H200: 132 SMs)")
      ->check(int_range(1, kMaxSms))->capture_default_str();
  c->add_flag("--no-fused", opts->no_fused, "plan as if the fused kernel were unavailable (auto then picks a split mode)");
  c->add_option("--json", opts->json_path, "also write the rows as JSON to FILE (checked before planning)");
  c->add_option("--calibration", opts->calibration,
                "auto takes the mode measured fastest per M in FILE (written by `weave bench gemm-ag --calibrate`; "
                "must be for this quant, out dtype, N, K and world)");
  c->footer(
      "Modes: gemm-only (the GEMM alone, nothing moves), split-nccl (GEMM then ncclAllGather), split-lsa /\n"
      "split-ce (GEMM then weave's lsa / copy-engine all-gather, in place), fused-lsa (one kernel: every tile\n"
      "stored to this rank's rows here and at every peer), fused-ce (the same kernel storing only here; each\n"
      "chunk's flag triggers the peers' copy-engine pulls of it while the GEMM runs), auto (fused-lsa where\n"
      "the model says it pays; never fused-ce).\n"
      "Times are the planner's model (fused::gag_rates), not measurements.");
  c->callback([opts] { exit_code() = run_plan_gemm_ag(*opts); });
}

// A name with a hyphen, so not through WEAVE_REGISTER_PLAN_TOPIC (which pastes it into an identifier).
[[maybe_unused]] const bool kRegistered = register_plan_topic("gemm-ag", add_plan_gemm_ag);

}  // namespace
}  // namespace weave::cli
