// The GEMM planner's two-route problems: mxfp8 (native kernels, or A and B converted to bf16) and
// blockscale with row-major A scales (read as given, or copied to MN-major), each route priced by a model.
#include <algorithm>
#include <sstream>

#include "common/check.hpp"
#include "gemm/planner.hpp"
#include "weave/gemm.hpp"

namespace weave {
namespace gemm {


// mxfp8 route rule (weave/gemm.hpp): each route's modelled time, roofline-style: the larger of
// its FLOPs at the rate weave's kernel reaches, derated by its plan's wave efficiency (work items
// over waves x SMs: a last, partly filled wave costs a whole one), and its HBM bytes at an
// effective bandwidth; for the bf16 route plus the conversion pass (read e4m3, write bf16: 3 bytes
// per element of A and B) and a fixed cost for its extra launches (flag reset, conversion,
// guarded native launch). The rates are weave's own, measured on the H200 (docs/perf/gemm.md,
// issue 10): bf16 630-790 TFLOPS, native mxfp8 390-435 raw and ~8% more packed, the conversion
// 3.3-3.9 TB/s.
constexpr double kModelBf16Flops = 640e12;
constexpr double kModelMxRawFlops = 410e12;
constexpr double kModelMxPackedFlops = 440e12;
constexpr double kModelHbmBytesPerS = 3.0e12;
constexpr double kModelConvertBytesPerS = 3.5e12;
constexpr double kModelRouteLaunchUs = 4.0;

static double wave_efficiency(const GemmPlan& plan, int num_sms) {
  const int64_t items = plan.tiles * plan.split_k;
  return static_cast<double>(items) / static_cast<double>(ceil_div(items, num_sms) * num_sms);
}

MxRouteModel mx_route_model(const GemmProblem& p, int num_sms) {
  const double m = static_cast<double>(p.m), n = static_cast<double>(p.n), k = static_cast<double>(p.k);
  const double flops = 2 * m * n * k, out = m * n * (p.out_dtype == DType::kF32 ? 4 : 2);
  MxRouteModel r;
  const auto native_cands = gemm_tile_candidates(p);
  GemmProblem bf = p;
  bf.mode = ScaleMode::kBF16;
  bf.scale_layout = ScaleLayout::kRaw;
  const auto bf16_cands = gemm_tile_candidates(bf);
  if (!native_cands.empty()) {
    const double rate = p.scale_layout == ScaleLayout::kPacked ? kModelMxPackedFlops : kModelMxRawFlops;
    r.native_eff = wave_efficiency(gemm_plan_tiles(p, num_sms, {}, native_cands), num_sms);
    r.native_us = std::max(flops / (rate * r.native_eff), ((m + n) * k + out) / kModelHbmBytesPerS) * 1e6;
  }
  if (!bf16_cands.empty()) {
    r.bf16_eff = wave_efficiency(gemm_plan_tiles(bf, num_sms, {}, bf16_cands, SplitRule::kFillSms), num_sms);
    r.convert_us = 3 * (m + n) * k / kModelConvertBytesPerS * 1e6 + kModelRouteLaunchUs;
    r.bf16_us = std::max(flops / (kModelBf16Flops * r.bf16_eff), (2 * (m + n) * k + out) / kModelHbmBytesPerS) * 1e6 +
                r.convert_us;
  }
  return r;
}

// The start of a planner with two routes: the override's route, else `forced_default` where a tile
// or K split is forced without one (`forced_note` says so), else the one `model(why)` returns after
// writing its numbers into `why` (one decimal).
template <class Route, class Model>
static Route choose_route(Route overridden, Route forced_default, const char* forced_note,
                          const GemmPlanOverrides& o, std::ostringstream& why, Model&& model) {
  why.setf(std::ios::fixed);
  why.precision(1);
  if (overridden != Route::kAuto) {
    why << "(override)";
    return overridden;
  }
  if (o.block_m != 0 || o.split_k >= 2) {
    why << forced_note;
    return forced_default;
  }
  return model(why);
}

GemmPlan plan_mxfp8_tiles(const GemmProblem& p, int num_sms, const GemmPlanOverrides& o) {
  std::ostringstream why;
  const MxRoute route = choose_route(
      o.mx_route, MxRoute::kNative, "(a forced tile or K split without a route names the native kernels)", o, why,
      [&](std::ostringstream& w) {
        const MxRouteModel r = mx_route_model(p, num_sms);
        w << "(modelled " << r.bf16_us << " us incl. " << r.convert_us << " us of conversion, wave efficiency "
          << 100 * r.bf16_eff << "%, vs native " << r.native_us << " us at " << 100 * r.native_eff << "%)";
        return r.bf16_us < r.native_us ? MxRoute::kBf16 : MxRoute::kNative;
      });
  if (route == MxRoute::kNative) {
    GemmPlan plan = gemm_plan_tiles(p, num_sms, o, gemm_tile_candidates(p, o.cluster));
    plan.reason = "mxfp8 native route " + why.str() + "; " + plan.reason;
    return plan;
  }
  GemmProblem bf = p;
  bf.mode = ScaleMode::kBF16;
  bf.scale_layout = ScaleLayout::kRaw;
  GemmPlan plan = gemm_plan_tiles(bf, num_sms, o, gemm_tile_candidates(bf, o.cluster), SplitRule::kFillSms);
  GemmPlanOverrides fo;
  fo.split_k = 1;
  fo.group_rows = o.group_rows;
  const GemmPlan fallback = gemm_plan_tiles(p, num_sms, fo, gemm_tile_candidates(p));
  plan.mx_dequant = true;
  plan.fallback_kernel = fallback.kernel;
  plan.reason = "mxfp8 bf16 route " + why.str() + ": A and B converted to bf16 (scales folded in) in the workspace, "
                "then the bf16 kernel: " + plan.reason + "; the call reruns on " + fallback.kernel +
                " if a scale byte outside [10, 246] scales a non-zero element";
  return plan;
}

// Blockscale row-major A scales (weave/gemm.hpp): the kernel that reads them as given gathers each
// stage's strided column with one 4-byte cp.async per row; the MN-major kernel gets it in one TMA
// box. Measured on the H200 (docs/perf/gemm.md "step 11": the 12 shapes and six around the
// threshold, every arm forced in one run), the kernel reading the scales as given took 2.6-9.8% more
// time than the MN-major one with 256x128 tiles (least at 30-35 us, K = 2048) and 9-14% with
// 128x128 (whose MN-major kernel also runs the two-block-set schedule), and the route cost about 2
// us in a CUDA graph plus about 1.2% of the kernel at large shapes (the copy kernel itself takes
// 3.5-3.9 us under ncu at 1-2 MB; the rest of the large shapes' cost is not explained). The model
// prices both: the saving as a share of the MN-major plan's modelled time (its FLOPs at the rate
// weave's blockscale kernel reaches, derated by wave efficiency), the copy as a launch, that share
// and reading and writing M x K/128 floats; it copies where the saving is larger. Against those 18
// shapes it is right in sign at every one that was not a tie (2048x2048x7168 goes to the copy,
// 2048x1024x5120 stays as given; tests/cpu GemmPlanScaleARoute holds the table).
constexpr double kModelBlockscaleFlops = 1100e12;
constexpr double kScaleAMnMajorSaving = 0.06;          // 256-row tiles
constexpr double kScaleAMnMajorSaving128Rows = 0.12;   // 128-row tiles
constexpr double kModelScaleCopyLaunchUs = 2.0;
constexpr double kModelScaleCopyKernelShare = 0.012;

ScaleACopyModel scale_a_copy_model(const GemmProblem& p, int num_sms) {
  ScaleACopyModel r;
  GemmProblem mn = p;
  mn.scale_layout = ScaleLayout::kMnMajor;
  const auto cands = gemm_tile_candidates(mn);
  if (cands.empty() || gemm_tile_candidates(p).empty()) return r;
  const double m = static_cast<double>(p.m), n = static_cast<double>(p.n), k = static_cast<double>(p.k);
  const GemmPlan plan = gemm_plan_tiles(mn, num_sms, {}, cands);
  r.wave_eff = wave_efficiency(plan, num_sms);
  r.kernel_us = 2 * m * n * k / (kModelBlockscaleFlops * r.wave_eff) * 1e6;
  r.saved_us = (plan.block_m <= 128 ? kScaleAMnMajorSaving128Rows : kScaleAMnMajorSaving) * r.kernel_us;
  r.copy_us = kModelScaleCopyLaunchUs + kModelScaleCopyKernelShare * r.kernel_us +
              2 * m * (k / 128) * 4 / kModelHbmBytesPerS * 1e6;
  return r;
}

GemmPlan plan_blockscale_raw_tiles(const GemmProblem& p, int num_sms, const GemmPlanOverrides& o) {
  std::ostringstream why;
  const ScaleARoute route = choose_route(
      o.scale_a_route, ScaleARoute::kAsGiven, "(a forced tile or K split without a route reads the scales as given)",
      o, why, [&](std::ostringstream& w) {
        const ScaleACopyModel r = scale_a_copy_model(p, num_sms);
        w << "(modelled: the MN-major kernel saves " << r.saved_us << " us of " << r.kernel_us
          << " us at wave efficiency " << 100 * r.wave_eff << "%; the copy costs " << r.copy_us << " us)";
        return r.copy_us < r.saved_us ? ScaleARoute::kMnMajorCopy : ScaleARoute::kAsGiven;
      });
  if (route == ScaleARoute::kAsGiven) {
    GemmPlan plan = gemm_plan_tiles(p, num_sms, o, gemm_tile_candidates(p, o.cluster));
    plan.reason = "blockscale, A scales read as given (row-major) " + why.str() + "; " + plan.reason;
    return plan;
  }
  GemmProblem mn = p;
  mn.scale_layout = ScaleLayout::kMnMajor;
  GemmPlan plan = gemm_plan_tiles(mn, num_sms, o, gemm_tile_candidates(mn, o.cluster));
  plan.scale_a_mn_copy = true;
  plan.reason = "blockscale, A scales copied to MN-major in the workspace first " + why.str() +
                ", then the MN-major kernel: " + plan.reason;
  return plan;
}

}  // namespace gemm
}  // namespace weave
