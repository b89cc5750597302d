// split-K with the workspace NaN-poisoned before every launch, and the split asserted.
//
// GemmSplitK.* (test_gemm_split_k.cu) reuses one workspace across its 20 launches without touching
// it: from the second launch on, every partial plane already holds the right values, so a launch
// whose GEMM kernel skipped a split's work items, wrote a plane at the wrong offset, or whose
// reduction read the workspace before the GEMM had written it (an ordering bug between the two
// kernels) still produced the right C. It also never checks that the plan it built really split K
// (a planner that normalised a forced split back to 1 would pass every one of its comparisons).
//
// Here, before every launch: C is NaN-poisoned and the whole workspace is NaN-poisoned (fp32
// 0x7FC00000), both on the launch's stream; after it C must match the fp64 reference and be
// bitwise equal to the first launch. A partial the GEMM did not write in this very launch then
// reaches C as NaN. Every plan asserts split_k == the forced value (> 1) and the workspace size
// split_k x M x N x 4.
#include <gtest/gtest.h>

#include <cstdio>

#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

// Runs `o` with a split-K plan (`split` forced, or 0 = the planner's) kRepeats times with the
// workspace poisoned before each launch; returns the plan's split.
int run_poisoned(const OperandSet& o, ScaleLayout layout, DType out, int split, cudaStream_t stream) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  Guarded c(p.m * p.n * dtype_bytes(out));
  GemmPlanOverrides ov;
  ov.split_k = split;
  ov.block_m = ov.block_n = 128;
  Gemm g(p, o.va, o.vb, o.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), ov);
  const std::string what = describe(o, out) + " " + std::string(to_string(layout)) + " " + g.plan().kernel +
                           " split " + std::to_string(g.plan().split_k) + " (asked " + std::to_string(split) + ")";
  SCOPED_TRACE(what);
  EXPECT_FALSE(g.plan().gemv);
  if (split > 0) EXPECT_EQ(g.plan().split_k, split) << "the forced split was not kept";
  EXPECT_GT(g.plan().split_k, 1) << "the plan does not split K: this test would test nothing";
  EXPECT_EQ(g.workspace_bytes(), static_cast<std::size_t>(g.plan().split_k) * p.m * p.n * 4);
  const Guarded ws = attach_workspace(g);
  if (ws.bytes() == 0) return g.plan().split_k;
  std::vector<uint8_t> first(c.bytes()), bytes(c.bytes());
  RepeatResult total;
  for (int i = 0; i < kRepeats; ++i) {
    bench::poison_nan(ws.get(), ws.bytes(), DType::kF32, stream);
    const RepeatResult r = run_repeated(g, o, c, out, 1, stream);  // poisons C, runs, syncs, compares
    total.runs += r.runs;
    total.bad_runs += r.bad_runs;
    total.never_written += r.never_written;
    total.worst_wrong = std::max(total.worst_wrong, r.worst_wrong);
    total.worst_rel_l2 = std::max(total.worst_rel_l2, r.worst_rel_l2);
    EXPECT_EQ(cudaMemcpy(bytes.data(), c.get(), bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (i == 0) first = bytes;
    else EXPECT_TRUE(bytes == first) << "launch " << i << " differs bitwise from launch 0";
  }
  EXPECT_EQ(total.runs, kRepeats);
  EXPECT_EQ(total.bad_runs, 0) << total.bad_runs << " launches wrong, worst " << total.worst_wrong << " elements";
  EXPECT_EQ(total.never_written, 0);
  if (!o.exact) EXPECT_LT(total.worst_rel_l2, rel_l2_bound(p.mode, out));
  EXPECT_TRUE(c.guard_intact()) << "wrote past C";
  EXPECT_TRUE(ws.guard_intact()) << "wrote past the workspace";
  std::printf("  %-48s %-6s %-44s split %2d  rel_l2 %.2e  bad %d/%d\n", describe(o, out).c_str(),
              std::string(to_string(layout)).c_str(), g.plan().kernel.c_str(), g.plan().split_k, total.worst_rel_l2,
              total.bad_runs, total.runs);
  return g.plan().split_k;
}

}  // namespace

TEST(GemmSplitKPoisoned, ForcedSplitsWithWorkspacePoisonedBeforeEveryLaunch) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int tried = 0;
  for (const Mode md : kModes) {
    // K = 2560: 20 fp8 / 40 bf16 K blocks, so 3 and 7 divide them unevenly (a short last split).
    const int64_t m = 200, n = 392, k = 2560;
    GemmProblem probe{.m = m, .n = n, .k = k, .mode = md.mode, .scale_layout = md.layout};
    if (!split_k_tiles_built(probe)) continue;
    const OperandSet o = make_operands(md.mode, m, n, k, 5100 + 10 * static_cast<int>(md.mode) +
                                                             static_cast<int>(md.layout), false);
    for (DType out : {DType::kBF16, DType::kF32})
      for (int split : {2, 3, 7}) {
        run_poisoned(o, md.layout, out, split, stream);
        ++tried;
        if (HasFatalFailure()) return;
      }
  }
  EXPECT_GT(tried, 0) << "no instance built";
  cudaStreamDestroy(stream);
}

// The planner's own split (16 tiles of 128x128 leave most SMs idle at K = 7168), poisoned the same
// way; the plan must split.
TEST(GemmSplitKPoisoned, PlannerSplitWithWorkspacePoisonedBeforeEveryLaunch) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const Mode md : {Mode{ScaleMode::kBF16, ScaleLayout::kRaw}, Mode{ScaleMode::kBlockscale, ScaleLayout::kRaw}}) {
    GemmProblem probe{.m = 256, .n = 1024, .k = 7168, .mode = md.mode, .scale_layout = md.layout};
    if (!split_k_tiles_built(probe)) continue;
    const OperandSet o = make_operands(md.mode, 256, 1024, 7168, 5300 + static_cast<int>(md.mode), false);
    const int planned = run_poisoned(o, md.layout, DType::kBF16, 0, stream);
    EXPECT_GE(planned, 2) << to_string(md.mode) << ": the planner did not split";
  }
  cudaStreamDestroy(stream);
}
