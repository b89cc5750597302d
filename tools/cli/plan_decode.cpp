// `weave plan decode`: what weave::Gemm runs for each GEMM of a decoder layer's decode step (the
// layer presets of weave/layer_presets.hpp at a tensor-parallel world's shard), per M: the GEMV
// and its K split, or the tiled kernel where the GEMV does not fit; and the weight bytes a step
// streams with the time floor they set at a given HBM bandwidth, next to the targets of
// `weave bench decode`. CPU only: the planner is pure.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/args.hpp"
#include "cli/decode_options.hpp"
#include "cli/registry.hpp"
#include "gemm/planner.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"

namespace weave::cli {
namespace {

struct PlanDecodeOptions {
  DecodeOptions decode;
  int sms = 132;
  double hbm_gbps = 3350;  // H100 SXM's nominal HBM3 bandwidth; a streaming read reaches ~90% of it
};

std::string short_plan(const GemmPlan& p) {
  if (p.gemv) return "gemv split " + std::to_string(p.split_k);
  return std::to_string(p.block_m) + "x" + std::to_string(p.block_n) + (p.split_k > 1 ? " split_k " + std::to_string(p.split_k) : "");
}

int run_plan_decode(const PlanDecodeOptions& o) {
  const auto runs = resolve_decode_runs(o.decode);
  for (const DecodeRun& run : runs) {
    const std::int64_t bytes = layer_weight_bytes(run);
    const double floor_us = bytes / (o.hbm_gbps * 1e3);
    std::printf("%s at tp %d, %s: %s; %.1f MB of weights per step\n", std::string(run.layer->name).c_str(), run.tp,
                std::string(to_string(run.quant)).c_str(), std::string(run.layer->summary).c_str(), bytes / 1e6);
    std::printf("  %-14s %-10s %14s %9s\n", "gemm", "split", "N x K (rank)", "MB");
    for (const LayerGemmShard& g : run.gemms)
      std::printf("  %-14s %-10s %14s %9.2f\n", std::string(g.name).c_str(), std::string(to_string(g.split)).c_str(),
                  (std::to_string(g.n) + "x" + std::to_string(g.k)).c_str(), weight_bytes(g.n, g.k, run.quant) / 1e6);
    if (!run.layer->left_out.empty()) std::printf("  not in the chain: %s\n", std::string(run.layer->left_out).c_str());
    std::printf("  HBM floor at %.0f GB/s: %.1f us per step; the targets allow %.1f us at M <= 8 (75%%), %.1f us at "
                "M 9-32 (60%%)\n",
                o.hbm_gbps, floor_us, floor_us / 0.75, floor_us / 0.60);
    std::printf("  %5s  plan per GEMM (--sms %d)\n", "M", o.sms);
    for (const std::int64_t m : run.ms) {
      std::string line;
      for (const LayerGemmShard& g : run.gemms) {
        GemmPlanOverrides ov;
        ov.decode_route = run.route;  // gemv was refused past the GEMV's M by resolve_decode_runs
        std::string plan;
        try {
          plan = short_plan(gemm_plan(GemmProblem{.m = m, .n = g.n, .k = g.k, .mode = run.quant}, o.sms, ov));
        } catch (const Error& e) {
          plan = "refused (" + e.message() + ")";
        }
        line += (line.empty() ? "" : " | ") + std::string(g.name) + " " + plan;
      }
      std::printf("  %5lld  %s\n", static_cast<long long>(m), line.c_str());
    }
    std::printf("\n");
  }
  std::printf("# gemv split S: the decode GEMV, K split over a cluster of S blocks; BMxBN: a tiled kernel (the planner's\n"
              "# decode route: the GEMV at M <= 8, mxfp8 32; --decode-route forces one). `weave bench decode` times the\n"
              "# chain on a GPU.\n");
  return 0;
}

void add_plan_decode(CLI::App& plan) {
  auto opts = std::make_shared<PlanDecodeOptions>();
  CLI::App* c = plan.add_subcommand(
      "decode", "the plan of every GEMM of a decoder layer's decode step per M, and the HBM time floor of its weights");
  add_decode_options(*c, opts->decode);
  c->add_option("--sms", opts->sms, "SM count to plan for")->check(int_range(1, gemm::kMaxSms))->capture_default_str();
  c->add_option("--hbm-gbps", opts->hbm_gbps, "HBM bandwidth for the time floor, GB/s")
      ->check(finite_range(1, 1e5))
      ->capture_default_str();
  c->callback([opts] { exit_code() = run_plan_decode(*opts); });
}

}  // namespace

WEAVE_REGISTER_PLAN_TOPIC(decode, add_plan_decode);

}  // namespace weave::cli
