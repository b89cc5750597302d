// `weave bench decode`: one decoder layer's GEMMs (QKV, attention output, gate+up, down; the
// layer presets of weave/layer_presets.hpp at a tensor-parallel world's shard) chained back to
// back as one decode step, at M = 1-32 tokens (issue 38). Per (layer, tp, quant, M) the arms,
// timed alternating in CUDA graphs of --calls steps, are:
//   read       a plain streaming read (bench::launch_stream_read) over each GEMM's weight values,
//              one launch per GEMM: what a chain of memory-bound kernels of these sizes reaches
//   weave      weave::Gemm per GEMM, the planner's plan (the decode GEMV up to M = 32 where it fits)
//   weave+pdl  the same with Gemm::set_allow_pdl(true): each GEMM's first weight loads overlap the
//              tail of the kernel before it (the caller's opt-in; the weights are never written here)
//   cublaslt   cuBLASLt per GEMM, the same operands; where its blockscale mode refuses M (it needs
//              M % 4 == 0) it runs M rounded up to 4 rows, and the row says so
// and once per run the HBM read ceiling (the read kernel over 1 GiB).
// Bytes: each GEMM's weight values and scales (the activations and outputs are under 1% of them
// at M <= 32 and are not counted); GB/s = layer weight bytes / time per step; %HBM = that over
// the ceiling. Targets (cli/decode_options.hpp, from the issue): M <= 8 >= 75% of the ceiling,
// M 9-32 >= 60%, both <= 0.8x the cuBLASLt chain; above 32 <= 1.0x. The best weave arm is judged.
// Inputs: every GEMM has its own A (pre-quantised: the activation quantisation a real layer runs
// is not part of any arm) and its own output per arm, so the chain is GEMMs only; weights cold by
// default (the layer's weights are rotated through bench::cold_copies copies).
// Validation: every writing arm's outputs are NaN-poisoned, one eager step is run and each GEMM's
// output compared with bench::gpu_reference_gemm of its operands (bench::gemm_tolerance); after
// timing, the outputs are poisoned again, the timed graph replayed once and compared again.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "bench/harness.hpp"
#include "bench/stream_read.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/decode_options.hpp"
#include "cli/registry.hpp"
#include "common/check.hpp"
#include "gemm/pdl_flags.hpp"
#include "gemv/gemv.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "weave/gemm.hpp"
#include "weave/reference.hpp"

namespace weave::cli {
namespace {

struct DecodeSuiteOptions {
  DecodeOptions decode;
  bool check_targets = false;
  bool compare_routes = false;  // --compare-routes: arms gemv-route(+pdl), tiles-route(+pdl) at M <= 32
  std::uint64_t seed = 1;
};

// One run's weights: b[gemm][copy], copy 0 and its cold clones (identical bytes).
struct LayerWeights {
  std::vector<std::vector<bench::DeviceOperand>> b;
  int copies = 1;
};

// The activations of every GEMM at `m` rows, and each GEMM's fp32 reference output.
struct StepInputs {
  std::int64_t m = 0;
  std::vector<bench::DeviceOperand> a;
  std::vector<bench::DeviceBuffer> ref;
};

GemmProblem problem_of(const LayerGemmShard& g, std::int64_t m, ScaleMode quant) {
  return GemmProblem{.m = m, .n = g.n, .k = g.k, .mode = quant, .out_dtype = DType::kBF16};
}

LayerWeights make_weights(const DecodeRun& run, std::uint64_t seed, bool hot, std::size_t l2, int device) {
  LayerWeights w;
  const std::int64_t bytes = layer_weight_bytes(run);
  w.copies = hot ? 1 : bench::cold_copies(static_cast<std::size_t>(bytes), l2);
  std::fprintf(stderr, "weave bench decode: %s tp%d %s: making %zu weights (%.1f MB per copy, %d copies)\n",
               std::string(run.layer->name).c_str(), run.tp, std::string(to_string(run.quant)).c_str(),
               run.gemms.size(), bytes / 1e6, w.copies);
  for (size_t g = 0; g < run.gemms.size(); ++g) {
    const LayerGemmShard& s = run.gemms[g];
    const std::vector<float> x = bench::random_operand(seed * 1000 + g, s.n, s.k);
    std::vector<bench::DeviceOperand> copies;
    copies.push_back(bench::upload_operand(bench::quantize_parallel(x, s.n, s.k, run.quant, ref::Operand::kB), device));
    for (int c = 1; c < w.copies; ++c) copies.push_back(bench::clone_operand(copies[0]));
    w.b.push_back(std::move(copies));
  }
  return w;
}

StepInputs make_inputs(const DecodeRun& run, const LayerWeights& w, std::int64_t m, std::uint64_t seed, int device,
                       cudaStream_t stream) {
  StepInputs in;
  in.m = m;
  for (size_t g = 0; g < run.gemms.size(); ++g) {
    const LayerGemmShard& s = run.gemms[g];
    const std::vector<float> x = bench::random_operand(seed * 1000 + 500 + g * 300 + m, m, s.k);
    in.a.push_back(bench::upload_operand(bench::quantize_parallel(x, m, s.k, run.quant, ref::Operand::kA), device));
    in.ref.emplace_back(static_cast<std::size_t>(m * s.n) * sizeof(float));
    bench::gpu_reference_gemm(problem_of(s, m, run.quant), in.a[g].view, w.b[g][0].view,
                              {in.a[g].scale_view, w.b[g][0].scale_view}, in.ref[g].as<float>(), stream);
  }
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  return in;
}

// One arm of the chain. Writing arms own one bf16 output per GEMM ([in->m, n]).
struct ChainArm {
  std::string name;
  const StepInputs* in = nullptr;
  std::vector<bench::DeviceBuffer> out;
  std::function<void(cudaStream_t, int)> enqueue;
  std::string unsupported, error, note;
  std::vector<std::string> plans;
  std::int64_t wrong = 0;
  int checks = 0;
  bench::Timing timing;
  // weave: gemms[copy][gemm] and their workspaces; cuBLASLt: lt[gemm], lt_scales[gemm][copy].
  std::vector<std::vector<Gemm>> gemms;
  std::vector<bench::DeviceBuffer> workspaces;
  std::vector<std::unique_ptr<bench::CublasLtGemm>> lt;
  std::vector<std::vector<bench::CublasLtScales>> lt_scales;
  bool writes() const { return !out.empty(); }
  bool runnable() const { return unsupported.empty() && error.empty(); }
};

void make_outputs(ChainArm& arm, const DecodeRun& run) {
  for (const LayerGemmShard& g : run.gemms) arm.out.emplace_back(static_cast<std::size_t>(arm.in->m * g.n) * 2);
}

TensorView out_view(const ChainArm& arm, const DecodeRun& run, size_t g, int device) {
  return TensorView::matrix(arm.out[g].get(), DType::kBF16, arm.in->m, run.gemms[g].n, device);
}

void build_weave_arm(ChainArm& arm, const DecodeRun& run, const LayerWeights& w, bool pdl, int device,
                     DecodeRoute route) {
  make_outputs(arm, run);
  for (int c = 0; c < w.copies; ++c) {
    std::vector<Gemm> per_copy;
    for (size_t g = 0; g < run.gemms.size(); ++g) {
      const bench::DeviceOperand& a = arm.in->a[g];
      const bench::DeviceOperand& b = w.b[g][c];
      GemmPlanOverrides ov;
      ov.decode_route = route;  // gemv only where M allows it (resolve_decode_runs, --compare-routes)
      Gemm gemm(problem_of(run.gemms[g], arm.in->m, run.quant), a.view, b.view, {a.scale_view, b.scale_view},
                out_view(arm, run, g, device), ov);
      gemm.set_allow_pdl(pdl);
      if (gemm.workspace_bytes() > 0) {
        arm.workspaces.emplace_back(gemm.workspace_bytes());
        gemm.set_workspace(arm.workspaces.back().get(), arm.workspaces.back().bytes());
      }
      if (c == 0) {
        const GemmPlan& p = gemm.plan();
        arm.plans.push_back(std::string(run.gemms[g].name) + " " + std::to_string(run.gemms[g].n) + "x" +
                            std::to_string(run.gemms[g].k) + ": " +
                            (p.gemv ? "gemv split " + std::to_string(p.split_k) + " grid " + std::to_string(p.grid)
                                    : p.kernel + " grid " + std::to_string(p.grid) + " split_k " +
                                          std::to_string(p.split_k)));
      }
      per_copy.push_back(std::move(gemm));
    }
    arm.gemms.push_back(std::move(per_copy));
  }
  arm.enqueue = [&arm](cudaStream_t s, int call) {
    for (const Gemm& g : arm.gemms[call % arm.gemms.size()]) g.run(s);
  };
}

// cuBLASLt at M rows, or the "" reason it cannot run them.
std::string lt_refusal(const DecodeRun& run, std::int64_t m) {
  for (const LayerGemmShard& g : run.gemms) {
    const std::string why = bench::CublasLtGemm::supports(problem_of(g, m, run.quant));
    if (!why.empty()) return std::string(g.name) + ": " + why;
  }
  return "";
}

void build_cublaslt_arm(ChainArm& arm, const DecodeRun& run, const LayerWeights& w, int device, cudaStream_t stream) {
  make_outputs(arm, run);
  for (size_t g = 0; g < run.gemms.size(); ++g) {
    arm.lt.push_back(std::make_unique<bench::CublasLtGemm>(problem_of(run.gemms[g], arm.in->m, run.quant), device));
    std::vector<bench::CublasLtScales> scales;
    for (int c = 0; c < w.copies; ++c)
      scales.push_back(arm.lt[g]->prepare_scales({arm.in->a[g].scale_view, w.b[g][c].scale_view}, stream));
    arm.lt_scales.push_back(std::move(scales));
    arm.plans.push_back(std::string(run.gemms[g].name) + ": " + arm.lt[g]->describe());
  }
  arm.enqueue = [&arm, &run, &w, device](cudaStream_t s, int call) {
    const int c = call % w.copies;
    for (size_t g = 0; g < arm.lt.size(); ++g)
      arm.lt[g]->run(arm.in->a[g].view, w.b[g][c].view, arm.lt_scales[g][c], out_view(arm, run, g, device), s);
  };
}

void poison(const ChainArm& arm, cudaStream_t stream) {
  for (const bench::DeviceBuffer& o : arm.out) bench::poison_nan(o.get(), o.bytes(), DType::kBF16, stream);
}

// Compares every output of `arm` with its reference; adds to arm.wrong; says the first miss.
void check(ChainArm& arm, const DecodeRun& run, int device, cudaStream_t stream) {
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  for (const auto& per_copy : arm.gemms)
    if (!per_copy.empty()) per_copy[0].check();  // a pipeline timeout of any weave kernel (process-wide)
  const bench::Tolerance tol = bench::gemm_tolerance(run.quant, DType::kBF16);
  for (size_t g = 0; g < arm.out.size(); ++g) {
    const ref::Comparison c = bench::gpu_compare(out_view(arm, run, g, device), arm.in->ref[g].as<float>(), tol, stream);
    ++arm.checks;
    arm.wrong += c.wrong;
    if (c.wrong > 0)
      std::fprintf(stderr, "weave bench decode: %s %s %s: %lld wrong of %lld (rel_l2 %.3g, first wrong %lld)\n",
                   decode_row_name(run, arm.in->m).c_str(), arm.name.c_str(), std::string(run.gemms[g].name).c_str(),
                   static_cast<long long>(c.wrong), static_cast<long long>(arm.in->m * run.gemms[g].n), c.rel_l2,
                   static_cast<long long>(c.first_wrong));
  }
}

int run_decode_suite(const BenchOptions& common, const DecodeSuiteOptions& opt) {
  // Every option first: nothing below may probe a GPU before the input is known good.
  check_bench_options(common);
  const std::vector<DecodeRun> runs = resolve_decode_runs(opt.decode);
  WEAVE_EXPECT_ARG(!opt.compare_routes || opt.decode.route == "auto",
                   "--compare-routes: times both routes beside the planner's; leave --decode-route at auto (got "
                       << opt.decode.route << ")");
  WEAVE_EXPECT_ARG(common.devices.size() <= 1,
                   "--devices: the decode bench runs on one GPU (a tensor-parallel rank's shard); give one ordinal");
  const std::vector<int> devices = bench_devices(common);
  WEAVE_EXPECT(!devices.empty(), Status::kNoDevice, "no Hopper GPU visible");
  const int device = devices[0];
  WEAVE_CHECK_CUDA(cudaSetDevice(device));
  const std::string gate = gate_idle(common, {device});
  int l2 = 0, num_sms = 0;
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  cudaStream_t stream = nullptr;
  WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } stream_guard{stream};

  const double hbm_gbps = bench::measure_hbm_read_gbps(num_sms, stream);
  std::fprintf(stderr, "weave bench decode: HBM read ceiling %.0f GB/s (1 GiB streaming read)\n", hbm_gbps);
  if (opt.decode.route != "auto")
    std::fprintf(stderr, "weave bench decode: --decode-route %s: every weave GEMM at M <= 32 on that route\n",
                 opt.decode.route.c_str());
  bench::DeviceBuffer sink(64);

  bench::Report report("decode");
  bool failed = false, targets_met = true;
  std::vector<std::string> summary, notes, route_summary;
  size_t total = 0, done = 0;
  for (const DecodeRun& r : runs) total += r.ms.size();
  for (const DecodeRun& run : runs) {
    const LayerWeights w = make_weights(run, opt.seed, common.hot, static_cast<std::size_t>(l2), device);
    const std::int64_t bytes = layer_weight_bytes(run);
    for (const std::int64_t m : run.ms) {
      ++done;
      const StepInputs in = make_inputs(run, w, m, opt.seed, device, stream);
      // cuBLASLt's rows: M itself, else M rounded up to 4 (its blockscale mode), else none.
      std::int64_t m_lt = m;
      std::string lt_why = lt_refusal(run, m);
      if (!lt_why.empty() && m % 4 != 0 && lt_refusal(run, (m + 3) / 4 * 4).empty()) {
        m_lt = (m + 3) / 4 * 4;
        lt_why.clear();
      }
      std::unique_ptr<StepInputs> in_lt;
      if (lt_why.empty() && m_lt != m)
        in_lt = std::make_unique<StepInputs>(make_inputs(run, w, m_lt, opt.seed + 7, device, stream));

      std::vector<std::unique_ptr<ChainArm>> arms;
      auto add = [&](const std::string& name, const StepInputs* inputs) -> ChainArm& {
        arms.push_back(std::make_unique<ChainArm>());
        arms.back()->name = name;
        arms.back()->in = inputs;
        return *arms.back();
      };
      ChainArm& read = add("read", &in);
      read.enqueue = [&](cudaStream_t s, int call) {
        for (size_t g = 0; g < run.gemms.size(); ++g) {
          const bench::DeviceOperand& b = w.b[g][call % w.copies];
          bench::launch_stream_read(b.values.get(), b.values.bytes(), sink.as<std::uint32_t>(), num_sms, s);
        }
      };
      ChainArm* weave = nullptr;
      ChainArm* weave_pdl = nullptr;
      for (const bool pdl : {false, true}) {
        ChainArm& a = add(pdl ? "weave+pdl" : "weave", &in);
        (pdl ? weave_pdl : weave) = &a;
        try {
          build_weave_arm(a, run, w, pdl, device, run.route);
        } catch (const Error& e) {
          a.error = e.what();
        }
      }
      // --compare-routes: every GEMM forced onto each route, without and with PDL, timed with the
      // others. A GEMM that route cannot run (the GEMV's A slice at a long K) leaves the arm
      // unsupported.
      std::vector<ChainArm*> route_arms;  // gemv, gemv+pdl, tiles, tiles+pdl
      if (opt.compare_routes && m <= detail::kGemvMaxM)
        for (const auto& [name, route] : {std::pair{"gemv-route", DecodeRoute::kGemv},
                                          std::pair{"tiles-route", DecodeRoute::kTiles}})
          for (const bool pdl : {false, true}) {
            ChainArm& a = add(std::string(name) + (pdl ? "+pdl" : ""), &in);
            route_arms.push_back(&a);
            try {
              build_weave_arm(a, run, w, pdl, device, route);
            } catch (const Error& e) {
              (e.status() == Status::kInvalidArgument ? a.unsupported : a.error) = e.what();
            }
          }
      ChainArm& lt = add("cublaslt", in_lt ? in_lt.get() : &in);
      if (!lt_why.empty()) {
        lt.unsupported = lt_why;
      } else {
        try {
          build_cublaslt_arm(lt, run, w, device, stream);
          if (m_lt != m)
            lt.note = "cuBLASLt runs M = " + std::to_string(m_lt) + " (its blockscale mode needs M % 4 == 0)";
        } catch (const Error& e) {
          (e.status() == Status::kUnsupported ? lt.unsupported : lt.error) = e.what();
        }
      }

      // One eager step per writing arm, checked; then the alternating timing, each graph's last
      // replay checked again.
      std::vector<bench::Arm> timed;
      std::vector<ChainArm*> timed_of;
      for (auto& a : arms) {
        if (!a->runnable()) continue;
        try {
          if (a->writes()) {
            poison(*a, stream);
            a->enqueue(stream, 0);
            check(*a, run, device, stream);
          }
          timed.push_back({a->name, a->enqueue});
          timed_of.push_back(a.get());
        } catch (const Error& e) {
          a->error = e.what();
        }
      }
      bench::TimingConfig cfg;
      cfg.calls_per_graph = common.calls_per_graph;
      cfg.warmup = common.warmup;
      cfg.samples = common.iters;
      cfg.after_timing = [&](size_t i, const std::function<void()>& replay) {
        ChainArm& a = *timed_of[i];
        if (!a.writes()) return;
        poison(a, stream);
        replay();
        check(a, run, device, stream);
      };
      try {
        const std::vector<bench::Timing> t = bench::time_alternating(timed, cfg, stream);
        for (size_t i = 0; i < t.size(); ++i) timed_of[i]->timing = t[i];
      } catch (const Error& e) {
        for (ChainArm* a : timed_of) a->error = std::string("timing: ") + e.what();
      }

      // The best weave arm, judged against the targets; then one row per arm (weight GB/s and
      // %HBM, the ratio to the cuBLASLt chain).
      const double lt_us = lt.runnable() ? lt.timing.median_us : bench::kNaN;
      const double read_us = read.runnable() ? read.timing.median_us : bench::kNaN;
      auto hbm_fraction = [&](double us) { return bytes / (us * 1e3) / hbm_gbps; };
      const ChainArm* best = nullptr;
      for (auto& a : arms)
        if (a->name.rfind("weave", 0) == 0 && a->runnable() && a->timing.samples > 0 &&
            (!best || a->timing.median_us < best->timing.median_us))
          best = a.get();
      DecodeJudgement judged{.met = false, .text = "no weave arm ran"};
      if (best)
        judged = judge_decode(m, hbm_fraction(best->timing.median_us), best->timing.median_us / lt_us, read_us / lt_us);
      targets_met = targets_met && judged.met;
      std::int64_t flops_per_step = 0;
      for (const LayerGemmShard& g : run.gemms) flops_per_step += 2 * m * g.n * g.k;
      std::string progress;
      for (auto& a : arms) {
        bench::Row row;
        row.shape = decode_row_name(run, m);
        row.quant = std::string(to_string(run.quant)) + "->bf16";
        row.mode = a->name;
        row.wrong = !a->runnable() ? -1 : a->writes() ? a->wrong : 0;
        row.extra["checks"] = a->checks;
        row.extra["weight_bytes"] = bytes;
        row.extra["weight_copies"] = w.copies;
        row.extra["hbm_read_gbps"] = hbm_gbps;
        if (!a->writes()) row.extra["validated"] = "writes nothing (reads the weight values only)";
        if (!a->plans.empty()) row.extra["gemms"] = a->plans;
        if (!a->note.empty()) row.extra["note"] = a->note;
        if (!a->unsupported.empty()) {
          row.extra["unsupported"] = a->unsupported;
          notes.push_back(row.shape + " " + row.quant + " " + row.mode + ": " + a->unsupported);
        }
        if (!a->error.empty()) {
          row.extra["error"] = a->error;
          failed = true;
        }
        if (a->runnable() && a->timing.samples > 0) {
          row.time_us = a->timing.median_us;
          row.noise_pct = a->timing.noise_pct;
          row.tflops = flops_per_step / (row.time_us * 1e6);
          row.algbw_gbps = bytes / (row.time_us * 1e3);
          row.extra["hbm_fraction"] = hbm_fraction(row.time_us);
          row.extra["read_fraction"] = read_us / row.time_us;
          const bool forced_route = std::find(route_arms.begin(), route_arms.end(), a.get()) != route_arms.end();
          if ((a->name.rfind("weave", 0) == 0 || forced_route) && std::isfinite(lt_us)) {
            row.baseline = "cublaslt";
            row.baseline_us = lt_us;
            row.ratio = row.time_us / lt_us;
          }
        }
        if (a.get() == best)
          row.extra["target"] = {{"met", judged.met}, {"text", judged.text},
                                 {"min_hbm_fraction", decode_target(m).min_hbm_fraction},
                                 {"max_ratio", decode_target(m).max_ratio}};
        if (row.wrong > 0) failed = true;
        char buf[96];
        if (!a->runnable())
          std::snprintf(buf, sizeof buf, " %s %s", a->name.c_str(), a->error.empty() ? "unsupported" : "FAILED");
        else
          std::snprintf(buf, sizeof buf, " %s %.1f us", a->name.c_str(), a->timing.median_us);
        progress += buf;
        report.add(std::move(row));
      }
      auto us_of = [](const ChainArm& a) { return a.runnable() ? a.timing.median_us : bench::kNaN; };
      char line[400];
      std::snprintf(line, sizeof line, "%-24s %-12s %8.2f %8.2f %8.2f %8.2f %6.0f%% %6.0f%% %6.2f  %s%s%s",
                    decode_row_name(run, m).c_str(), std::string(to_string(run.quant)).c_str(), read_us, us_of(*weave),
                    us_of(*weave_pdl), lt_us, 100 * hbm_fraction(read_us),
                    best ? 100 * hbm_fraction(best->timing.median_us) : bench::kNaN,
                    best ? best->timing.median_us / lt_us : bench::kNaN, best ? best->name.c_str() : "",
                    best ? ": " : "", judged.text.c_str());
      summary.push_back(line);
      if (!route_arms.empty()) {
        std::string auto_routes;  // the planner's route of each GEMM, in chain order
        for (const std::string& p : weave->plans)
          auto_routes += (auto_routes.empty() ? "" : ",") + std::string(p.find(": gemv") != std::string::npos ? "gemv" : "tiles");
        std::snprintf(line, sizeof line, "%-24s %-12s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f   (weave: %s)",
                      decode_row_name(run, m).c_str(), std::string(to_string(run.quant)).c_str(), us_of(*weave),
                      us_of(*weave_pdl), us_of(*route_arms[0]), us_of(*route_arms[1]), us_of(*route_arms[2]),
                      us_of(*route_arms[3]), auto_routes.empty() ? "?" : auto_routes.c_str());
        route_summary.push_back(line);
      }
      std::fprintf(stderr, "weave bench decode: [%zu/%zu] %s %s:%s\n", done, total, decode_row_name(run, m).c_str(),
                   std::string(to_string(run.quant)).c_str(), progress.c_str());
    }
  }

  report.print_table(stdout);
  std::printf("\n# decode step per layer (us per step; %%HBM = layer weight bytes / time over the %.0f GB/s ceiling)\n",
              hbm_gbps);
  std::printf("# %-22s %-12s %8s %8s %8s %8s %7s %7s %6s  %s\n", "layer", "quant", "read", "weave", "+pdl", "cublaslt",
              "readHBM", "bestHBM", "ratio", "target (best weave arm)");
  std::printf("# readHBM / bestHBM: the streaming read's and the faster weave arm's weight bytes / time over the "
              "ceiling; ratio: the faster weave arm / cublaslt\n");
  std::printf("# +pdl arms: the tiled kernel's PDL launch is %s (WEAVE_GEMM_PDL)\n",
              gemm::describe_pdl_flags(gemm::pdl_flags_for_launch()).c_str());
  for (const std::string& s : summary) std::printf("  %s\n", s.c_str());
  if (!route_summary.empty()) {
    std::printf("\n# --compare-routes: the chain with every GEMM on the planner's route (weave), on the GEMV and on the\n"
                "# tiled kernels, each without and with PDL (us per step; nan: that route cannot run a GEMM of the layer)\n");
    std::printf("# %-22s %-12s %8s %8s %8s %8s %8s %8s\n", "layer", "quant", "weave", "+pdl", "gemv", "+pdl", "tiles",
                "+pdl");
    for (const std::string& s : route_summary) std::printf("  %s\n", s.c_str());
  }
  for (const std::string& n : notes) std::printf("# unsupported: %s\n", n.c_str());
  const std::string busy_after = bench::IdleGate().busy_after({device}, common.idle_threshold);
  if (!busy_after.empty()) std::printf("# BUSY after run: %s\n", busy_after.c_str());
  if (!common.json_path.empty()) {
    nlohmann::json meta = {{"machine", bench::machine_json()},
                           {"tiled_pdl", gemm::describe_pdl_flags(gemm::pdl_flags_for_launch())},
                           {"idle_gate", gate},
                           {"busy_after", busy_after},
                           {"device", device},
                           {"cold", !common.hot},
                           {"calls_per_graph", common.calls_per_graph},
                           {"warmup", common.warmup},
                           {"samples", common.iters},
                           {"hbm_read_gbps", hbm_gbps},
                           {"seed", opt.seed},
                           {"targets_met", targets_met}};
    report.write_json(common.json_path, meta);
  }
  if (failed) {
    std::fprintf(stderr, "weave bench decode: FAILED: a row has #wrong > 0 or an arm failed\n");
    return 1;
  }
  if (opt.check_targets && !targets_met) {
    std::fprintf(stderr, "weave bench decode: a target was missed (--check-targets)\n");
    return 1;
  }
  return 0;
}

DecodeSuiteOptions& suite_options() {
  static DecodeSuiteOptions options;
  return options;
}

void add_decode_suite(CLI::App& bench, BenchOptions& common) {
  DecodeSuiteOptions& o = suite_options();
  auto* app = bench.add_subcommand(
      "decode",
      "one decoder layer's GEMMs (QKV, attention output, gate+up, down) chained as a decode step at M = 1-32, "
      "one tensor-parallel rank's shards: weave (with and without PDL) vs the cuBLASLt chain and a streaming read "
      "of the same weights, in CUDA graphs, cold weights; reports time per step and weight bytes / time against the "
      "HBM read ceiling (targets: >= 75% at M <= 8, >= 60% at 16-32, <= 0.8x cuBLASLt).");
  add_common_bench_options(*app, common);
  add_decode_options(*app, o.decode);
  app->add_flag("--check-targets", o.check_targets, "exit 1 when the best weave arm misses a target of a row");
  app->add_flag("--compare-routes", o.compare_routes,
                "at M <= 32 also time the chain with every GEMM forced onto the decode GEMV and onto the tiled "
                "kernels, each without and with PDL (arms gemv-route, gemv-route+pdl, tiles-route, tiles-route+pdl; "
                "not judged against the targets)");
  app->add_option("--seed", o.seed, "seed of the random inputs (>= 0)")->check(digits_only())->capture_default_str();
  app->callback([&common] { exit_code() = run_decode_suite(common, suite_options()); });
}

int run_decode_default(const BenchOptions& common) {
  DecodeSuiteOptions o;
  o.decode.presets = "llama3-70b";
  o.decode.ms = {1, 8, 32};
  return run_decode_suite(common, o);
}

}  // namespace

WEAVE_REGISTER_BENCH_SUITE(decode, "a decoder layer's GEMM chain at decode M: weave (+PDL) vs cuBLASLt vs the HBM ceiling",
                           add_decode_suite, run_decode_default);

}  // namespace weave::cli
