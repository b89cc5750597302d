// split-K on the GPU: every mode (bf16, ptpc, blockscale, mxfp8 raw and packed) x output dtype,
// split 2, 3 and 5 (forced) against no split and against the fp64 reference, 20 NaN-poisoned
// launches each; bitwise reproducibility of split results (fixed summation order); integer inputs
// bitwise against the reference for every split; the planner's own split where it picks one; a
// guarded workspace; run() without a workspace refused naming set_workspace; bad workspaces
// refused; a split plan inside a CUDA graph.
#include <gtest/gtest.h>

#include <cstdio>

#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

std::vector<uint8_t> download_bytes(const Guarded& c) {
  std::vector<uint8_t> h(c.bytes());
  EXPECT_EQ(cudaMemcpy(h.data(), c.get(), h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// Runs `o` with split_k = `split` (0 = planner) kRepeats times against the reference; returns the
// output bytes of every launch's result (all must be equal).
std::vector<uint8_t> run_split(const OperandSet& o, ScaleLayout layout, DType out, int split, int* planned_split,
                               cudaStream_t stream) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  Guarded c(p.m * p.n * dtype_bytes(out));
  GemmPlanOverrides ov;
  ov.split_k = split;
  ov.block_m = ov.block_n = 128;
  Gemm g(p, o.va, o.vb, o.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), ov);
  if (planned_split) *planned_split = g.plan().split_k;
  EXPECT_EQ(g.workspace_bytes(), g.plan().split_k > 1 ? size_t(g.plan().split_k) * p.m * p.n * 4 : 0u);
  const Guarded ws = attach_workspace(g);
  std::vector<uint8_t> first;
  RepeatResult r;
  for (int i = 0; i < kRepeats; ++i) {
    const RepeatResult one = run_repeated(g, o, c, out, 1, stream);
    r.runs += one.runs;
    r.bad_runs += one.bad_runs;
    r.worst_wrong = std::max(r.worst_wrong, one.worst_wrong);
    r.worst_rel_l2 = std::max(r.worst_rel_l2, one.worst_rel_l2);
    r.worst_max_abs = std::max(r.worst_max_abs, one.worst_max_abs);
    const std::vector<uint8_t> bytes = download_bytes(c);
    if (i == 0)
      first = bytes;
    else
      EXPECT_TRUE(bytes == first) << "split " << g.plan().split_k << ": launch " << i << " differs bitwise from launch 0";
  }
  const std::string what = describe(o, out) + " " + std::string(to_string(layout)) + " " + g.plan().kernel + " split " +
                           std::to_string(g.plan().split_k);
  EXPECT_EQ(r.bad_runs, 0) << what << ": worst " << r.worst_wrong << " wrong, max_abs " << r.worst_max_abs << " rms "
                           << o.rms;
  if (!o.exact) EXPECT_LT(r.worst_rel_l2, rel_l2_bound(p.mode, out)) << what;
  EXPECT_TRUE(c.guard_intact()) << what;
  if (ws.bytes() > 0) EXPECT_TRUE(ws.guard_intact()) << what << ": wrote past the workspace";
  std::printf("  %-50s %-6s %-44s split %d grid %3d  rel_l2 %.2e  max_abs/rms %.2e  bad %d/%d\n",
              describe(o, out).c_str(), std::string(to_string(layout)).c_str(), g.plan().kernel.c_str(),
              g.plan().split_k, g.plan().grid, r.worst_rel_l2, o.rms > 0 ? r.worst_max_abs / o.rms : 0.0, r.bad_runs,
              r.runs);
  return first;
}

// Max |a - b| / rms over two outputs of the same dtype.
double max_diff_over_rms(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, DType out, double rms) {
  const std::size_t n = a.size() / dtype_bytes(out);
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double x, y;
    if (out == DType::kF32) {
      float fx, fy;
      std::memcpy(&fx, a.data() + 4 * i, 4);
      std::memcpy(&fy, b.data() + 4 * i, 4);
      x = fx, y = fy;
    } else {
      uint16_t hx, hy;
      std::memcpy(&hx, a.data() + 2 * i, 2);
      std::memcpy(&hy, b.data() + 2 * i, 2);
      x = ref::bf16_to_float(hx), y = ref::bf16_to_float(hy);
    }
    worst = std::max(worst, std::abs(x - y));
  }
  return rms > 0 ? worst / rms : worst;
}

}  // namespace

TEST(GemmSplitK, AgreesWithNoSplitInEveryMode) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int tried = 0;
  for (const Mode md : kModes) {
    // K = 2560: 20 fp8 / 40 bf16 K blocks; 3 and 5 splits divide them unevenly for bf16 (40 / 3).
    for (const bool exact : {false, true}) {
      const int64_t m = exact ? 130 : 200, n = exact ? 136 : 392, k = 2560;
      GemmProblem probe{.m = m, .n = n, .k = k, .mode = md.mode, .scale_layout = md.layout};
      if (!split_k_tiles_built(probe)) continue;
      const OperandSet o = make_operands(md.mode, m, n, k, 500 + 10 * static_cast<int>(md.mode) + exact, exact);
      for (DType out : {DType::kBF16, DType::kF32}) {
        const std::vector<uint8_t> base = run_split(o, md.layout, out, 1, nullptr, stream);
        for (int split : {2, 3, 5}) {
          const std::vector<uint8_t> s = run_split(o, md.layout, out, split, nullptr, stream);
          if (exact) {
            EXPECT_TRUE(s == base) << describe(o, out) << " split " << split << ": integer inputs differ from no split";
          } else {
            // Both are within the reference bounds (checked above); against each other they
            // differ by the rounding of the partial sums (fp32), by one output ulp (bf16), and for
            // ptpc (tensor-core accumulation over each split's whole K range) by its accumulation
            // error.
            const double d = max_diff_over_rms(s, base, out, o.rms);
            const double bound = md.mode == ScaleMode::kPtpc ? 1e-1 : out == DType::kF32 ? 1e-3 : 5e-2;
            EXPECT_LT(d, bound) << describe(o, out) << " split " << split;
          }
        }
        ++tried;
      }
    }
  }
  EXPECT_GT(tried, 0);
  cudaStreamDestroy(stream);
}

TEST(GemmSplitK, PlannerSplitRunsWhereTilesLeaveSmsIdle) {
  WEAVE_REQUIRE_GPUS(1);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const Mode md : {Mode{ScaleMode::kBlockscale, ScaleLayout::kRaw}, Mode{ScaleMode::kMxfp8, ScaleLayout::kPacked}}) {
    GemmProblem probe{.m = 256, .n = 1024, .k = 7168, .mode = md.mode, .scale_layout = md.layout};
    if (!split_k_tiles_built(probe)) continue;
    const OperandSet o = make_operands(md.mode, 256, 1024, 7168, 700, false);
    int planned = 0;
    run_split(o, md.layout, DType::kBF16, 0, &planned, stream);
    EXPECT_GE(planned, 2) << "16 tiles of 128x128 on " << sms << " SMs with K = 7168: the planner should split";
  }
  cudaStreamDestroy(stream);
}

TEST(GemmSplitK, WorkspaceIsRequiredAndChecked) {
  WEAVE_REQUIRE_GPUS(1);
  GemmProblem probe{.m = 256, .n = 256, .k = 2048, .mode = ScaleMode::kBlockscale, .out_dtype = DType::kBF16};
  if (!split_k_tiles_built(probe)) GTEST_SKIP() << "blockscale instances not built";
  const OperandSet o = make_operands(ScaleMode::kBlockscale, 256, 256, 2048, 801, false);
  GemmProblem p = o.p;
  p.out_dtype = DType::kBF16;
  Guarded c(256 * 256 * 2);
  Gemm g(p, o.va, o.vb, o.scales, TensorView::matrix(c.get(), DType::kBF16, 256, 256, 0),
         GemmPlanOverrides{.split_k = 4});
  ASSERT_EQ(g.plan().split_k, 4);
  EXPECT_EQ(g.workspace_bytes(), 4u * 256 * 256 * 4);
  // No workspace: run() refuses, naming set_workspace, and enqueues nothing.
  bench::poison_nan(c.get(), c.bytes(), DType::kBF16, nullptr);
  try {
    g.run(nullptr);
    ADD_FAILURE() << "run() without a workspace must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("set_workspace"), std::string::npos) << e.what();
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(compare_output(o, c, DType::kBF16).never_written, 256 * 256) << "a refused run wrote C";
  // Too small, misaligned, host memory: refused naming the argument.
  Guarded ws(g.workspace_bytes());
  EXPECT_THROW(g.set_workspace(ws.get(), g.workspace_bytes() - 4), Error);
  EXPECT_THROW(g.set_workspace(static_cast<char*>(ws.get()) + 4, g.workspace_bytes()), Error);
  std::vector<float> host(g.workspace_bytes() / 4);
  try {
    g.set_workspace(host.data(), g.workspace_bytes());
    ADD_FAILURE() << "host workspace accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'workspace'"), std::string::npos) << e.what();
  }
  // A proper one works; a plan without split needs none.
  g.set_workspace(ws.get(), ws.bytes());
  EXPECT_EQ(run_repeated(g, o, c, DType::kBF16, 3, nullptr).bad_runs, 0);
  Gemm g1(p, o.va, o.vb, o.scales, TensorView::matrix(c.get(), DType::kBF16, 256, 256, 0),
          GemmPlanOverrides{.split_k = 1});
  EXPECT_EQ(g1.workspace_bytes(), 0u);
  EXPECT_EQ(run_repeated(g1, o, c, DType::kBF16, 3, nullptr).bad_runs, 0);
}

TEST(GemmSplitK, SplitPlanIsGraphCapturable) {
  WEAVE_REQUIRE_GPUS(1);
  GemmProblem probe{.m = 300, .n = 392, .k = 4096, .mode = ScaleMode::kMxfp8, .out_dtype = DType::kF32};
  if (!split_k_tiles_built(probe)) GTEST_SKIP() << "mxfp8 instances not built";
  const OperandSet o = make_operands(ScaleMode::kMxfp8, 300, 392, 4096, 901, false);
  GemmProblem p = o.p;
  p.out_dtype = DType::kF32;
  Guarded c(p.m * p.n * 4);
  Gemm g(p, o.va, o.vb, o.scales, TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0),
         GemmPlanOverrides{.split_k = 3});
  const Guarded ws = attach_workspace(g);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  bench::poison_nan(c.get(), c.bytes(), DType::kF32, s);
  for (int i = 0; i < 3; ++i) g.run(s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(compare_output(o, c, DType::kF32).wrong, 0) << "graph replay " << rep;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}
