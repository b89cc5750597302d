// Blockscale's two A-scale layouts (ScaleLayout::kRaw row-major, kMnMajor M-contiguous): the
// mn-major kernels load each stage's A scales with one TMA inside the stage's transaction
// (gemm/scale_policy.cuh) and run 128-row tiles on the two-block-set schedule, so they share no
// scale-loading code with the raw kernels. What each test catches:
//  - BitwiseEqualToRowMajor: a wrong TMA box (coordinates swapped, rows past M not zero, a box
//    landing in the wrong stage), an expect_tx that does not count the scale bytes (a consumer
//    reading the column before it lands, or a hang), or a schedule that promotes a block with
//    another stage's factors. Every M in the list is run with the planner's plan, both tiles
//    forced and split-K 3, both output dtypes, each NaN-poisoned 5 times against the fp64
//    reference, and the output must equal the raw layout's bitwise (same wgmmas, same fma order);
//    M not a multiple of 4 or of the tile checks the padded column stride and the TMA's clipping.
//    The raw layout also runs on its MN-major copy route (GemmPlan::scale_a_mn_copy, forced), which
//    must equal the as-given kernel bitwise too: a copy kernel that drops, swaps or misplaces a
//    scale (rows past a 32-row tile, K blocks past 32, the padded column) changes the output.
//  - MnMajorCopyRouteReadsStridedScalesAndNeedsItsWorkspace: row-major scales with a padded row
//    stride give the same bits through the copy as dense ones; the route refuses to run without
//    its workspace, naming set_workspace, before any GPU work.
//  - RefusesMalformedMnMajorScales: each rule of the layout (M-contiguous, column stride >= M and
//    a multiple of 4, 16-byte aligned base) refused before any GPU work, naming 'scale_a'.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

#include "gemm/planner.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

constexpr int kLayoutRepeats = 5;

std::vector<uint8_t> download_bytes(const Guarded& c) {
  std::vector<uint8_t> h(c.bytes());
  EXPECT_EQ(cudaMemcpy(h.data(), c.get(), h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Runs `o` in `layout` with overrides `ov`; checks every launch against the reference and returns
// the last output's bytes.
std::vector<uint8_t> run_layout(const OperandSet& o, ScaleLayout layout, DType out, const GemmPlanOverrides& ov,
                                int repeats, std::string& kernel, cudaStream_t stream) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  Guarded c(static_cast<std::size_t>(p.m * p.n) * dtype_bytes(out));
  Gemm g(p, o.va, o.vb, o.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), ov);
  kernel = g.plan().kernel + " split " + std::to_string(g.plan().split_k);
  const Guarded ws = attach_workspace(g);
  const RepeatResult r = run_repeated(g, o, c, out, repeats, stream);
  const std::string what = describe(o, out) + " " + std::string(to_string(layout)) + " " + kernel;
  EXPECT_EQ(r.runs, repeats) << what;
  EXPECT_EQ(r.bad_runs, 0) << what << ": worst " << r.worst_wrong << " wrong (first at " << r.first_wrong
                           << "), max_abs " << r.worst_max_abs << " rms " << o.rms;
  EXPECT_EQ(r.never_written, 0) << what;
  if (!o.exact) EXPECT_LT(r.worst_rel_l2, rel_l2_bound(p.mode, out)) << what;
  EXPECT_TRUE(c.guard_intact()) << what << ": wrote past the end of C";
  return download_bytes(c);
}

}  // namespace

TEST(GemmBlockscaleLayout, BitwiseEqualToRowMajor) {
  WEAVE_REQUIRE_GPUS(1);
  GemmProblem probe{.m = 256, .n = 256, .k = 256, .mode = ScaleMode::kBlockscale, .scale_layout = ScaleLayout::kMnMajor};
  if (gemm::gemm_tile_candidates(probe).empty()) GTEST_SKIP() << "no mn-major blockscale instance in this build";
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  struct Case {
    int64_t m, n, k;
  };
  // M: the GEMV (1, 7, 32), tile edges (127, 129, 255, 257), not multiples of 4 (33, 1001, 2049).
  const Case cases[] = {{1, 392, 640},    {7, 264, 1024},   {32, 392, 640},    {33, 392, 640},
                        {127, 256, 1152}, {129, 392, 640},  {255, 1024, 2048}, {257, 1024, 1152},
                        {1001, 392, 640}, {2049, 384, 2048}, {4096, 2048, 1024}};
  uint64_t seed = 7300;
  int compared = 0;
  for (const Case& cs : cases) {
    for (const bool exact : {false, true}) {
      const OperandSet o = make_operands(ScaleMode::kBlockscale, cs.m, cs.n, cs.k, seed++, exact);
      std::vector<GemmPlanOverrides> plans = {GemmPlanOverrides{},
                                              GemmPlanOverrides{.block_m = 128, .block_n = 128, .split_k = 1},
                                              GemmPlanOverrides{.block_m = 256, .block_n = 128, .split_k = 1}};
      if (cs.k / 128 >= 3) plans.push_back(GemmPlanOverrides{.block_m = 128, .block_n = 128, .split_k = 3});
      for (const DType out : {DType::kBF16, DType::kF32}) {
        for (const GemmPlanOverrides& ov : plans) {
          std::string raw_kernel, mn_kernel, copy_kernel;
          const std::vector<uint8_t> raw = run_layout(o, ScaleLayout::kRaw, out, ov, 1, raw_kernel, stream);
          const std::vector<uint8_t> mn =
              run_layout(o, ScaleLayout::kMnMajor, out, ov, kLayoutRepeats, mn_kernel, stream);
          EXPECT_TRUE(raw == mn) << describe(o, out) << ": mn-major (" << mn_kernel
                                 << ") differs bitwise from raw (" << raw_kernel << ")";
          // The copy route against the same plan reading the scales as given (both forced: a
          // forced route runs the tiled kernels, so M <= 32 is compared there, not on the GEMV).
          GemmPlanOverrides copy = ov, as_given = ov;
          copy.scale_a_route = ScaleARoute::kMnMajorCopy;
          as_given.scale_a_route = ScaleARoute::kAsGiven;
          std::string given_kernel;
          const std::vector<uint8_t> raw_given =
              ov.block_m != 0 ? raw : run_layout(o, ScaleLayout::kRaw, out, as_given, 1, given_kernel, stream);
          const std::vector<uint8_t> raw_copy = run_layout(o, ScaleLayout::kRaw, out, copy, 2, copy_kernel, stream);
          EXPECT_TRUE(raw_given == raw_copy) << describe(o, out) << ": raw through the MN-major copy (" << copy_kernel
                                             << ") differs bitwise from raw as given ("
                                             << (ov.block_m != 0 ? raw_kernel : given_kernel) << ")";
          if (HasFailure()) {
            cudaStreamDestroy(stream);
            return;
          }
          ++compared;
        }
      }
      EXPECT_TRUE(inputs_intact(o)) << "a kernel wrote into its inputs";
    }
  }
  std::printf("  %d configurations: mn-major and raw through its MN-major copy bitwise equal to raw, every launch "
              "within the fp64 bound\n",
              compared);
  cudaStreamDestroy(stream);
}

TEST(GemmBlockscaleLayout, RefusesMalformedMnMajorScales) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t m = 200, n = 256, k = 512, kb = k / 128;
  const OperandSet o = make_operands(ScaleMode::kBlockscale, m, n, k, 7400, false);
  GemmProblem p = o.p;
  p.scale_layout = ScaleLayout::kMnMajor;
  Guarded c(static_cast<std::size_t>(m * n) * 2);
  const TensorView cv = TensorView::matrix(c.get(), DType::kBF16, m, n, 0);
  auto view = [&](void* data, int64_t s0, int64_t s1) {
    return TensorView{.data = data, .dtype = DType::kF32, .rank = 2, .shape = {m, kb}, .strides = {s0, s1}, .device = 0};
  };
  auto refused = [&](const TensorView& sa, const char* rule) {
    const std::string msg = error_of([&] { Gemm g(p, o.va, o.vb, GemmScales{sa, o.scales.b}, cv); });
    EXPECT_NE(msg.find("'scale_a'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(rule), std::string::npos) << "expected '" << rule << "' in: " << msg;
  };
  refused(o.scales.a, "M-contiguous");                 // row-major scales declared mn-major
  refused(view(o.sa_mn.get(), 1, 202), "multiple of 4");  // column stride not 16-byte aligned
  refused(view(o.sa_mn.get(), 1, 196), ">= M");          // columns overlap
  refused(view(static_cast<char*>(o.sa_mn.get()) + 4, 1, 204), "16-byte aligned");
  // The raw layout refuses M-contiguous scales instead of guessing them.
  GemmProblem raw = o.p;
  const std::string msg = error_of([&] { Gemm g(raw, o.va, o.vb, o.scales_mn, cv); });
  EXPECT_NE(msg.find("'scale_a'"), std::string::npos) << msg;
  // mn-major is a blockscale layout only.
  GemmProblem ptpc{.m = m, .n = n, .k = k, .mode = ScaleMode::kPtpc, .scale_layout = ScaleLayout::kMnMajor};
  EXPECT_NE(gemm_validate_problem(ptpc).find("applies to mode blockscale only"), std::string::npos);
}

TEST(GemmBlockscaleLayout, MnMajorCopyRouteReadsStridedScalesAndNeedsItsWorkspace) {
  WEAVE_REQUIRE_GPUS(1);
  GemmProblem probe{.m = 256, .n = 256, .k = 256, .mode = ScaleMode::kBlockscale, .scale_layout = ScaleLayout::kMnMajor};
  if (gemm::gemm_tile_candidates(probe).empty()) GTEST_SKIP() << "no mn-major blockscale instance in this build";
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // 45 K blocks: two 32-wide K-block tiles of the copy, the second partial; M = 301: ten row tiles.
  const int64_t m = 301, n = 384, k = 45 * 128, kb = k / 128, pad_ld = kb + 7;
  const OperandSet o = make_operands(ScaleMode::kBlockscale, m, n, k, 7500, false);
  const GemmPlanOverrides copy{.scale_a_route = ScaleARoute::kMnMajorCopy};
  std::string kernel;
  const std::vector<uint8_t> dense = run_layout(o, ScaleLayout::kRaw, DType::kF32, {}, 1, kernel, stream);

  // The same scales in rows of pad_ld floats, the padding NaN (a copy reading it poisons C).
  std::vector<float> h_sa(static_cast<std::size_t>(m * kb));
  ASSERT_EQ(cudaMemcpy(h_sa.data(), o.scales.a.data, h_sa.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> h_pad(static_cast<std::size_t>(m * pad_ld), std::numeric_limits<float>::quiet_NaN());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < kb; ++c) h_pad[r * pad_ld + c] = h_sa[r * kb + c];
  Guarded sa_pad(h_pad.size() * 4);
  ASSERT_EQ(cudaMemcpy(sa_pad.get(), h_pad.data(), h_pad.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const TensorView sa_view = TensorView::matrix(sa_pad.get(), DType::kF32, m, kb, pad_ld, 0);

  Guarded c(static_cast<std::size_t>(m * n) * 4);
  GemmProblem p = o.p;
  p.out_dtype = DType::kF32;
  Gemm g(p, o.va, o.vb, GemmScales{sa_view, o.scales.b}, TensorView::matrix(c.get(), DType::kF32, m, n, 0), copy);
  ASSERT_TRUE(g.plan().scale_a_mn_copy) << g.plan().reason;
  EXPECT_NE(g.plan().kernel.find("mn"), std::string::npos) << g.plan().kernel;
  EXPECT_NE(g.workspace_purpose().find("MN-major copy"), std::string::npos) << g.workspace_purpose();
  // No workspace yet: refused before anything is enqueued.
  const std::string msg = error_of([&] { g.run(stream); });
  EXPECT_NE(msg.find("set_workspace"), std::string::npos) << msg;
  const Guarded ws = attach_workspace(g);
  for (int rep = 0; rep < 3; ++rep) {
    bench::poison_nan(c.get(), c.bytes(), DType::kF32, stream);
    g.run(stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    EXPECT_TRUE(download_bytes(c) == dense) << "run " << rep << ": the copy of strided scales differs bitwise from "
                                            << "the dense scales read as given (" << kernel << ")";
  }
  EXPECT_TRUE(c.guard_intact());
  cudaStreamDestroy(stream);
}
