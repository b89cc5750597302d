// `weave plan gemm`: what weave::Gemm would run for a shape (kernel, tile, grid, why) and every
// rule the input breaks. Pure planning: runs on a machine without a GPU (default 132 SMs, H100/H200).
#include <cstdio>
#include <string>

#include "cli/registry.hpp"
#include "gemm/planner.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"

namespace weave::cli {
namespace {

struct PlanGemmOptions {
  int64_t m = 0, n = 0, k = 0;
  std::string quant = "bf16";
  std::string out = "bf16";
  std::string layout = "raw";
  int sms = 132;
  std::string tile;  // "128x256"
  int grid = 0;
  int split_k = 0;
};

int run_plan_gemm(const PlanGemmOptions& o) {
  GemmProblem p;
  p.m = o.m;
  p.n = o.n;
  p.k = o.k;
  auto mode = parse_scale_mode(o.quant);
  auto out = parse_dtype(o.out);
  auto layout = parse_scale_layout(o.layout);
  if (!mode || !out || !layout) {
    std::fprintf(stderr, "weave plan gemm: %s\n",
                 !mode  ? ("--quant '" + o.quant + "': expected bf16, ptpc, blockscale or mxfp8").c_str()
                 : !out ? ("--out '" + o.out + "': expected bf16 or fp32").c_str()
                        : ("--layout '" + o.layout + "': expected raw or packed").c_str());
    return 2;
  }
  p.mode = *mode;
  p.out_dtype = *out;
  p.scale_layout = *layout;
  GemmPlanOverrides ov;
  ov.grid = o.grid;
  ov.split_k = o.split_k;
  if (!o.tile.empty()) {
    if (std::sscanf(o.tile.c_str(), "%dx%d", &ov.block_m, &ov.block_n) != 2) {
      std::fprintf(stderr, "weave plan gemm: --tile '%s': expected BMxBN, e.g. 128x256\n", o.tile.c_str());
      return 2;
    }
  }

  std::printf("problem: m=%lld n=%lld k=%lld quant=%s out=%s layout=%s sms=%d\n", static_cast<long long>(p.m),
              static_cast<long long>(p.n), static_cast<long long>(p.k), o.quant.c_str(), o.out.c_str(),
              o.layout.c_str(), o.sms);
  const auto violations = gemm::gemm_problem_violations(p);
  const std::string overall = gemm_validate_problem(p);
  if (violations.empty()) {
    std::printf("constraints: all met\n");
  } else {
    std::printf("constraints broken by the tiled GEMM kernels (%zu):\n", violations.size());
    for (const auto& v : violations) std::printf("  - %s\n", v.c_str());
    if (overall.empty()) std::printf("  (the decode GEMV takes this problem)\n");
  }
  if (!overall.empty()) return 1;

  const auto cands = gemm::gemm_tile_candidates(p);
  if (!cands.empty()) {
    std::printf("built tiles for %s/%s:\n", o.quant.c_str(), o.out.c_str());
    for (const auto& c : cands) {
      const int64_t tiles = ((p.m + c.block_m - 1) / c.block_m) * ((p.n + c.block_n - 1) / c.block_n);
      std::printf("  %-48s %3dx%-3d x%-3d stages %d  tiles %6lld  waves %.2f  split-K partials: %s\n",
                  c.kernel.c_str(), c.block_m, c.block_n, c.block_k, c.stages, static_cast<long long>(tiles),
                  static_cast<double>(tiles) / o.sms, c.split_kernel.empty() ? "(not built)" : c.split_kernel.c_str());
    }
  }
  try {
    const GemmPlan plan = gemm_plan(p, o.sms, ov);
    if (plan.gemv) {
      std::printf("plan: %s grid %d split_k %d\n", plan.kernel.c_str(), plan.grid, plan.split_k);
    } else {
      std::printf("plan: %s tile %dx%dx%d stages %d cluster %d grid %d tiles %lld split_k %d group_rows %d\n",
                  plan.kernel.c_str(), plan.block_m, plan.block_n, plan.block_k, plan.stages, plan.cluster, plan.grid,
                  static_cast<long long>(plan.tiles), plan.split_k, plan.group_rows);
    }
    std::printf("reason: %s\n", plan.reason.c_str());
    if (!plan.gemv && plan.split_k > 1)
      std::printf("workspace: %lld bytes (fp32 partials [%d, %lld, %lld]; Gemm::set_workspace)\n",
                  static_cast<long long>(plan.split_k) * p.m * p.n * 4, plan.split_k, static_cast<long long>(p.m),
                  static_cast<long long>(p.n));
  } catch (const Error& e) {
    std::printf("plan: refused: %s\n", e.what());
    return 1;
  }
  return 0;
}

void add_plan_gemm(CLI::App& plan) {
  auto opts = std::make_shared<PlanGemmOptions>();
  CLI::App* c = plan.add_subcommand("gemm", "Tile, grid and kernel weave::Gemm picks for a shape; every broken rule");
  c->add_option("-m", opts->m, "rows of A and C")->required();
  c->add_option("-n", opts->n, "rows of B (columns of C)")->required();
  c->add_option("-k", opts->k, "reduction length")->required();
  c->add_option("--quant", opts->quant, "bf16 | ptpc | blockscale | mxfp8")->capture_default_str();
  c->add_option("--out", opts->out, "output dtype: bf16 | fp32")->capture_default_str();
  c->add_option("--layout", opts->layout, "mxfp8 scale layout: raw | packed")->capture_default_str();
  c->add_option("--sms", opts->sms, "SM count to plan for")->capture_default_str();
  c->add_option("--tile", opts->tile, "force a tile, BMxBN (e.g. 128x256)");
  c->add_option("--grid", opts->grid, "force the persistent grid size");
  c->add_option("--split-k", opts->split_k, "force a K split (1 = none, 2..16); 0 = planner's choice")
      ->capture_default_str();
  c->callback([opts] { exit_code() = run_plan_gemm(*opts); });
}

}  // namespace

WEAVE_REGISTER_PLAN_TOPIC(gemm, add_plan_gemm);

}  // namespace weave::cli
