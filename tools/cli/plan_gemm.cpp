// `weave plan gemm`: what weave::Gemm would run for a shape (kernel, tile, grid, why), and the
// tiled kernels' rules a shape the decode GEMV takes breaks; a shape nothing can run is a usage
// error naming the options. Pure planning: runs on a machine without a GPU (default 132 SMs).
#include <cstdio>
#include <string>

#include "cli/args.hpp"
#include "cli/gemm_rules.hpp"
#include "cli/registry.hpp"
#include "gemm/planner.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"

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
  int cluster = 0;
  std::string mx_route = "auto";
  std::string scale_a_route = "auto";
  std::string decode_route = "auto";
};

// The option a planner override error is about (its messages name the override field).
const char* override_option(const std::string& message) {
  if (message.find("'split_k'") != std::string::npos) return "--split-k";
  if (message.find("'grid'") != std::string::npos) return "--grid";
  if (message.find("'cluster'") != std::string::npos) return "--cluster";
  if (message.find("'mx_route'") != std::string::npos) return "--mx-route";
  if (message.find("'scale_a_route'") != std::string::npos) return "--scale-a-route";
  if (message.find("'num_sms'") != std::string::npos) return "--sms";
  if (message.find("'decode_route'") != std::string::npos) return "--decode-route";
  return "--tile";
}

int usage_error(const std::string& what) {
  std::fprintf(stderr, "weave plan gemm: %s\n", what.c_str());
  return 2;
}

// Exit status: 0 planned, 1 this build cannot run it, 2 bad usage: an option's value or a rule of
// the kernels the problem breaks (one line, before anything is printed).
int run_plan_gemm(const PlanGemmOptions& o) {
  GemmProblem p;
  p.m = o.m;
  p.n = o.n;
  p.k = o.k;
  auto mode = parse_scale_mode(o.quant);
  auto out = parse_dtype(o.out);
  auto layout = parse_scale_layout(o.layout);
  if (!mode) return usage_error("--quant '" + o.quant + "': expected bf16, ptpc, blockscale or mxfp8");
  if (!out || (*out != DType::kBF16 && *out != DType::kF32))
    return usage_error("--out '" + o.out + "': expected bf16 or fp32");
  if (!layout) return usage_error("--layout '" + o.layout + "': expected raw, packed or mn-major");
  p.mode = *mode;
  p.out_dtype = *out;
  p.scale_layout = *layout;
  GemmPlanOverrides ov;
  ov.grid = o.grid;
  ov.split_k = o.split_k;
  ov.cluster = o.cluster;
  if (o.mx_route == "native") ov.mx_route = MxRoute::kNative;
  else if (o.mx_route == "bf16") ov.mx_route = MxRoute::kBf16;
  else if (o.mx_route != "auto") return usage_error("--mx-route '" + o.mx_route + "': expected auto, native or bf16");
  if (ov.mx_route != MxRoute::kAuto && p.mode != ScaleMode::kMxfp8)
    return usage_error("--mx-route " + o.mx_route + ": applies to --quant mxfp8 only");
  if (o.scale_a_route == "as-given") ov.scale_a_route = ScaleARoute::kAsGiven;
  else if (o.scale_a_route == "mn-major-copy") ov.scale_a_route = ScaleARoute::kMnMajorCopy;
  else if (o.scale_a_route != "auto")
    return usage_error("--scale-a-route '" + o.scale_a_route + "': expected auto, as-given or mn-major-copy");
  if (ov.scale_a_route != ScaleARoute::kAuto && (p.mode != ScaleMode::kBlockscale || p.scale_layout != ScaleLayout::kRaw))
    return usage_error("--scale-a-route " + o.scale_a_route + ": applies to --quant blockscale with --layout raw only");
  const auto decode_route = parse_decode_route(o.decode_route);
  if (!decode_route) return usage_error("--decode-route '" + o.decode_route + "': expected auto, gemv or tiles");
  ov.decode_route = *decode_route;
  // The tiles a forced tile is checked against: the bf16 kernels' on the mxfp8 bf16 route, the
  // MN-major kernels' where A's scales are copied to MN-major.
  GemmProblem tiles_of = p;
  if (ov.mx_route == MxRoute::kBf16) {
    tiles_of.mode = ScaleMode::kBF16;
    tiles_of.scale_layout = ScaleLayout::kRaw;
  }
  if (ov.scale_a_route == ScaleARoute::kMnMajorCopy) tiles_of.scale_layout = ScaleLayout::kMnMajor;
  const auto cands = gemm::gemm_tile_candidates(tiles_of, o.cluster);
  if (!o.tile.empty()) {
    const Tile t = parse_tile("--tile", o.tile);
    std::string built;
    bool found = false;
    for (const auto& c : cands) {
      built += (built.empty() ? "" : ", ") + std::to_string(c.block_m) + "x" + std::to_string(c.block_n);
      found = found || (c.block_m == t.block_m && c.block_n == t.block_n);
    }
    if (!found)
      return usage_error("--tile '" + o.tile + "': no " + o.quant + "/" + o.out + " kernel of that tile is built (built: " +
                         (built.empty() ? "none" : built) + ")");
    ov.block_m = t.block_m;
    ov.block_n = t.block_n;
  }
  const auto violations = gemm::gemm_problem_violations(p);
  const std::string overall = gemm_validate_problem(p);
  // A rule the problem breaks is the user's input: one line naming the options, exit 2.
  if (!overall.empty()) return usage_error(name_gemm_rules(overall, p));
  GemmPlan plan;
  std::string refused;
  try {
    plan = gemm_plan(p, o.sms, ov);
  } catch (const Error& e) {
    if (e.status() == Status::kInvalidArgument)
      return usage_error(std::string(override_option(e.message())) + ": " + e.message());
    refused = e.message();  // this build cannot run it (a kernel not built): a report, exit 1
  }
  // A K split reaches the GEMV only beside --decode-route gemv (it is then the cluster split).
  if (refused.empty() && plan.gemv && (o.grid > 0 || (o.split_k > 0 && ov.decode_route != DecodeRoute::kGemv)))
    return usage_error(std::string(o.grid > 0 ? "--grid" : "--split-k") + ": m = " + std::to_string(p.m) +
                       " goes to the decode GEMV, which takes no grid override and a K split only with "
                       "--decode-route gemv (force the tiled kernels with --tile or --decode-route tiles)");

  std::printf("problem: m=%lld n=%lld k=%lld quant=%s out=%s layout=%s sms=%d\n", static_cast<long long>(p.m),
              static_cast<long long>(p.n), static_cast<long long>(p.k), o.quant.c_str(), o.out.c_str(),
              o.layout.c_str(), o.sms);
  if (violations.empty()) {
    std::printf("constraints: all met\n");
  } else {
    std::printf("constraints broken by the tiled GEMM kernels (%zu):\n", violations.size());
    for (const auto& v : violations) std::printf("  - %s\n", v.c_str());
    std::printf("  (the decode GEMV takes this problem)\n");
  }

  if (!cands.empty()) {
    std::printf("built tiles for %s/%s:\n", std::string(to_string(tiles_of.mode)).c_str(), o.out.c_str());
    for (const auto& c : cands) {
      const int64_t tiles = ((p.m + c.block_m - 1) / c.block_m) * ((p.n + c.block_n - 1) / c.block_n);
      std::printf("  %-48s %3dx%-3d x%-3d stages %d  tiles %6lld  waves %.2f  split-K partials: %s\n",
                  c.kernel.c_str(), c.block_m, c.block_n, c.block_k, c.stages, static_cast<long long>(tiles),
                  static_cast<double>(tiles) / o.sms, c.split_kernel.empty() ? "(not built)" : c.split_kernel.c_str());
    }
  }
  if (!refused.empty()) {
    std::printf("plan: refused: %s\n", refused.c_str());
    return 1;
  }
  if (plan.gemv) {
    std::printf("plan: %s grid %d split_k %d\n", plan.kernel.c_str(), plan.grid, plan.split_k);
  } else {
    std::printf("plan: %s tile %dx%dx%d stages %d cluster %d grid %d tiles %lld split_k %d group_rows %d\n",
                plan.kernel.c_str(), plan.block_m, plan.block_n, plan.block_k, plan.stages, plan.cluster, plan.grid,
                static_cast<long long>(plan.tiles), plan.split_k, plan.group_rows);
  }
  std::printf("reason: %s\n", plan.reason.c_str());
  if (plan.mx_dequant) {
    const gemm::MxRouteModel r = gemm::mx_route_model(p, o.sms);
    std::printf("mxfp8 route: bf16 (A and B converted to bf16 in the workspace; rerun on %s if a scale byte leaves "
                "[10, 246]); modelled %.1f us (%.1f us conversion) vs native %.1f us\n",
                plan.fallback_kernel.c_str(), r.bf16_us, r.convert_us, r.native_us);
  } else if (p.mode == ScaleMode::kMxfp8 && !plan.gemv) {
    const gemm::MxRouteModel r = gemm::mx_route_model(p, o.sms);
    std::printf("mxfp8 route: native (fp8 kernel, promotion every 32 K); modelled %.1f us vs bf16 route %.1f us\n",
                r.native_us, r.bf16_us);
  }
  if (p.mode == ScaleMode::kBlockscale && p.scale_layout == ScaleLayout::kRaw && !plan.gemv) {
    const gemm::ScaleACopyModel r = gemm::scale_a_copy_model(p, o.sms);
    std::printf("blockscale A scales: %s; modelled: the MN-major kernel saves %.1f us of %.1f us, the copy costs "
                "%.1f us\n",
                plan.scale_a_mn_copy ? "copied to MN-major in the workspace, then the MN-major kernel"
                                     : "read as given (row-major)",
                r.saved_us, r.kernel_us, r.copy_us);
  }
  const std::size_t ws = gemm_workspace_bytes(p, plan);
  if (ws > 0) {
    std::printf("workspace: %lld bytes (", static_cast<long long>(ws));
    if (plan.mx_dequant)
      std::printf("bf16 A [%lld, %lld] and B [%lld, %lld], a flag word%s", static_cast<long long>(p.m),
                  static_cast<long long>(p.k), static_cast<long long>(p.n), static_cast<long long>(p.k),
                  plan.split_k > 1 ? "; " : "");
    if (plan.scale_a_mn_copy)
      std::printf("fp32 MN-major A scales [%lld, %lld]%s", static_cast<long long>(p.k / 128),
                  static_cast<long long>(ref::mn_major_scale_ld(p.m)), plan.split_k > 1 ? "; " : "");
    if (plan.split_k > 1)
      std::printf("fp32 partials [%d, %lld, %lld]", plan.split_k, static_cast<long long>(p.m),
                  static_cast<long long>(p.n));
    std::printf("; Gemm::set_workspace)\n");
  }
  return 0;
}

void add_plan_gemm(CLI::App& plan) {
  auto opts = std::make_shared<PlanGemmOptions>();
  CLI::App* c = plan.add_subcommand("gemm", "Tile, grid and kernel weave::Gemm picks for a shape; every broken rule");
  // The range here is the kernels' (TMA coordinates); alignment and K multiples are named after it.
  const auto positive = int_range(1, gemm::kMaxDim);
  c->add_option("-m", opts->m, "rows of A and C")->required()->check(positive);
  c->add_option("-n", opts->n, "rows of B (columns of C)")->required()->check(positive);
  c->add_option("-k", opts->k, "reduction length")->required()->check(positive);
  c->add_option("--quant", opts->quant, "bf16 | ptpc | blockscale | mxfp8")->capture_default_str();
  c->add_option("--out", opts->out, "output dtype: bf16 | fp32")->capture_default_str();
  c->add_option("--layout", opts->layout, "scale layout: raw | packed (mxfp8) | mn-major (blockscale: A scales M-contiguous)")->capture_default_str();
  c->add_option("--sms", opts->sms, "SM count to plan for")->check(int_range(1, gemm::kMaxSms))->capture_default_str();
  c->add_option("--tile", opts->tile, "force a tile, BMxBN (e.g. 128x256); one of the built tiles");
  c->add_option("--grid", opts->grid, "force the persistent grid size (1 .. --sms); 0 = planner's choice")
      ->check(int_range(0, gemm::kMaxSms))->capture_default_str();
  c->add_option("--split-k", opts->split_k, "force a K split (1 = none, 2..16; with --decode-route gemv: the GEMV's cluster split along K); 0 = planner's choice")
      ->check(int_range(0, gemm::kMaxSplitK))->capture_default_str();
  c->add_option("--cluster", opts->cluster,
                "CTAs per cluster: 1 | 2 (pairs of CTAs along M load each shared B tile once, multicast to both; "
                "the _c2 instances: fp8 ptpc and blockscale mn-major); 0 = the planner's choice (1)")
      ->check(int_range(0, 2))->capture_default_str();
  c->add_option("--mx-route", opts->mx_route,
                "mxfp8: auto (the planner's model) | native (fp8 kernel, promotion every 32 K) | bf16 (A and B "
                "converted to bf16 with their scales, then the bf16 kernel)")
      ->capture_default_str();
  c->add_option("--scale-a-route", opts->scale_a_route,
                "blockscale with --layout raw: auto (the planner's model) | as-given (the kernel gathers each "
                "stage's row-major A scales) | mn-major-copy (A's scales copied to MN-major in the workspace "
                "first, then the faster MN-major kernel; bitwise the same result)")
      ->capture_default_str();
  c->add_option("--decode-route", opts->decode_route,
                "m <= 32: auto (the decode GEMV where it was measured faster than the tiled kernels: m <= 8, "
                "mxfp8 at m <= 32) | gemv | tiles")
      ->capture_default_str();
  c->callback([opts] { exit_code() = run_plan_gemm(*opts); });
}

}  // namespace

WEAVE_REGISTER_PLAN_TOPIC(gemm, add_plan_gemm);

}  // namespace weave::cli
