// Quick timings for docs/gemm.md (issue 4), not the benchmark of record (`weave bench gemm` is):
//   - mxfp8 raw and packed against our blockscale (the planner's tile and the same 128x128 tile,
//     so the promotion cost per 32-wide group shows like for like);
//   - split-K against no split where the planner splits and at 2048 x 2048 x 7168.
// CUDA graphs, arms alternating in one process, cold weights (B and its scales rotated past L2),
// bf16 output; every arm's output of the timed configuration is checked against the GPU reference.
// Skipped unless WEAVE_GEMM_PERF=1.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "bench/harness.hpp"
#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;

namespace {

// One mode's operands: A, and `copies` identical copies of B (values and scales; for mxfp8 also
// the packed scales), uploaded once.
struct Data {
  ScaleMode mode;
  int64_t m, n, k;
  bench::DeviceOperand a;
  std::vector<bench::DeviceOperand> b;
  bench::DeviceBuffer a_packed;
  std::vector<bench::DeviceBuffer> b_packed;
  TensorView a_packed_view;
  std::vector<TensorView> b_packed_views;
  bench::DeviceBuffer ref;  // fp32 [M, N]
  GemmScales scales(int copy, ScaleLayout layout) const {
    if (layout == ScaleLayout::kPacked) return {a_packed_view, b_packed_views[copy]};
    return {a.scale_view, b[copy].scale_view};
  }
};

std::unique_ptr<Data> make_data(ScaleMode mode, int64_t m, int64_t n, int64_t k, const std::vector<float>& xa,
                                const std::vector<float>& xb, int l2, cudaStream_t stream) {
  auto d = std::make_unique<Data>();
  d->mode = mode, d->m = m, d->n = n, d->k = k;
  const ref::QuantMatrix qa = bench::quantize_parallel(xa, m, k, mode, ref::Operand::kA);
  const ref::QuantMatrix qb = bench::quantize_parallel(xb, n, k, mode, ref::Operand::kB);
  d->a = bench::upload_operand(qa, 0);
  d->b.push_back(bench::upload_operand(qb, 0));
  const int copies = bench::cold_copies(d->b[0].bytes(), static_cast<std::size_t>(l2));
  for (int i = 1; i < copies; ++i) d->b.push_back(bench::clone_operand(d->b[0]));
  if (mode == ScaleMode::kMxfp8) {
    const int64_t groups = k / 32, k_words = (k + 127) / 128;
    auto pack = [&](const ref::QuantMatrix& q, bench::DeviceBuffer& buf, TensorView& view) {
      const std::vector<uint32_t> w = ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, groups);
      buf = bench::DeviceBuffer(w.size() * 4);
      buf.upload(w.data(), buf.bytes());
      view = TensorView::matrix(buf.get(), DType::kUE8M0, k_words, 4 * q.scale_rows, 0);
    };
    pack(qa, d->a_packed, d->a_packed_view);
    d->b_packed.resize(copies);
    d->b_packed_views.resize(copies);
    for (int i = 0; i < copies; ++i) pack(qb, d->b_packed[i], d->b_packed_views[i]);
  }
  d->ref = bench::DeviceBuffer(static_cast<std::size_t>(m * n) * 4);
  bench::gpu_reference_gemm(GemmProblem{.m = m, .n = n, .k = k, .mode = mode}, d->a.view, d->b[0].view,
                            d->scales(0, ScaleLayout::kRaw), d->ref.as<float>(), stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return d;
}

struct ArmSpec {
  std::string name;
  const Data* data;
  ScaleLayout layout;
  GemmPlanOverrides ov;
};

struct ArmRun {
  ArmSpec spec;
  std::vector<std::unique_ptr<Gemm>> gemms;  // one per weight copy
  bench::DeviceBuffer out, workspace;
  TensorView out_view;
};

// Times the arms alternating and prints one line per arm with its ratio to arm 0.
void time_arms(const std::string& title, const std::vector<ArmSpec>& specs, cudaStream_t stream) {
  std::vector<std::unique_ptr<ArmRun>> runs;
  std::vector<bench::Arm> arms;
  int max_copies = 1;
  for (const ArmSpec& s : specs) {
    auto r = std::make_unique<ArmRun>();
    r->spec = s;
    const Data& d = *s.data;
    GemmProblem p{.m = d.m, .n = d.n, .k = d.k, .mode = d.mode, .scale_layout = s.layout, .out_dtype = DType::kBF16};
    r->out = bench::DeviceBuffer(static_cast<std::size_t>(d.m * d.n) * 2);
    r->out_view = TensorView::matrix(r->out.get(), DType::kBF16, d.m, d.n, 0);
    const int copies = static_cast<int>(d.b.size());
    max_copies = std::max(max_copies, copies);
    for (int i = 0; i < copies; ++i)
      r->gemms.push_back(std::make_unique<Gemm>(p, d.a.view, d.b[i].view, d.scales(i, s.layout), r->out_view, s.ov));
    const std::size_t ws = r->gemms[0]->workspace_bytes();
    if (ws) {
      r->workspace = bench::DeviceBuffer(ws);
      for (auto& g : r->gemms) g->set_workspace(r->workspace.get(), ws);
    }
    ArmRun* raw = r.get();
    arms.push_back({s.name, [raw, copies](cudaStream_t st, int call) { raw->gemms[call % copies]->run(st); }});
    runs.push_back(std::move(r));
  }
  bench::TimingConfig cfg;
  cfg.samples = 10;
  cfg.calls_per_graph = std::max(20, max_copies);
  const auto t = bench::time_alternating(arms, cfg, stream);
  std::printf("  %s\n", title.c_str());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    ArmRun& r = *runs[i];
    const Data& d = *r.spec.data;
    // The last replay's last call wrote the output; check it (and poison-run once more).
    bench::poison_nan(r.out.get(), r.out.bytes(), DType::kBF16, stream);
    r.gemms[0]->run(stream);
    const auto cmp = bench::gpu_compare(r.out_view, d.ref.as<float>(), test::tolerance_for(d.mode, DType::kBF16), stream);
    const GemmPlan& plan = r.gemms[0]->plan();
    const double flop = 2.0 * d.m * d.n * d.k;
    std::printf("    %-22s %-48s grid %3d split %2d  %9.1f us  %7.1f TFLOPS  noise %4.1f%%  x%.3f of %s  #wrong %lld\n",
                r.spec.name.c_str(), plan.kernel.c_str(), plan.grid, plan.split_k, t[i].median_us,
                flop / t[i].median_us * 1e-6, t[i].noise_pct, t[i].median_us / t[0].median_us, runs[0]->spec.name.c_str(),
                static_cast<long long>(cmp.wrong));
    EXPECT_EQ(cmp.wrong, 0) << title << " " << r.spec.name;
  }
}

bool perf_enabled() {
  const char* on = std::getenv("WEAVE_GEMM_PERF");
  return on != nullptr && std::string(on) == "1";
}

}  // namespace

TEST(GemmMxPerf, Mxfp8AgainstBlockscaleAndSplitK) {
  WEAVE_REQUIRE_GPUS(1);
  if (!perf_enabled()) GTEST_SKIP() << "set WEAVE_GEMM_PERF=1 to time";
  int l2 = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const GemmPlanOverrides planner{};
  const GemmPlanOverrides t128{.block_m = 128, .block_n = 128, .split_k = 1};

  // mxfp8 vs blockscale: the promotion cost.
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{4096, 5120, 2048}, {8192, 7168, 2048}}) {
    const auto xa = bench::random_operand(11, m, k), xb = bench::random_operand(12, n, k);
    const auto mx = make_data(ScaleMode::kMxfp8, m, n, k, xa, xb, l2, stream);
    const auto bs = make_data(ScaleMode::kBlockscale, m, n, k, xa, xb, l2, stream);
    time_arms(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " mxfp8 vs blockscale",
              {{"mxfp8 raw", mx.get(), ScaleLayout::kRaw, planner},
               {"mxfp8 packed", mx.get(), ScaleLayout::kPacked, planner},
               {"blockscale 128x128", bs.get(), ScaleLayout::kRaw, t128},
               {"blockscale planner", bs.get(), ScaleLayout::kRaw, planner}},
              stream);
  }

  // split-K where the planner picks it (vs no split) and at 2048 x 2048 x 7168 (where it does not).
  {
    const int64_t m = 2048, n = 2048, k = 7168;
    const auto xa = bench::random_operand(21, m, k), xb = bench::random_operand(22, n, k);
    const auto bs = make_data(ScaleMode::kBlockscale, m, n, k, xa, xb, l2, stream);
    const auto mx = make_data(ScaleMode::kMxfp8, m, n, k, xa, xb, l2, stream);
    time_arms("2048x2048x7168 blockscale split-K",
              {{"bs planner", bs.get(), ScaleLayout::kRaw, planner},
               {"bs 128x128 split 2", bs.get(), ScaleLayout::kRaw, {.block_m = 128, .block_n = 128, .split_k = 2}},
               {"bs 256x128 split 1", bs.get(), ScaleLayout::kRaw, {.block_m = 256, .block_n = 128, .split_k = 1}},
               {"bs 256x128 split 2", bs.get(), ScaleLayout::kRaw, {.block_m = 256, .block_n = 128, .split_k = 2}},
               {"bs 256x128 split 3", bs.get(), ScaleLayout::kRaw, {.block_m = 256, .block_n = 128, .split_k = 3}}},
              stream);
    time_arms("2048x2048x7168 mxfp8 split-K",
              {{"mx raw planner", mx.get(), ScaleLayout::kRaw, planner},
               {"mx raw split 2", mx.get(), ScaleLayout::kRaw, {.split_k = 2}},
               {"mx packed planner", mx.get(), ScaleLayout::kPacked, planner}},
              stream);
  }
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{256, 1024, 7168}, {64, 8192, 4096}}) {
    const auto xa = bench::random_operand(31, m, k), xb = bench::random_operand(32, n, k);
    const auto bs = make_data(ScaleMode::kBlockscale, m, n, k, xa, xb, l2, stream);
    const auto mx = make_data(ScaleMode::kMxfp8, m, n, k, xa, xb, l2, stream);
    time_arms(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " split-K (planner) vs none",
              {{"bs planner", bs.get(), ScaleLayout::kRaw, planner},
               {"bs split 1", bs.get(), ScaleLayout::kRaw, {.split_k = 1}},
               {"mx raw planner", mx.get(), ScaleLayout::kRaw, planner},
               {"mx raw split 1", mx.get(), ScaleLayout::kRaw, {.split_k = 1}}},
              stream);
  }
  cudaStreamDestroy(stream);
}
