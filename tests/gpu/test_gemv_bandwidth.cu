// Decode GEMV weight-read bandwidth (issue 4 target: >= 75% of the HBM read bandwidth measured in
// the same run). Reports, never fails on speed; fails on wrong results.
//
// For N x K = 8192x1280, 5120x2048, 7168x2048, modes bf16 / ptpc / blockscale / mxfp8 (bf16 out)
// and M = 1, 2, 4, 8, 16, 32, all timed with CUDA graphs of 20 back-to-back calls, arms
// alternating (bench::time_alternating), weights cold (each call reads the next of
// bench::cold_copies copies of B and its scales, > 3x the L2 in one rotation):
//   read      a plain 16-byte-load read kernel over the same bytes from the same copies (the
//             ceiling one kernel launch reaches at this size)
//   gemv      the GEMV as weave::Gemm will launch it (planner's split, no PDL)
//   gemv+pdl  the same with programmatic dependent launch between the back-to-back calls
//   r<s>/t<s> each other valid K split s on each weight path (registers, TMA ring): does the
//             planner pick well? every one's time is printed
//   cublaslt  cuBLASLt at the same M, when tools/bench/cublaslt supports the mode and shape
// and, once per run, the HBM read ceiling: the read kernel over 1 GiB.
// GB/s = bytes of B (values + scales) per call / time per call. Every arm that writes C (each
// GEMV arm and cuBLASLt) has its own output buffer, NaN-poisoned before the timed run and compared
// afterwards with bench::gpu_reference_gemm, so a GEMV variant that skips or misplaces elements
// fails even when another arm ran after it (they used to share one buffer: only the last writer
// was checked). cuBLASLt is held to bench::gemm_tolerance, as in `weave bench gemm`.
//
// GemvOrTilesByM adds the tile planner's plan (weave::Gemm with decode_route = tiles) as an arm: the data behind
// weave::Gemm's decode route. MixedRouteChains times two GEMMs on either route, alone and chained.
//
// Run: ./weave_tests_gpu --gtest_filter='GemvBandwidth*'   (about 70 s on an H100)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "bench/harness.hpp"
#include "bench/stream_read.hpp"
#include "common/check.hpp"
#include "gemv/gemv.hpp"
#include "support/gpu.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

using namespace weave;

namespace {

struct Shape {
  int64_t n, k;
};

// What one run measures: the shapes, modes and M, the K splits swept on the registers path, and
// whether the TMA ring (its splits and ring shapes) is swept too.
struct Sweep {
  std::vector<Shape> shapes;
  std::vector<ScaleMode> modes;
  std::vector<int> ms;
  std::vector<int> splits;
  bool tma = true;
  // Also time weave::Gemm's tiled plan at each M (M 33-64: is the GEMV faster than the tiles?).
  bool tiles = false;
  // At M <= 8 also the registers path at its other depth (steps in flight: bf16 8, fp8 4) at every
  // swept split and the planner's ("d<split>" in the row).
  bool depths = false;
  // The TMA ring shapes at these K splits (empty: at the TMA planner's split only).
  std::vector<int> ring_splits;
  // bf16: the stream path at every swept split ('s<split>' in the row) and with PDL at its planner's
  // split ("stream+pdl"); these stage counts at its planner's split ("stream<S>"), or at each of
  // stream_stage_splits where given ("st<S>@<split>"); these weight stages ahead of A's first boxes
  // at the default stages ("pro<P>").
  bool stream = false;
  std::vector<int> stream_stages;
  std::vector<int> stream_prologues;
  std::vector<int> stream_stage_splits;
};

// The least time among the swept (path, split) points.
double by_split_best(const std::vector<std::pair<std::pair<int, int>, double>>& by_split) {
  double best = 1e30;
  for (const auto& item : by_split) best = std::min(best, item.second);
  return best;
}

void measure(const Sweep& sweep_of) {
  int device = 0, num_sms = 0, l2_bytes = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  cudaStream_t stream;
  WEAVE_CHECK_CUDA(cudaStreamCreate(&stream));
  bench::DeviceBuffer sink(64);

  {
    bench::IdleGate gate;
    std::string report;
    const bool idle = gate.available() && gate.wait_idle({device}, 5, 5, 10.0, &report);
    std::printf("idle gate: %s%s\n", gate.available() ? report.c_str() : gate.why_unavailable().c_str(),
                idle ? "" : " (measuring anyway)");
  }

  // HBM read ceiling: 1 GiB, far past the L2.
  const double hbm_gbps = bench::measure_hbm_read_gbps(num_sms, stream);
  std::printf("HBM read ceiling: 1 GiB read at %.0f GB/s\n", hbm_gbps);

  const std::vector<Shape>& shapes = sweep_of.shapes;
  const std::vector<ScaleMode>& modes = sweep_of.modes;
  const std::vector<int>& ms = sweep_of.ms;
  const DType out = DType::kBF16;
  std::printf("\n%-10s %-10s %3s %-28s %9s %8s %8s %8s %6s %6s %6s %8s %6s  %-16s %6s\n", "NxK", "mode", "M",
              "plan", "MB(B)", "read_us", "gemv_us", "pdl_us", "GB/s", "%HBM", "%read", "pdl_GB/s", "%HBM",
              "#wrong", "us per split (*planner)");
  std::vector<std::string> cublas_rows;
  int64_t total_wrong = 0;
  for (const Shape& shape : shapes)
    for (ScaleMode mode : modes) {
      const int64_t n = shape.n, k = shape.k;
      ref::Random rng(1234 + n + k + int(mode));
      const std::vector<float> bf = ref::random_normal(rng, n * k);
      const ref::QuantMatrix qb = ref::quantize(bf.data(), n, k, mode, ref::Operand::kB);
      std::vector<bench::DeviceOperand> copies;
      copies.push_back(bench::upload_operand(qb, device));
      const size_t b_bytes = copies[0].bytes();
      const int num_copies = bench::cold_copies(b_bytes, l2_bytes);
      while (int(copies.size()) < num_copies) copies.push_back(bench::clone_operand(copies[0]));

      for (int m : ms) {
        const std::vector<float> af = ref::random_normal(rng, int64_t(m) * k);
        const ref::QuantMatrix qa = ref::quantize(af.data(), m, k, mode, ref::Operand::kA);
        const bench::DeviceOperand da = bench::upload_operand(qa, device);
        bench::DeviceBuffer c_ref(size_t(m) * n * 4);
        const GemmProblem problem{.m = m, .n = n, .k = k, .mode = mode, .scale_layout = ScaleLayout::kRaw, .out_dtype = out};
        // The launch's own plan: the device's cluster residency, as gemv_launch plans.
        const detail::GemvConfig plan =
            detail::gemv_config(problem, num_sms, 0, detail::GemvArgs::Path::kAuto, {}, detail::gemv_device_residency(mode));
        // One output per writing arm (deque: buffers stay put while more are added), with the
        // arm's name and its tolerance.
        struct Output {
          std::string arm;
          bench::DeviceBuffer c;
          bench::Tolerance tol;
        };
        std::deque<Output> outputs;
        const bench::Tolerance gemv_tol{.rtol = 1.0 / 128, .atol = 0, .atol_rms = 2e-3};
        auto new_output = [&](const std::string& arm, const bench::Tolerance& tol) -> bench::DeviceBuffer& {
          return outputs.emplace_back(Output{arm, bench::DeviceBuffer(size_t(m) * n * 2), tol}).c;
        };

        auto gemv_arm = [&](const std::string& name, int split, bool pdl,
                            detail::GemvArgs::Path path = detail::GemvArgs::Path::kAuto,
                            detail::RingShape ring = {}, int depth = 0, int stages = 0, int prologue = 0) {
          void* const c = new_output(name, gemv_tol).get();  // by value: the arm outlives this scope
          return bench::Arm{name, [&, c, split, pdl, path, ring, depth, stages, prologue](cudaStream_t s, int call) {
            const bench::DeviceOperand& b = copies[call % copies.size()];
            detail::GemvArgs args;
            args.a = da.values.get(), args.b = b.values.get(), args.c = c;
            args.scale_a = da.scales.get(), args.scale_b = b.scales.get();
            args.m = m, args.n = n, args.k = k, args.lda = k, args.ldb = k, args.ldc = n;
            args.mode = mode, args.out_dtype = out, args.split = split, args.pdl = pdl, args.path = path;
            args.ring = ring;
            args.depth = depth;
            args.stages = stages;
            args.stream_prologue = prologue;
            detail::gemv_launch(args, num_sms, s);
          }};
        };
        std::vector<bench::Arm> arms;
        arms.push_back({"read", [&](cudaStream_t s, int call) {
                          const bench::DeviceOperand& b = copies[call % copies.size()];
                          bench::launch_stream_read(b.values.get(), b.values.bytes(), sink.as<uint32_t>(), num_sms, s);
                        }});
        arms.push_back(gemv_arm("gemv", 0, false));
        arms.push_back(gemv_arm("gemv+pdl", 0, true));
        // Every other valid (weight path, K split): does the planner pick well? The planner's
        // own launch is the "gemv" arm.
        struct SweepPoint {
          detail::WeightPath path;
          int split;
          int depth = 0;  // registers: the other depth's instance (sweep_of.depths)
        };
        std::vector<SweepPoint> sweep;
        for (const detail::WeightPath path :
             {detail::WeightPath::kRegisters, detail::WeightPath::kTma, detail::WeightPath::kStream}) {
          if (path == detail::WeightPath::kTma && !sweep_of.tma) continue;
          if (path == detail::WeightPath::kStream && (!sweep_of.stream || mode != ScaleMode::kBF16)) continue;
          const auto forced = path == detail::WeightPath::kTma      ? detail::GemvArgs::Path::kTma
                              : path == detail::WeightPath::kStream ? detail::GemvArgs::Path::kStream
                                                                    : detail::GemvArgs::Path::kRegisters;
          for (int s : sweep_of.splits) {
            if (path == plan.path && s == plan.split) continue;
            try {
              detail::gemv_config(problem, num_sms, s, forced);
              sweep.push_back({path, s});
              arms.push_back(gemv_arm(std::string(detail::to_string(path)) + " split=" + std::to_string(s), s,
                                      false, forced));
            } catch (const weave::Error&) {
            }
          }
        }
        // The registers path at its other depth, at every swept split and the planner's.
        if (sweep_of.depths && m <= 8) {
          const int other_depth = mode == ScaleMode::kBF16 ? 8 : 4;  // the defaults: bf16 4, fp8 8 (gemv_kernel.cuh)
          std::vector<int> splits = sweep_of.splits;
          if (std::find(splits.begin(), splits.end(), plan.split) == splits.end()) splits.push_back(plan.split);
          const auto regs = detail::GemvArgs::Path::kRegisters;
          for (int s : splits) {
            try {
              detail::gemv_config(problem, num_sms, s, regs, {}, {}, false, other_depth);
              sweep.push_back({detail::WeightPath::kRegisters, s, other_depth});
              arms.push_back(gemv_arm("registers depth=" + std::to_string(other_depth) + " split=" + std::to_string(s),
                                      s, false, regs, {}, other_depth));
            } catch (const weave::Error&) {
            }
          }
        }
        // Other TMA ring shapes at the TMA planner's split: longer slots request longer runs of
        // each row at once (does DRAM locality limit the stream?).
        struct RingPoint {
          detail::RingShape ring;
          int split;  // 0: the TMA planner's
        };
        std::vector<RingPoint> rings;
        const std::vector<int> ring_splits = sweep_of.ring_splits.empty() ? std::vector<int>{0} : sweep_of.ring_splits;
        for (const int s : ring_splits)
          for (const detail::RingShape ring : {detail::RingShape{4, 2}, detail::RingShape{4, 4},
                                               detail::RingShape{8, 2}, detail::RingShape{16, 1}}) {
            if (!sweep_of.tma) break;
            try {
              detail::gemv_config(problem, num_sms, s, detail::GemvArgs::Path::kTma, ring);
              rings.push_back({ring, s});
              arms.push_back(gemv_arm("tma ring " + std::to_string(ring.steps_per_slot) + "x" +
                                          std::to_string(ring.slots) + " split=" + std::to_string(s),
                                      s, false, detail::GemvArgs::Path::kTma, ring));
            } catch (const weave::Error&) {
            }
          }
        // The stream ring at other stage counts, then (default stages) with fewer weight stages
        // ahead of A's first boxes ("pro<P>": P before the PDL wait), at the stream planner's split;
        // with PDL at the default.
        struct StreamPoint {
          std::string label;
          int stages = 0, prologue = 0;
          bool pdl = false;
          int split = 0;  // 0: the planner's
        };
        std::vector<StreamPoint> stream_points;
        if (mode == ScaleMode::kBF16) {
          for (const int stages : sweep_of.stream_stages) {
            if (sweep_of.stream_stage_splits.empty()) stream_points.push_back({"stream" + std::to_string(stages), stages});
            for (const int s : sweep_of.stream_stage_splits)
              stream_points.push_back({"st" + std::to_string(stages) + "@" + std::to_string(s), stages, 0, false, s});
          }
          for (const int pro : sweep_of.stream_prologues) stream_points.push_back({"pro" + std::to_string(pro), 0, pro});
          if (sweep_of.stream) stream_points.push_back({"stream+pdl", 0, 0, true});
        }
        for (const StreamPoint& sp : stream_points) {
          detail::gemv_config(problem, num_sms, sp.split, detail::GemvArgs::Path::kStream, {}, {}, false, 0, sp.stages);
          arms.push_back(
              gemv_arm(sp.label, sp.split, sp.pdl, detail::GemvArgs::Path::kStream, {}, 0, sp.stages, sp.prologue));
        }
        // weave::Gemm's tiled plan (the tile planner's choice at this M, forced with decode_route
        // so that M <= 32 does not take the GEMV), re-pointed at each call's copy of B (host work,
        // captured once into the graph).
        std::unique_ptr<Gemm> tiled;
        std::unique_ptr<bench::DeviceBuffer> tiled_workspace;
        const size_t tiles_index = arms.size();
        if (sweep_of.tiles) {
          void* const c_tiles = new_output("tiles", bench::gemm_tolerance(mode, out)).get();
          const TensorView c_view = TensorView::matrix(c_tiles, out, m, n, device);
          tiled = std::make_unique<Gemm>(problem, da.view, copies[0].view, GemmScales{da.scale_view, copies[0].scale_view},
                                         c_view, GemmPlanOverrides{.decode_route = DecodeRoute::kTiles});
          if (tiled->workspace_bytes() > 0) {
            tiled_workspace = std::make_unique<bench::DeviceBuffer>(tiled->workspace_bytes());
            tiled->set_workspace(tiled_workspace->get(), tiled_workspace->bytes());
          }
          arms.push_back({"tiles", [&, c_view](cudaStream_t s, int call) {
                            const bench::DeviceOperand& b = copies[call % copies.size()];
                            tiled->set_operands(da.view, b.view, GemmScales{da.scale_view, b.scale_view}, c_view);
                            tiled->run(s);
                          }});
        }
        // cuBLASLt at the same M where the wrapper supports it (rotating the same copies).
        std::unique_ptr<bench::CublasLtGemm> lt;
        std::vector<bench::CublasLtScales> lt_scales;
        std::string lt_note;
        try {
          lt_note = bench::CublasLtGemm::supports(problem);
          if (lt_note.empty()) {
            lt = std::make_unique<bench::CublasLtGemm>(problem, device);
            for (const auto& b : copies) lt_scales.push_back(lt->prepare_scales({da.scale_view, b.scale_view}, stream));
            void* const c_lt = new_output("cublaslt", bench::gemm_tolerance(mode, out)).get();
            arms.push_back({"cublaslt", [&, c_lt](cudaStream_t s, int call) {
                              const size_t i = call % copies.size();
                              lt->run(da.view, copies[i].view, lt_scales[i],
                                      TensorView::matrix(c_lt, out, m, n, device), s);
                            }});
          }
        } catch (const weave::Error& e) {
          if (outputs.back().arm == "cublaslt") outputs.pop_back();  // its arm was not added
          lt.reset();
          lt_note = e.what();
        }

        for (const Output& o : outputs) bench::poison_nan(o.c.get(), o.c.bytes(), out, stream);
        bench::TimingConfig cfg;
        cfg.calls_per_graph = 20;
        cfg.samples = 15;
        const std::vector<bench::Timing> t = bench::time_alternating(arms, cfg, stream);

        // Every arm's last call wrote its own C (from one of the copies, all equal to copies[0]):
        // each checked against the plain GPU reference. A poisoned element an arm never wrote is
        // non-finite, so it counts as wrong.
        bench::gpu_reference_gemm(problem, da.view, copies[0].view, {da.scale_view, copies[0].scale_view},
                                  c_ref.as<float>(), stream);
        int64_t row_wrong = 0;
        for (const Output& o : outputs) {
          const TensorView view = TensorView::matrix(o.c.get(), out, m, n, device);
          const ref::Comparison cmp = bench::gpu_compare(view, c_ref.as<float>(), o.tol, stream);
          row_wrong += cmp.wrong;
          EXPECT_EQ(cmp.wrong, 0) << n << "x" << k << " " << to_string(mode) << " M=" << m << " arm " << o.arm
                                  << ": rel_l2 " << cmp.rel_l2 << " first wrong " << cmp.first_wrong;
        }
        EXPECT_EQ(outputs.size(), arms.size() - 1) << "every arm but the read kernel writes and is checked";
        total_wrong += row_wrong;

        const double mb = b_bytes / 1e6;
        auto gbps = [&](double us) { return b_bytes / (us * 1e3); };
        // Every (path, split)'s time, the planner's marked with '*': "r1:9.8 *r4:7.9 t4:6.1 t8:6.0".
        std::vector<std::pair<std::pair<int, int>, double>> by_split = {
            {{int(plan.path), plan.split}, t[1].median_us}};
        constexpr int kOtherDepthKey = 16;  // the registers path at its other depth (beside the WeightPath values)
        for (size_t i = 0; i < sweep.size(); ++i)
          by_split.push_back({{sweep[i].depth != 0 ? kOtherDepthKey : int(sweep[i].path), sweep[i].split}, t[3 + i].median_us});
        std::sort(by_split.begin(), by_split.end());
        std::string ring_times;
        for (size_t i = 0; i < rings.size(); ++i) {
          char item[48];
          std::snprintf(item, sizeof item, "ring%dx%d@%d:%.1f ", rings[i].ring.steps_per_slot, rings[i].ring.slots,
                        rings[i].split, t[3 + sweep.size() + i].median_us);
          ring_times += item;
        }
        for (size_t i = 0; i < stream_points.size(); ++i) {
          char item[48];
          std::snprintf(item, sizeof item, "%s:%.1f ", stream_points[i].label.c_str(),
                        t[3 + sweep.size() + rings.size() + i].median_us);
          ring_times += item;
        }
        std::string best;
        for (const auto& [key, us] : by_split) {
          const bool planned = key.first == int(plan.path) && key.second == plan.split;
          char item[32];
          std::snprintf(item, sizeof item, "%s%c%d:%.1f ", planned ? "*" : "",
                        key.first == kOtherDepthKey                         ? 'd'
                        : key.first == int(detail::WeightPath::kTma)    ? 't'
                        : key.first == int(detail::WeightPath::kStream) ? 's'
                                                                        : 'r',
                        key.second, us);
          best += item;
        }
        std::printf("%5ldx%-5ld %-10s %3d %-28s %9.2f %8.2f %8.2f %8.2f %6.0f %6.1f %6.1f %8.0f %6.1f %6ld  %s\n",
                    long(n), long(k), std::string(to_string(mode)).c_str(), m,
                    (std::string(detail::to_string(plan.path)) + " split " + std::to_string(plan.split) + " k_slice " +
                     std::to_string(plan.k_slice_bytes) + " " + std::to_string(plan.waves) + "w")
                        .c_str(),
                    mb, t[0].median_us, t[1].median_us, t[2].median_us, gbps(t[1].median_us),
                    100 * gbps(t[1].median_us) / hbm_gbps, 100 * t[0].median_us / t[1].median_us,
                    gbps(t[2].median_us), 100 * gbps(t[2].median_us) / hbm_gbps, long(row_wrong), (best + ring_times).c_str());
        char line[384];
        char tiles_item[160] = "";
        if (tiled) {
          const double tiles_us = t[tiles_index].median_us, best_us = std::min(t[1].median_us, by_split_best(by_split));
          std::snprintf(tiles_item, sizeof tiles_item, "  tiles %8.2f us (%s)  best gemv/tiles %.2f",
                        tiles_us, tiled->plan().kernel.c_str(), best_us / tiles_us);
        }
        if (lt) {
          const bench::Timing& tl = t.back();
          std::snprintf(line, sizeof line, "%5ldx%-5ld %-10s M=%-3d cublaslt %8.2f us  gemv %8.2f us  gemv/cublaslt %.2f%s",
                        long(n), long(k), std::string(to_string(mode)).c_str(), m, tl.median_us, t[1].median_us,
                        t[1].median_us / tl.median_us, tiles_item);
        } else {
          std::snprintf(line, sizeof line, "%5ldx%-5ld %-10s M=%-3d cublaslt n/a: %.150s%s", long(n), long(k),
                        std::string(to_string(mode)).c_str(), m, lt_note.c_str(), tiles_item);
        }
        cublas_rows.push_back(line);
      }
    }
  std::printf("\ncuBLASLt at the same M (same operands, same cold rotation, alternating with the GEMV):\n");
  for (const auto& r : cublas_rows) std::printf("%s\n", r.c_str());
  std::printf("\n%%HBM = GEMV weight-read GB/s / the 1 GiB read's GB/s (%.0f); %%read = same-bytes read kernel time / "
              "GEMV time. total #wrong %ld\n",
              hbm_gbps, long(total_wrong));
  WEAVE_CHECK_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

TEST(GemvBandwidth, WeightReadVersusHbmRead) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{8192, 1280}, {5120, 2048}, {7168, 2048}},
           .modes = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8},
           .ms = {1, 2, 4, 8, 16, 32},
           .splits = {1, 2, 3, 4, 6, 8, 16}});
}

// The decode shapes of the presets' large layers at M = 1 and 8 on the registers path at every K
// split 1..8: the data the planner's split model (src/gemv/gemv.cpp, modelled_us) is held to.
TEST(GemvBandwidth, LayerShapesAtEverySplit) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{8192, 14336}, {8192, 4096}, {1280, 8192}, {7168, 8192}, {8192, 3584}},
           .modes = {ScaleMode::kBF16, ScaleMode::kPtpc},
           .ms = {1, 8},
           .splits = {1, 2, 3, 4, 5, 6, 7, 8},
           .tma = false});
}

// Steps in flight at one token tile: the registers path at its default depth (bf16 4, fp8 8) and
// at the other (d<split> in the row), at the planner's split and around it, over the presets'
// decode shapes (bf16 trails cuBLASLt by 6-19% at M <= 8: is it the 32 KB in flight per CTA?).
TEST(GemvBandwidth, DepthAtLayerShapes) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{8192, 14336}, {7168, 8192}, {8192, 3584}, {8192, 1280}, {7168, 2048}},
           .modes = {ScaleMode::kBF16, ScaleMode::kPtpc},
           .ms = {1, 8},
           .splits = {2, 3, 4, 6},
           .tma = false,
           .depths = true});
}

// The TMA ring shapes at K splits 1-4 on the presets' large bf16 layers (bf16 trails cuBLASLt by
// up to 1.24x there on an H200: does a deeper ring at one CTA per SM close it?). "@0" in a ring's
// name is the TMA planner's split.
TEST(GemvBandwidth, RingsAtLayerShapes) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{8192, 14336}, {7168, 8192}, {8192, 3584}, {7168, 2048}},
           .modes = {ScaleMode::kBF16},
           .ms = {1, 8},
           .splits = {1, 2, 3, 4},
           .tma = true,
           .ring_splits = {1, 2, 3, 4}});
}

// bf16's stream path (a producer warp's CTA-wide ring of weights and activations, no A staged) at
// K splits 1-4 and 4-12 stages against the registers path and cuBLASLt on the presets' decode
// shapes: the data behind the bf16 GEMV's path choice.
TEST(GemvBandwidth, StreamAtLayerShapes) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{8192, 14336}, {7168, 8192}, {1280, 8192}, {8192, 3584}, {8192, 1280}, {7168, 2048}},
           .modes = {ScaleMode::kBF16},
           .ms = {1, 8},
           .splits = {1, 2, 3, 4},
           .tma = false,
           .stream = true,
           .stream_stages = {4, 6, 12},
           .stream_prologues = {1, 2, 8}});
}

// The stream path on layers of several waves (a CTA per SM at 8 stages: qwen3-32b and llama3-70b
// gate_up at tp 2, 200 and 224 bands): 8 stages at splits 1-4 against 4 and 6 stages (2-3 CTAs per
// SM) at splits 1-6, and cuBLASLt. Does a smaller ring with more CTAs per SM hide the waves?
TEST(GemvBandwidth, StreamStagesOnManyWaves) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{25600, 5120}, {28672, 8192}, {6400, 5120}, {5120, 12800}},
           .modes = {ScaleMode::kBF16},
           .ms = {1},
           .splits = {1, 2, 3, 4},
           .tma = false,
           .stream = true,
           .stream_stages = {4, 6},
           .stream_stage_splits = {1, 2, 3, 4, 6}});
}

// Where the GEMV pays: the presets' decode shapes at M 1-32, the GEMV (its planned split) against
// the tile planner's plan and cuBLASLt. The data behind weave::Gemm's GEMV route (docs/gemm.md).
TEST(GemvBandwidth, GemvOrTilesByM) {
  WEAVE_REQUIRE_GPUS(1);
  measure({.shapes = {{8192, 14336}, {7168, 8192}, {1280, 8192}, {8192, 3584}, {8192, 1024}, {7168, 2048}},
           .modes = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale},
           .ms = {1, 4, 8, 12, 16, 24, 32},
           .splits = {},
           .tma = false,
           .tiles = true});
}

// Diagnostic for the decode route's one-route-per-M rule (src/gemm/planner_gemv_route.cpp): a
// decode layer that mixed GEMV and tiled kernels ran 10-20 us slower per step than the sum of its
// GEMMs. Two GEMMs per call (X = 8192 x 1024, Y = 7168 x 8192, bf16, M = 1, cold), each on either
// route (GemmPlanOverrides::decode_route), timed alone and as pairs in both orders: a pair's
// excess over its two GEMMs alone is what a route switch costs. Reports; fails only on wrong
// results (every output NaN-poisoned before the timed graphs and checked after them).
TEST(GemvBandwidth, MixedRouteChains) {
  WEAVE_REQUIRE_GPUS(1);
  int device = 0, l2_bytes = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device));
  cudaStream_t stream;
  WEAVE_CHECK_CUDA(cudaStreamCreate(&stream));
  const int64_t m = 1;
  struct Operand {
    int64_t n = 0, k = 0;
    std::vector<bench::DeviceOperand> copies;
    bench::DeviceOperand a;
    std::unique_ptr<bench::DeviceBuffer> c_ref;
  };
  std::deque<Operand> ops;
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{8192, 1024}, {7168, 8192}}) {
    Operand& o = ops.emplace_back();
    o.n = n, o.k = k;
    ref::Random rng(99 + n + k);
    const std::vector<float> bf = ref::random_normal(rng, n * k), af = ref::random_normal(rng, m * k);
    o.copies.push_back(bench::upload_operand(ref::quantize(bf.data(), n, k, ScaleMode::kBF16, ref::Operand::kB), device));
    o.a = bench::upload_operand(ref::quantize(af.data(), m, k, ScaleMode::kBF16, ref::Operand::kA), device);
    o.c_ref = std::make_unique<bench::DeviceBuffer>(size_t(m) * n * 4);
  }
  const int copies = bench::cold_copies(ops[0].copies[0].bytes() + ops[1].copies[0].bytes(), l2_bytes);
  for (Operand& o : ops) {
    while (int(o.copies.size()) < copies) o.copies.push_back(bench::clone_operand(o.copies[0]));
    const GemmProblem p{.m = m, .n = o.n, .k = o.k, .mode = ScaleMode::kBF16};
    bench::gpu_reference_gemm(p, o.a.view, o.copies[0].view, {o.a.scale_view, o.copies[0].scale_view},
                              o.c_ref->as<float>(), stream);
  }
  const DecodeRoute G = DecodeRoute::kGemv, T = DecodeRoute::kTiles;
  struct Step {
    int op;
    DecodeRoute route;
  };
  struct ArmSpec {
    std::string name;
    std::vector<Step> steps;
  };
  const std::vector<ArmSpec> specs = {
      {"X gemv", {{0, G}}},
      {"X tiles", {{0, T}}},
      {"Y gemv", {{1, G}}},
      {"Y tiles", {{1, T}}},
      {"X gemv, Y gemv", {{0, G}, {1, G}}},
      {"X tiles, Y tiles", {{0, T}, {1, T}}},
      {"X tiles, Y gemv", {{0, T}, {1, G}}},
      {"X gemv, Y tiles", {{0, G}, {1, T}}},
  };
  // Per arm and step: its Gemm (its own output), re-pointed at each call's weight copy.
  struct Bound {
    std::unique_ptr<Gemm> gemm;
    std::unique_ptr<bench::DeviceBuffer> c, workspace;
    TensorView c_view;
    int op = 0;
  };
  std::deque<std::vector<Bound>> bound;
  std::vector<bench::Arm> arms;
  for (const ArmSpec& spec : specs) {
    std::vector<Bound>& steps = bound.emplace_back();
    for (const Step& st : spec.steps) {
      Operand& o = ops[st.op];
      Bound b;
      b.op = st.op;
      b.c = std::make_unique<bench::DeviceBuffer>(size_t(m) * o.n * 2);
      b.c_view = TensorView::matrix(b.c->get(), DType::kBF16, m, o.n, device);
      GemmPlanOverrides ov;
      ov.decode_route = st.route;
      const GemmProblem p{.m = m, .n = o.n, .k = o.k, .mode = ScaleMode::kBF16};
      b.gemm = std::make_unique<Gemm>(p, o.a.view, o.copies[0].view, GemmScales{o.a.scale_view, o.copies[0].scale_view},
                                      b.c_view, ov);
      ASSERT_EQ(b.gemm->plan().gemv, st.route == G) << spec.name;
      if (b.gemm->workspace_bytes() > 0) {  // a tiled plan's split-K partials
        b.workspace = std::make_unique<bench::DeviceBuffer>(b.gemm->workspace_bytes());
        b.gemm->set_workspace(b.workspace->get(), b.workspace->bytes());
      }
      bench::poison_nan(b.c->get(), b.c->bytes(), DType::kBF16, stream);
      steps.push_back(std::move(b));
    }
    std::vector<Bound>* arm_steps = &steps;
    arms.push_back({spec.name, [&ops, arm_steps](cudaStream_t s, int call) {
                      for (Bound& b : *arm_steps) {
                        const Operand& o = ops[b.op];
                        const bench::DeviceOperand& w = o.copies[call % o.copies.size()];
                        b.gemm->set_operands(o.a.view, w.view, GemmScales{o.a.scale_view, w.scale_view}, b.c_view);
                        b.gemm->run(s);
                      }
                    }});
  }
  bench::TimingConfig cfg;
  cfg.calls_per_graph = 20;
  cfg.samples = 15;
  const std::vector<bench::Timing> t = bench::time_alternating(arms, cfg, stream);
  std::printf("\nX = 8192 x 1024, Y = 7168 x 8192, bf16, M = 1, cold (%d weight copies), us per call:\n", copies);
  for (size_t i = 0; i < specs.size(); ++i) {
    std::string plans;
    for (const Bound& b : bound[i]) plans += " | " + b.gemm->plan().kernel + " split " + std::to_string(b.gemm->plan().split_k);
    std::printf("  %-18s %8.2f %s\n", specs[i].name.c_str(), t[i].median_us, plans.c_str());
  }
  auto excess = [&](int pair, int x, int y) {
    std::printf("  %-18s excess over its GEMMs alone: %+7.2f us\n", specs[pair].name.c_str(),
                t[pair].median_us - t[x].median_us - t[y].median_us);
  };
  excess(4, 0, 2);
  excess(5, 1, 3);
  excess(6, 1, 2);
  excess(7, 0, 3);
  // Every output: the last call read copy (calls - 1) % copies, all equal to copy 0.
  for (size_t a = 0; a < bound.size(); ++a)
    for (const Bound& b : bound[a]) {
      const Operand& o = ops[b.op];
      const ref::Comparison cmp = bench::gpu_compare(b.c_view, o.c_ref->as<float>(),
                                                     bench::gemm_tolerance(ScaleMode::kBF16, DType::kBF16), stream);
      EXPECT_EQ(cmp.wrong, 0) << specs[a].name << " step " << b.op << ": rel_l2 " << cmp.rel_l2;
    }
  WEAVE_CHECK_CUDA(cudaStreamDestroy(stream));
}
