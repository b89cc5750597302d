// `weave bench gemm`: weave::Gemm against cuBLASLt in the same run, same operands, same scaling
// and output dtype (issue 3 "Benchmark and targets"; mxfp8 rows for issue 4).
//
// Per shape and quantisation mode (and output dtype), the arms are:
//   bf16, ptpc   weave | cublaslt (same mode)
//   blockscale   weave (row-major A scales, scale_layout raw: the planner's route for them) |
//                weave-as-given / weave-mn-copy (the same, forced to read the scales as given or
//                to copy them to MN-major first) | weave-mn (the same scales M-contiguous,
//                scale_layout mn-major: the layout cuBLASLt's arm is given too, so the blockscale
//                targets read this arm) | cublaslt (1x128 / 128x128 block scaling) |
//                cublaslt-ptpc (the fp8 speed of light on Hopper, on ptpc-quantised copies of the
//                same fp32 data)
//   mxfp8        weave (raw scales) | weave-packed (packed scales, with --layout packed) |
//                weave-native / weave-packed-native (the same, forced onto the native fp8 kernel) |
//                weave-bf16-route (raw, forced onto the bf16 route), so the planner's route
//                choice is measured against both routes in one run |
//                cublaslt-bs (cuBLASLt block-wise, the nearest vendor mode; Hopper has no MX mode) |
//                weave-bs (our blockscale, mn-major A scales)
//   --clusters   ptpc rows add weave-c2, blockscale rows are weave | weave-mn | weave-mn-c2 |
//                cublaslt: the same plans with 2-CTA clusters forced (B multicast across a pair)
// split-K plans (the planner's, e.g. where the output tiles leave SMs idle) get their workspace.
// Inputs: fresh random fp32 data (bench::random_operand: magnitudes vary per row and 128-column
// block, so misapplied scales show) quantised by the host reference (weave::ref::quantize).
// Weights are cold by default: every call of a graph reads its own copy of B and its scales,
// enough copies to cover 3 x L2, so each call streams its weights from HBM (--hot: one copy).
// Timing: bench::time_alternating (CUDA graphs, arms alternating, median / noise%).
// Validation, per arm: the output is NaN-poisoned, one call is run, and the output is compared on
// the GPU against bench::gpu_reference_gemm of the arm's own operands (and, for shapes up to
// --cpu-ref-max multiply-adds, against the CPU fp64 reference, which also checks the GPU
// reference itself); after timing the output of one more replay of the arm's timed graph (output
// poisoned first) is compared again. #wrong sums these.
// Bounds: bench::gemm_tolerance. A row with #wrong > 0 (or an arm that failed) makes the exit
// status 1; a weave::Gemm that refuses a mode (not built yet) gives an "unsupported" row with the
// reason, which does not fail the run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "bench/harness.hpp"
#include "cli/gemm_targets.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/gemm_rules.hpp"
#include "gemm/planner.hpp"
#include "cli/registry.hpp"
#include "common/check.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

namespace weave::cli {
namespace {

struct Shape {
  int64_t m = 0, n = 0, k = 0;
};

// Issue 3's shape list (M, N, K).
const std::vector<Shape> kIssueShapes = {
    {64, 8192, 1280},    {1024, 5120, 2048},  {4096, 5120, 2048},  {8192, 5120, 2048},
    {8192, 7168, 640},   {8192, 7168, 4096},  {16384, 7168, 2048}, {32768, 7168, 1792},
    {2048, 2048, 7168},  {8192, 2048, 7168},  {16384, 2048, 7168}, {2048, 1024, 5120},
    {16384, 1024, 5120}, {8192, 8192, 8192}};
// A bare `weave bench` runs this short subset: one mid-size and one large shape.
const std::vector<Shape> kDefaultShapes = {{1024, 5120, 2048}, {8192, 7168, 4096}};

struct GemmSuiteOptions {
  int64_t m = 0, n = 0, k = 0;
  std::vector<std::string> shapes;  // "MxNxK"
  std::vector<std::string> quants{"bf16", "ptpc", "blockscale"};
  std::vector<std::string> outs{"bf16", "fp32"};
  std::vector<std::string> layouts{"raw", "packed"};  // mxfp8 scale layouts measured
  bool fast_accum = false;
  double cpu_ref_max_macs = 1.2e10;
  bool check_targets = false;
  bool baselines_only = false;  // no weave arms: measure and validate the baselines alone
  bool clusters = false;        // also the weave arms with 2-CTA clusters forced (weave-c2, weave-mn-c2)
  uint64_t seed = 1;
};

std::string shape_name(const Shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

// Largest operand the suite accepts, in elements of each of A [M, K], B [N, K] and C [M, N]: the
// inputs are generated and quantised as fp32 on the host (16 GiB at this limit).
constexpr int64_t kMaxOperandElems = int64_t{1} << 32;

Shape checked_shape(const std::string& option, int64_t m, int64_t n, int64_t k) {
  WEAVE_EXPECT_ARG(m <= kMaxOperandElems / k && n <= kMaxOperandElems / k && m <= kMaxOperandElems / n,
                   option << " " << m << "x" << n << "x" << k << ": each of M*K, N*K and M*N must be at most 2^32 "
                          << "elements (the suite builds fp32 operands on the host)");
  return {m, n, k};
}

std::vector<Shape> shapes_from(const GemmSuiteOptions& o) {
  // -m/-n/-k are >= 1 when given (their CLI11 check), so 0 means "not given".
  const int given = (o.m > 0) + (o.n > 0) + (o.k > 0);
  WEAVE_EXPECT_ARG(given == 0 || given == 3,
                   "-m, -n, -k: give all three for a single shape, or none (got only"
                       << (o.m > 0 ? " -m " + std::to_string(o.m) : "") << (o.n > 0 ? " -n " + std::to_string(o.n) : "")
                       << (o.k > 0 ? " -k " + std::to_string(o.k) : "") << ")");
  std::vector<Shape> out;
  if (given == 3) out.push_back(checked_shape("-m -n -k", o.m, o.n, o.k));
  for (const auto& t : o.shapes) {
    const Shape3 s = parse_shape("--shapes", t);
    out.push_back(checked_shape("--shapes", s.m, s.n, s.k));
  }
  if (out.empty()) out = kIssueShapes;
  return out;
}

// ---- operands of one mode for one shape ----

struct ModeData {
  GemmProblem problem;                  // out_dtype is set per row
  bench::DeviceOperand a;
  std::vector<bench::DeviceOperand> b;  // b[0] and its cold copies (identical bytes)
  bench::DeviceBuffer ref;              // fp32 [M, N] from gpu_reference_gemm
  std::vector<double> ref64;            // fp64 [M, N] for small shapes, else empty
  double ref64_rms = 0;
  bool ref_checked = false;
  ref::Comparison ref_check;            // the GPU reference against fp64
  // mxfp8 only: the packed scales (weave::ref::pack_mxfp8_scales) of A and of every B copy,
  // viewed as ue8m0 [ceil(K/128), 4 * rows].
  std::vector<bench::DeviceBuffer> packed;
  TensorView a_packed;
  std::vector<TensorView> b_packed;
  // blockscale only: A's scales M-contiguous (bench::upload_mn_major_scales), strides (1, ld).
  bench::MnMajorScales a_mn;
  GemmScales scales(std::size_t copy, ScaleLayout layout) const {
    if (layout == ScaleLayout::kPacked) return {a_packed, b_packed[copy]};
    if (layout == ScaleLayout::kMnMajor) return {a_mn.view, b[copy].scale_view};
    return {a.scale_view, b[copy].scale_view};
  }
};

std::unique_ptr<ModeData> make_mode_data(ScaleMode mode, const Shape& s, const std::vector<float>& xa,
                                         const std::vector<float>& xb, bool hot, std::size_t l2_bytes,
                                         double cpu_max_macs, int device, cudaStream_t stream) {
  auto md = std::make_unique<ModeData>();
  md->problem = GemmProblem{.m = s.m, .n = s.n, .k = s.k, .mode = mode};
  const ref::QuantMatrix qa = bench::quantize_parallel(xa, s.m, s.k, mode, ref::Operand::kA);
  const ref::QuantMatrix qb = bench::quantize_parallel(xb, s.n, s.k, mode, ref::Operand::kB);
  md->a = bench::upload_operand(qa, device);
  md->b.push_back(bench::upload_operand(qb, device));
  const int copies = hot ? 1 : bench::cold_copies(md->b[0].bytes(), l2_bytes);
  for (int i = 1; i < copies; ++i) md->b.push_back(bench::clone_operand(md->b[0]));
  if (mode == ScaleMode::kMxfp8) {
    const int64_t groups = s.k / 32, k_words = (s.k + 127) / 128;
    auto pack = [&](const ref::QuantMatrix& q) {
      const std::vector<uint32_t> w = ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, groups);
      md->packed.emplace_back(w.size() * 4);
      md->packed.back().upload(w.data(), w.size() * 4);
      return TensorView::matrix(md->packed.back().get(), DType::kUE8M0, k_words, 4 * q.scale_rows, device);
    };
    md->packed.reserve(1 + copies);  // views point into the buffers: no reallocation
    md->a_packed = pack(qa);
    for (int i = 0; i < copies; ++i) md->b_packed.push_back(pack(qb));
  }
  if (mode == ScaleMode::kBlockscale) md->a_mn = bench::upload_mn_major_scales(qa, device);
  md->ref = bench::DeviceBuffer(static_cast<std::size_t>(s.m * s.n) * sizeof(float));
  bench::gpu_reference_gemm(md->problem, md->a.view, md->b[0].view,
                            {md->a.scale_view, md->b[0].scale_view}, md->ref.as<float>(), stream);
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  if (static_cast<double>(s.m) * s.n * s.k <= cpu_max_macs) {
    md->ref64 = ref::gemm_f64(qa, qb);
    double sq = 0;
    for (double v : md->ref64) sq += v * v;
    md->ref64_rms = std::sqrt(sq / md->ref64.size());
    const std::vector<float> g =
        bench::download_as_f32(TensorView::matrix(md->ref.get(), DType::kF32, s.m, s.n, device));
    // Both sum in fp64; they differ only by the fp32 rounding of each dequantised operand and of
    // the result (~1e-7 relative), so 1e-5 is a wide margin that still catches any real slip.
    md->ref_check = ref::compare(g.data(), md->ref64.data(), g.size(), 1e-5, 1e-5 * md->ref64_rms);
    md->ref_checked = true;
  }
  return md;
}

// ---- arms ----

struct ArmState {
  std::string name;           // "weave", "weave-mn", "weave-packed", "cublaslt", "cublaslt-ptpc", "cublaslt-bs", "weave-bs"
  const ModeData* data = nullptr;
  ScaleLayout layout = ScaleLayout::kRaw;  // mxfp8 scales the weave arm reads
  MxRoute route = MxRoute::kAuto;          // mxfp8: the weave arm's route (kAuto: the planner's)
  ScaleARoute sa_route = ScaleARoute::kAuto;  // blockscale raw: the route for A's scales
  int cluster = 0;                            // GemmPlanOverrides::cluster
  GemmProblem problem;        // the arm's own mode, the row's out dtype
  bool fast_accum = false;
  std::string unsupported;    // non-empty: not run
  std::string error;          // non-empty: failed while running (counts as a failure)
  std::string describe;       // plan / algorithm
  bench::DeviceBuffer out;
  TensorView out_view;
  std::vector<Gemm> gemms;                       // weave: one per weight copy
  bench::DeviceBuffer workspace;
  std::unique_ptr<bench::CublasLtGemm> lt;       // cuBLASLt
  std::vector<bench::CublasLtScales> lt_scales;  // one per weight copy
  int64_t wrong = 0;
  nlohmann::json checks = nlohmann::json::object();
  bench::Timing timing;

  bool runnable() const { return unsupported.empty() && error.empty(); }
  int copies() const { return static_cast<int>(data->b.size()); }
  void enqueue(cudaStream_t s, int call) {
    const int i = call % copies();
    if (lt)
      lt->run(data->a.view, data->b[i].view, lt_scales[i], out_view, s);
    else
      gemms[i].run(s);
  }
};

void alloc_output(ArmState& arm, int device) {
  const GemmProblem& p = arm.problem;
  arm.out = bench::DeviceBuffer(static_cast<std::size_t>(p.m * p.n) * dtype_bytes(p.out_dtype));
  arm.out_view = TensorView::matrix(arm.out.get(), p.out_dtype, p.m, p.n, device);
}

void setup_weave(ArmState& arm) {
  const std::string bad = gemm_validate_problem(arm.problem);
  if (!bad.empty()) {
    arm.unsupported = bad;
    return;
  }
  try {
    for (std::size_t i = 0; i < arm.data->b.size(); ++i)
      arm.gemms.emplace_back(arm.problem, arm.data->a.view, arm.data->b[i].view, arm.data->scales(i, arm.layout),
                             arm.out_view,
                             GemmPlanOverrides{.mx_route = arm.route, .scale_a_route = arm.sa_route, .cluster = arm.cluster});
    // split-K plans write fp32 partials into a workspace; the weight copies run one after another
    // on one stream, so they share it.
    const std::size_t ws = arm.gemms[0].workspace_bytes();
    if (ws) {
      arm.workspace = bench::DeviceBuffer(ws);
      for (auto& g : arm.gemms) g.set_workspace(arm.workspace.get(), ws);
    }
    const GemmPlan& plan = arm.gemms[0].plan();
    arm.describe = plan.kernel + " grid " + std::to_string(plan.grid) + " split_k " +
                   std::to_string(plan.split_k) + " (" + plan.reason + ")";
  } catch (const Error& e) {
    // Only a documented refusal (kUnsupported: no instance built for the mode, ...) is a skipped
    // row; anything else (kInternal, a CUDA error, a bad argument the suite built) fails the run.
    arm.gemms.clear();
    if (e.status() == Status::kUnsupported) arm.unsupported = e.what();
    else arm.error = e.what();
  }
}

void setup_cublaslt(ArmState& arm, int device, cudaStream_t stream) {
  const std::string why = bench::CublasLtGemm::supports(arm.problem);
  if (!why.empty()) {
    arm.unsupported = why;
    return;
  }
  try {
    arm.lt = std::make_unique<bench::CublasLtGemm>(arm.problem, device,
                                                   bench::CublasLtOptions{.fast_accum = arm.fast_accum});
  } catch (const Error& e) {
    if (e.status() != Status::kUnsupported) throw;
    arm.unsupported = e.what();
    return;
  }
  for (const auto& b : arm.data->b)
    arm.lt_scales.push_back(arm.lt->prepare_scales({arm.data->a.scale_view, b.scale_view}, stream));
  arm.describe = arm.lt->describe();
}

// Compares the arm's current output with its references; returns the number of wrong elements
// and records the comparison under checks[label].
int64_t check_output(ArmState& arm, const std::string& label, bool with_cpu, cudaStream_t stream) {
  const bench::Tolerance tol =
      bench::gemm_tolerance(arm.problem.mode, arm.problem.out_dtype, arm.fast_accum);
  const ref::Comparison g = bench::gpu_compare(arm.out_view, arm.data->ref.as<float>(), tol, stream);
  auto as_json = [](const ref::Comparison& c) {
    return nlohmann::json{{"wrong", c.wrong},         {"nonfinite", c.nonfinite},
                          {"never_written", c.never_written}, {"rel_l2", c.rel_l2},
                          {"max_abs", c.max_abs},     {"first_wrong", c.first_wrong}};
  };
  arm.checks[label + "_gpu_ref"] = as_json(g);
  int64_t wrong = g.wrong;
  if (with_cpu && !arm.data->ref64.empty()) {
    const std::vector<float> h = bench::download_as_f32(arm.out_view);
    // bf16 values widen exactly; poison (0x7FC0) widens to fp32 poison (0x7FC00000).
    const ref::Comparison c = ref::compare(h.data(), arm.data->ref64.data(), h.size(), tol.rtol,
                                           tol.atol + tol.atol_rms * arm.data->ref64_rms);
    arm.checks[label + "_cpu_fp64"] = as_json(c);
    wrong += c.wrong;
  }
  return wrong;
}

// Poisons the output, runs one call (weight copy 0) and checks it.
void validate(ArmState& arm, cudaStream_t stream) {
  try {
    bench::poison_nan(arm.out.get(), arm.out.bytes(), arm.problem.out_dtype, stream);
    arm.enqueue(stream, 0);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  } catch (const Error& e) {
    if (e.status() == Status::kUnsupported) {
      arm.unsupported = e.what();
    } else {
      arm.error = e.what();
      arm.wrong = -1;
    }
    return;
  }
  arm.wrong += check_output(arm, "validation", true, stream);
}

std::string quant_name(const GemmProblem& p) {
  return std::string(to_string(p.mode)) + "->" + std::string(to_string(p.out_dtype));
}

double tflops(const GemmProblem& p, double us) {
  return 2.0 * double(p.m) * double(p.n) * double(p.k) / (us * 1e-6) / 1e12;
}

// ---- targets (issue 3; mxfp8 from issue 4) ----

// Prints one line per target the run asked for and returns false if any is missed
// (cli/gemm_targets: a requested target without weave rows is missed, not skipped).
bool report_targets(const bench::Report& report, const std::vector<std::string>& requested_quants, nlohmann::json& out) {
  std::vector<std::string> fields;  // each ratio field once (several targets read "ratio")
  for (const auto& t : cli::gemm_targets())
    if (std::find(fields.begin(), fields.end(), t.against) == fields.end()) fields.push_back(t.against);
  std::vector<cli::GemmTargetValue> values;
  // The arm each target reads: weave's, or for blockscale weave-mn (its A scales in the
  // M-contiguous layout the cuBLASLt arm is given too; the row-major arm is reported beside it).
  for (const auto& row : report.rows())
    if (row.mode == (row.quant.rfind("blockscale", 0) == 0 ? "weave-mn" : "weave"))
      for (const auto& f : fields)
        if (row.extra.contains(f) && row.extra[f].is_number())
          values.push_back({row.quant, f, row.extra[f].get<double>()});
  bool all_met = true;
  for (const auto& r : cli::evaluate_gemm_targets(cli::gemm_targets(), requested_quants, values)) {
    all_met = all_met && r.met;
    if (r.shapes == 0) {
      std::printf("# target %-16s %-26s MISSED: %s\n", r.quant.c_str(), r.against.c_str(), r.why.c_str());
    } else {
      std::printf("# target %-16s %-26s median %.3f (<= %.2f)  max %.3f%s  over %zu shapes: %s\n", r.quant.c_str(),
                  r.against.c_str(), r.median, r.median_max, r.max,
                  r.each_max > 0 ? (" (<= " + std::to_string(r.each_max).substr(0, 4) + ")").c_str() : "", r.shapes,
                  r.met ? "met" : "MISSED");
    }
    out.push_back({{"quant", r.quant}, {"against", r.against}, {"median", r.median}, {"max", r.max},
                   {"median_target", r.median_max}, {"each_target", r.each_max}, {"shapes", r.shapes},
                   {"met", r.met}, {"why", r.why}});
  }
  return all_met;
}

// ---- the suite ----

struct ArmSpec {
  std::string name;
  ScaleMode mode;
  bool weave;
  ScaleLayout layout = ScaleLayout::kRaw;
  MxRoute route = MxRoute::kAuto;
  ScaleARoute sa_route = ScaleARoute::kAuto;
  int cluster = 0;  // GemmPlanOverrides::cluster (2: the 2-CTA cluster instances, forced)
};

std::vector<ArmSpec> arms_for(ScaleMode mode, const std::vector<ScaleLayout>& layouts, bool clusters) {
  switch (mode) {
    case ScaleMode::kBF16: return {{"weave", mode, true}, {"cublaslt", mode, false}};
    case ScaleMode::kPtpc:
      if (clusters) return {{"weave", mode, true}, {"weave-c2", mode, true, ScaleLayout::kRaw, MxRoute::kAuto, ScaleARoute::kAuto, 2}, {"cublaslt", mode, false}};
      return {{"weave", mode, true}, {"cublaslt", mode, false}};
    case ScaleMode::kBlockscale:
      if (clusters)
        return {{"weave", mode, true},
                {"weave-mn", mode, true, ScaleLayout::kMnMajor},
                {"weave-mn-c2", mode, true, ScaleLayout::kMnMajor, MxRoute::kAuto, ScaleARoute::kAuto, 2},
                {"cublaslt", mode, false}};
      return {{"weave", mode, true},
              {"weave-as-given", mode, true, ScaleLayout::kRaw, MxRoute::kAuto, ScaleARoute::kAsGiven},
              {"weave-mn-copy", mode, true, ScaleLayout::kRaw, MxRoute::kAuto, ScaleARoute::kMnMajorCopy},
              {"weave-mn", mode, true, ScaleLayout::kMnMajor},
              {"cublaslt", mode, false},
              {"cublaslt-ptpc", ScaleMode::kPtpc, false}};
    case ScaleMode::kMxfp8: {
      std::vector<ArmSpec> arms;
      for (ScaleLayout l : layouts) {
        const std::string name = l == ScaleLayout::kRaw ? "weave" : "weave-packed";
        arms.push_back({name, mode, true, l});
        arms.push_back({name + "-native", mode, true, l, MxRoute::kNative});
        // The route forced too (raw only: packed differs only in how the conversion reads scales),
        // so a shape where the planner keeps native shows what the route would have cost.
        if (l == ScaleLayout::kRaw) arms.push_back({"weave-bf16-route", mode, true, l, MxRoute::kBf16});
      }
      arms.push_back({"cublaslt-bs", ScaleMode::kBlockscale, false});
      // Our faster blockscale layout: the mxfp8 "<= 1.25x weave blockscale" target reads this.
      arms.push_back({"weave-bs", ScaleMode::kBlockscale, true, ScaleLayout::kMnMajor});
      return arms;
    }
  }
  return {};
}

int run_gemm_suite(const BenchOptions& common, const GemmSuiteOptions& opt) {
  // Every option first: nothing below may probe a GPU or wait for one before the input is known good.
  check_bench_options(common);
  const std::vector<Shape> shapes = shapes_from(opt);
  std::vector<ScaleMode> modes;
  for (const auto& q : opt.quants) {
    const auto m = parse_scale_mode(q);
    WEAVE_EXPECT_ARG(m.has_value(), "--quant: '" << q << "' is not one of bf16, ptpc, blockscale, mxfp8");
    modes.push_back(*m);
  }
  std::vector<DType> outs;
  for (const auto& o : opt.outs) {
    const auto d = parse_dtype(o);
    WEAVE_EXPECT_ARG(d == DType::kBF16 || d == DType::kF32, "--out: '" << o << "' is not bf16 or fp32");
    outs.push_back(*d);
  }
  std::vector<ScaleLayout> layouts;
  for (const auto& l : opt.layouts) {
    const auto x = parse_scale_layout(l);
    WEAVE_EXPECT_ARG(x.has_value() && *x != ScaleLayout::kMnMajor,
                     "--layout: '" << l << "' is not raw or packed (mxfp8 scale layouts; blockscale rows always "
                                          "measure both of its layouts, raw and mn-major)");
    if (std::find(layouts.begin(), layouts.end(), *x) == layouts.end()) layouts.push_back(*x);
  }
  WEAVE_EXPECT_ARG(!modes.empty() && !outs.empty() && !layouts.empty(),
                   "--quant, --out and --layout must each name at least one");
  // The kernels' rules too (as `bench gemm-ar` checks its shape): a shape a requested mode or
  // output cannot run is refused by name here, not found out after the GPU probe.
  const bool single = opt.m > 0;
  for (std::size_t si = 0; si < shapes.size(); ++si)
    for (ScaleMode mode : modes)
      for (DType out : outs) {
        GemmProblem p;
        p.m = shapes[si].m;
        p.n = shapes[si].n;
        p.k = shapes[si].k;
        p.mode = mode;
        p.out_dtype = out;
        const std::string bad = gemm_validate_problem(p);
        WEAVE_EXPECT_ARG(bad.empty(), name_gemm_rules(bad, p, single && si == 0 ? "" : "--shapes " + shape_name(shapes[si])));
      }

  const std::vector<int> devices = bench_devices(common);
  WEAVE_EXPECT(!devices.empty(), Status::kNoDevice, "no Hopper GPU visible");
  const int device = devices[0];
  WEAVE_CHECK_CUDA(cudaSetDevice(device));
  const std::string gate = gate_idle(common, {device});
  int l2 = 0;
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  cudaStream_t stream = nullptr;
  WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } stream_guard{stream};

  bench::Report report("gemm");
  bool failed = false;
  nlohmann::json reference_checks = nlohmann::json::array();
  std::vector<std::string> unsupported_notes;
  const int total = static_cast<int>(shapes.size() * modes.size() * outs.size());
  int done = 0;

  for (std::size_t si = 0; si < shapes.size(); ++si) {
    const Shape& s = shapes[si];
    std::fprintf(stderr, "weave bench gemm: shape %zu/%zu %s: generating inputs\n", si + 1,
                 shapes.size(), shape_name(s).c_str());
    const std::vector<float> xa = bench::random_operand(opt.seed * 1000003 + si * 2, s.m, s.k);
    const std::vector<float> xb = bench::random_operand(opt.seed * 1000003 + si * 2 + 1, s.n, s.k);
    std::map<ScaleMode, std::unique_ptr<ModeData>> data;  // per shape, made on first use
    auto data_for = [&](ScaleMode mode) -> const ModeData* {
      auto& slot = data[mode];
      if (!slot) {
        slot = make_mode_data(mode, s, xa, xb, common.hot, static_cast<std::size_t>(l2),
                              opt.cpu_ref_max_macs, device, stream);
        if (slot->ref_checked) {
          const bool ok = slot->ref_check.wrong == 0;
          failed = failed || !ok;
          reference_checks.push_back({{"shape", shape_name(s)}, {"mode", to_string(mode)},
                                      {"wrong", slot->ref_check.wrong}, {"rel_l2", slot->ref_check.rel_l2}});
          if (!ok)
            std::fprintf(stderr, "weave bench gemm: GPU reference DISAGREES with fp64 for %s %s: %lld wrong\n",
                         shape_name(s).c_str(), std::string(to_string(mode)).c_str(),
                         static_cast<long long>(slot->ref_check.wrong));
        }
      }
      return slot.get();
    };

    for (ScaleMode mode : modes) {
      for (DType out : outs) {
        ++done;
        GemmProblem row_problem{.m = s.m, .n = s.n, .k = s.k, .mode = mode, .out_dtype = out};
        const std::string quant = quant_name(row_problem);
        std::vector<std::unique_ptr<ArmState>> arms;
        try {
          for (const ArmSpec& spec : arms_for(mode, layouts, opt.clusters)) {
            if (spec.weave && opt.baselines_only) continue;
            auto arm = std::make_unique<ArmState>();
            arm->name = spec.name;
            arm->data = data_for(spec.mode);
            arm->problem = arm->data->problem;
            arm->problem.out_dtype = out;
            arm->layout = spec.layout;
            arm->route = spec.route;
            arm->sa_route = spec.sa_route;
            arm->cluster = spec.cluster;
            arm->problem.scale_layout = spec.layout;
            arm->fast_accum = opt.fast_accum && spec.mode == ScaleMode::kPtpc && !spec.weave;
            alloc_output(*arm, device);
            if (spec.weave)
              setup_weave(*arm);
            else
              setup_cublaslt(*arm, device, stream);
            if (arm->runnable()) validate(*arm, stream);
            arms.push_back(std::move(arm));
          }
          std::vector<bench::Arm> timed;
          std::vector<ArmState*> timed_state;
          int max_copies = 1;
          for (auto& a : arms)
            if (a->runnable()) {
              ArmState* p = a.get();
              timed.push_back({p->name, [p](cudaStream_t st, int call) { p->enqueue(st, call); }});
              timed_state.push_back(p);
              max_copies = std::max(max_copies, p->copies());
            }
          if (!timed.empty()) {
            bench::TimingConfig cfg;
            // Cold: one graph touches every weight copy once, so no call finds its weights in L2.
            cfg.calls_per_graph = std::max(common.calls_per_graph, max_copies);
            cfg.warmup = common.warmup;
            cfg.samples = common.iters;
            // After timing: fresh poison, one more replay of the arm's timed graph, then the check,
            // so what is checked is the timed graph's own output and an element the timed calls
            // stopped writing cannot pass on a value left by an earlier call.
            cfg.after_timing = [&](size_t i, const std::function<void()>& replay) {
              ArmState& st = *timed_state[i];
              bench::poison_nan(st.out.get(), st.out.bytes(), st.problem.out_dtype, stream);
              replay();
              WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
              st.wrong += check_output(st, "after_timing", false, stream);
            };
            const std::vector<bench::Timing> t = bench::time_alternating(timed, cfg, stream);
            for (std::size_t i = 0; i < t.size(); ++i) timed_state[i]->timing = t[i];
          }
        } catch (const Error& e) {
          // A failure outside one arm's own run (setup of data, timing): one failed row.
          failed = true;
          bench::Row row;
          row.shape = shape_name(s);
          row.quant = quant;
          row.mode = "error";
          row.extra["error"] = e.what();
          report.add(row);
          std::fprintf(stderr, "weave bench gemm: [%d/%d] %s %s: ERROR %s\n", done, total,
                       shape_name(s).c_str(), quant.c_str(), e.what());
          continue;
        }

        // Rows: the first cuBLASLt arm is the weave row's baseline.
        const ArmState* baseline = nullptr;
        const ArmState* lt_ptpc = nullptr;
        const ArmState* weave_bs = nullptr;
        const ArmState* weave_raw = nullptr;
        for (auto& a : arms) {
          if (a->name == "weave" && a->runnable()) weave_raw = a.get();
          if (!baseline && a->name.rfind("cublaslt", 0) == 0 && a->runnable()) baseline = a.get();
          if (a->name == "cublaslt-ptpc" && a->runnable()) lt_ptpc = a.get();
          if (a->name == "weave-bs" && a->runnable()) weave_bs = a.get();
        }
        std::string progress;
        for (auto& a : arms) {
          bench::Row row;
          row.shape = shape_name(s);
          row.quant = quant_name(a->problem);
          row.mode = a->name;
          row.wrong = a->runnable() ? a->wrong : -1;
          row.extra["checks"] = a->checks;
          row.extra["weight_copies"] = a->copies();
          if (!a->describe.empty()) row.extra["plan"] = a->describe;
          if (a->fast_accum) row.extra["fast_accum"] = true;
          if (!a->unsupported.empty()) {
            row.extra["unsupported"] = a->unsupported;
            unsupported_notes.push_back(row.shape + " " + row.quant + " " + row.mode + ": " + a->unsupported);
          }
          if (!a->error.empty()) {
            row.extra["error"] = a->error;
            failed = true;
          }
          if (a->runnable() && a->timing.samples > 0) {
            row.time_us = a->timing.median_us;
            row.noise_pct = a->timing.noise_pct;
            row.tflops = tflops(a->problem, row.time_us);
            if (a->name.rfind("weave", 0) == 0 && baseline) {
              row.baseline = baseline->name;
              row.baseline_us = baseline->timing.median_us;
              row.ratio = row.time_us / row.baseline_us;
              row.extra["ratio"] = row.ratio;
              if (lt_ptpc) row.extra["ratio_vs_cublaslt_ptpc"] = row.time_us / lt_ptpc->timing.median_us;
              if (weave_bs && a->problem.mode == ScaleMode::kMxfp8)
                row.extra["ratio_vs_weave_blockscale"] = row.time_us / weave_bs->timing.median_us;
              if (weave_raw && a->name == "weave-packed")
                row.extra["ratio_vs_weave_raw"] = row.time_us / weave_raw->timing.median_us;
              if (a->problem.mode == ScaleMode::kMxfp8 && !a->gemms.empty())
                row.extra["mx_route"] = a->gemms[0].plan().mx_dequant ? "bf16" : "native";
            }
          }
          if (row.wrong > 0) failed = true;
          char buf[160];
          if (!a->runnable())
            std::snprintf(buf, sizeof(buf), " %s %s", a->name.c_str(), a->error.empty() ? "unsupported" : "FAILED");
          else
            std::snprintf(buf, sizeof(buf), " %s %.1f us (#wrong %lld)", a->name.c_str(), row.time_us,
                          static_cast<long long>(row.wrong));
          progress += buf;
          report.add(std::move(row));
        }
        std::fprintf(stderr, "weave bench gemm: [%d/%d] %s %s:%s\n", done, total, shape_name(s).c_str(),
                     quant.c_str(), progress.c_str());
      }
    }
  }

  report.print_table(stdout);
  for (const auto& note : unsupported_notes) std::printf("# unsupported: %s\n", note.c_str());
  nlohmann::json targets = nlohmann::json::array();
  // The targets of every quant the run measured weave in (none with --baselines-only).
  std::vector<std::string> requested_quants;
  if (!opt.baselines_only)
    for (ScaleMode m : modes)
      for (DType o : outs) requested_quants.push_back(std::string(to_string(m)) + "->" + std::string(to_string(o)));
  const bool targets_met = report_targets(report, requested_quants, targets);
  const std::string busy_after = bench::IdleGate().busy_after({device}, common.idle_threshold);
  if (!busy_after.empty()) std::printf("# BUSY after run: %s\n", busy_after.c_str());
  if (!common.json_path.empty()) {
    nlohmann::json meta = {{"machine", bench::machine_json()},
                           {"idle_gate", gate},
                           {"busy_after", busy_after},
                           {"device", device},
                           {"cold", !common.hot},
                           {"calls_per_graph_min", common.calls_per_graph},
                           {"warmup", common.warmup},
                           {"samples", common.iters},
                           {"quants", opt.quants},
                           {"outs", opt.outs},
                           {"layouts", opt.layouts},
                           {"fast_accum_cublaslt_ptpc", opt.fast_accum},
                           {"cpu_ref_max_macs", opt.cpu_ref_max_macs},
                           {"seed", opt.seed},
                           {"baselines_only", opt.baselines_only},
                           {"clusters", opt.clusters},
                           {"reference_checks", reference_checks},
                           {"targets", targets}};
    report.write_json(common.json_path, meta);
  }
  if (failed) {
    std::fprintf(stderr, "weave bench gemm: FAILED: a row has #wrong > 0, an arm failed, or the GPU "
                         "reference disagreed with fp64\n");
    return 1;
  }
  if (opt.check_targets && !targets_met) {
    std::fprintf(stderr, "weave bench gemm: a target was missed (--check-targets)\n");
    return 1;
  }
  return 0;
}

GemmSuiteOptions& suite_options() {
  static GemmSuiteOptions options;
  return options;
}

void add_gemm_suite(CLI::App& bench, BenchOptions& common) {
  GemmSuiteOptions& o = suite_options();
  auto* app = bench.add_subcommand(
      "gemm",
      "weave::Gemm vs cuBLASLt (same mode, scales, output dtype; blockscale also vs cuBLASLt ptpc), "
      "cold weights, CUDA graphs, alternating arms, every row validated against a GPU reference "
      "(and CPU fp64 for small shapes). Default shapes: 14 tensor-parallel LLM layer shapes "
      "(docs/perf/gemm.md).");
  add_common_bench_options(*app, common);
  const auto dim = int_range(1, gemm::kMaxDim);
  app->add_option("-m", o.m, "rows of A and C (with -n and -k: one shape instead of the list)")->check(dim);
  app->add_option("-n", o.n, "rows of B (output columns)")->check(dim);
  app->add_option("-k", o.k, "reduction length")->check(dim);
  add_list_option(*app, "--shapes", o.shapes, "shapes as MxNxK, comma-separated (instead of the default list)");
  add_list_option(*app, "--quant", o.quants, "quantisation modes: bf16, ptpc, blockscale, mxfp8");
  add_list_option(*app, "--out", o.outs, "output dtypes: bf16, fp32");
  add_list_option(*app, "--layout", o.layouts,
                  "mxfp8 scale layouts to measure: raw, packed (per layout: the planner's route and the native kernel "
                  "forced; raw also the bf16 route forced)");
  app->add_flag("--fast-accum", o.fast_accum,
                "cuBLASLt ptpc arms use fp8 fast accumulation (no promotion; looser bound)");
  app->add_option("--cpu-ref-max", o.cpu_ref_max_macs,
                  "largest M*N*K also checked against the CPU fp64 reference (0: none)")
      ->check(finite_range(0, 1e18))
      ->capture_default_str();
  app->add_flag("--check-targets", o.check_targets, "exit 1 when a ratio target (docs/perf/gemm.md) is missed");
  app->add_flag("--baselines-only", o.baselines_only,
                "leave out the weave arms (measure and validate the cuBLASLt baselines alone)");
  app->add_flag("--clusters", o.clusters,
                "also time weave with 2-CTA clusters forced (pairs of CTAs share each B tile, loaded once and "
                "multicast): arms weave-c2 (ptpc) and weave-mn-c2 (blockscale, A scales mn-major); blockscale rows "
                "then keep weave, weave-mn and cublaslt");
  app->add_option("--seed", o.seed, "seed of the random inputs (>= 0)")
      ->check(digits_only())
      ->capture_default_str();
  app->callback([&common] { exit_code() = run_gemm_suite(common, suite_options()); });
}

int run_gemm_default(const BenchOptions& common) {
  GemmSuiteOptions o;
  for (const Shape& s : kDefaultShapes) o.shapes.push_back(shape_name(s));
  o.outs = {"bf16"};
  return run_gemm_suite(common, o);
}

}  // namespace

WEAVE_REGISTER_BENCH_SUITE(gemm, "weave::Gemm vs cuBLASLt: bf16, fp8 ptpc, fp8 blockscale, mxfp8",
                           add_gemm_suite, run_gemm_default);

}  // namespace weave::cli
