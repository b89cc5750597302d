// weave::Gemm beyond plain correctness: the debug negative control (a dropped pipeline wait must be
// seen by the repeated checks, in one planned kernel per mode and in every built instance),
// re-pointed operands, CUDA-graph capture, refusals of bad operands,
// and a small all-instance case for compute-sanitizer.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "gemm/dispatch.hpp"
#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "support/scoped_env.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

RepeatResult run_planned(const OperandSet& o, DType out, int repeats, std::string* kernel = nullptr,
                         ScaleLayout layout = ScaleLayout::kRaw) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  Guarded c(p.m * p.n * dtype_bytes(out));
  // split_k = 1: the negative control targets the GEMM kernel's own pipeline (mxfp8: its native
  // fp8 kernel, not the bf16 route's kernel).
  GemmPlanOverrides ov{.split_k = 1};
  if (p.mode == ScaleMode::kMxfp8) ov.mx_route = MxRoute::kNative;
  Gemm g(p, o.va, o.vb, o.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), ov);
  if (kernel) *kernel = g.plan().kernel;
  const Guarded ws = attach_workspace(g);
  return run_repeated(g, o, c, out, repeats, nullptr);
}

}  // namespace

// With WEAVE_GEMM_DEBUG_DROP_WAIT=1 the consumers read each stage before its TMA has landed
// (the wait moves after the reads). The same repeated check that passes without the switch must
// fail with it: proof that the tests can see a pipeline race.
TEST(GemmNegativeControl, DroppedFullWaitIsDetected) {
  WEAVE_REQUIRE_GPUS(1);
  struct Case {
    ScaleMode mode;
    ScaleLayout layout;
  };
  for (const Case cs : {Case{ScaleMode::kBF16, ScaleLayout::kRaw}, Case{ScaleMode::kPtpc, ScaleLayout::kRaw},
                        Case{ScaleMode::kBlockscale, ScaleLayout::kRaw},
                        Case{ScaleMode::kBlockscale, ScaleLayout::kMnMajor}, Case{ScaleMode::kMxfp8, ScaleLayout::kRaw},
                        Case{ScaleMode::kMxfp8, ScaleLayout::kPacked}}) {
    const ScaleMode mode = cs.mode;
    if (gemm::gemm_tile_candidates(GemmProblem{.m = 1000, .n = 1024, .k = 2048, .mode = mode,
                                               .scale_layout = cs.layout, .out_dtype = DType::kF32})
            .empty())
      continue;  // not built in this (narrowed) build
    const OperandSet o = make_operands(mode, 1000, 1024, 2048, 77 + static_cast<int>(mode), false);
    std::string kernel;
    const RepeatResult clean = run_planned(o, DType::kF32, 20, &kernel, cs.layout);
    EXPECT_EQ(clean.bad_runs, 0) << to_string(mode) << " " << kernel << " without the switch";
    RepeatResult dropped;
    {
      ScopedEnv env("WEAVE_GEMM_DEBUG_DROP_WAIT", "1");
      dropped = run_planned(o, DType::kF32, 20, nullptr, cs.layout);
    }
    std::printf("  negative control %-10s %-46s: clean %d/%d bad, dropped wait %d/%d bad (worst %lld wrong)\n",
                std::string(to_string(mode)).c_str(), kernel.c_str(), clean.bad_runs, clean.runs, dropped.bad_runs,
                dropped.runs, static_cast<long long>(dropped.worst_wrong));
    EXPECT_GT(dropped.bad_runs, 0) << to_string(mode) << ": the dropped wait went unnoticed in 20 runs";
  }
}

// The same control through every built local-store instance (every tile: 128x128, 256x128,
// 64-row, 128x160, ...; every mode, scale layout and output dtype), each forced by its tile: 10
// clean launches must pass, and 10 with the dropped wait must not all pass. Then the second
// control, WEAVE_GEMM_DEBUG_EARLY_RELEASE=1 (consumers release a stage on its empty barrier before
// their wgmmas read it, so the producer refills it under them), in every instance that compiles
// its consumer role twice (GemmKernelEntry::early_release_control; the others are listed as not
// covered). The fused instances: EmulatedFusedOp.ADroppedPipelineWaitFailsTheSelfTestInEveryQuant.
TEST(GemmNegativeControl, PipelineFaultsAreDetectedInEveryBuiltInstance) {
  WEAVE_REQUIRE_GPUS(1);
  constexpr int kRuns = 10;
  int instances = 0, dropped_caught = 0, early_tried = 0, early_caught = 0;
  std::string early_not_covered;
  std::map<int, OperandSet> sets;  // by mode: one operand set per scale mode
  for (const gemm::GemmInstance& inst : gemm::gemm_instances()) {
    const int key = static_cast<int>(inst.mode);
    if (!sets.count(key)) sets.emplace(key, make_operands(inst.mode, 1000, 1024, 2048, 177 + key, false));
    const OperandSet& o = sets.at(key);
    GemmProblem p = o.p;
    p.out_dtype = inst.out_dtype;
    p.scale_layout = inst.scale_layout;
    GemmPlanOverrides ov{.block_m = inst.block_m, .block_n = inst.block_n, .split_k = 1, .cluster = inst.cluster_m};
    if (p.mode == ScaleMode::kMxfp8) ov.mx_route = MxRoute::kNative;
    if (p.mode == ScaleMode::kBlockscale && p.scale_layout == ScaleLayout::kRaw) ov.scale_a_route = ScaleARoute::kAsGiven;
    // Bad launches of kRuns with the knob `env` set (nullptr: none); the plan's kernel in *kernel.
    auto bad_runs = [&](const char* env, std::string* kernel) {
      std::optional<ScopedEnv> knob;
      if (env) knob.emplace(env, "1");
      Guarded c(p.m * p.n * dtype_bytes(p.out_dtype));
      Gemm g(p, o.va, o.vb, o.scales_for(p.scale_layout), TensorView::matrix(c.get(), p.out_dtype, p.m, p.n, 0), ov);
      if (kernel) *kernel = g.plan().kernel;
      const Guarded ws = attach_workspace(g);
      return run_repeated(g, o, c, p.out_dtype, kRuns, nullptr).bad_runs;
    };
    std::string kernel;
    const int clean = bad_runs(nullptr, &kernel);
    ASSERT_EQ(kernel, inst.name) << "the forced tile did not select the instance under test";
    const int dropped = bad_runs("WEAVE_GEMM_DEBUG_DROP_WAIT", nullptr);
    ++instances;
    dropped_caught += dropped > 0;
    EXPECT_EQ(clean, 0) << inst.name << " without a knob";
    EXPECT_GT(dropped, 0) << inst.name << ": the dropped wait went unnoticed in " << kRuns << " runs";
    int early = -1;
    if (inst.early_release_control) {
      early = bad_runs("WEAVE_GEMM_DEBUG_EARLY_RELEASE", nullptr);
      ++early_tried;
      early_caught += early > 0;
      EXPECT_GT(early, 0) << inst.name << ": the early release went unnoticed in " << kRuns << " runs";
    } else {
      early_not_covered += std::string(early_not_covered.empty() ? "" : ", ") + inst.name;
    }
    std::printf("  negative controls %-52s clean %d/%d bad, dropped wait %d/%d bad, early release %s\n", inst.name,
                clean, kRuns, dropped, kRuns,
                early < 0 ? "n/a (one consumer role)" : (std::to_string(early) + "/" + std::to_string(kRuns) + " bad").c_str());
  }
  std::printf("  dropped wait caught in %d of %d built instances; early release caught in %d of %d tried\n",
              dropped_caught, instances, early_caught, early_tried);
  if (!early_not_covered.empty())
    std::printf("  early release not covered (one consumer role, single_consumer_role): %s\n", early_not_covered.c_str());
  EXPECT_GT(instances, 0) << "no instance built";
  EXPECT_GT(early_tried, 0) << "no instance took the early-release control";
}

TEST(GemmOperands, SetOperandsRepointsWithoutReplanning) {
  WEAVE_REQUIRE_GPUS(1);
  const OperandSet o1 = make_operands(ScaleMode::kBlockscale, 300, 512, 1024, 11, false);
  const OperandSet o2 = make_operands(ScaleMode::kBlockscale, 300, 512, 1024, 12, false);
  GemmProblem p = o1.p;
  p.out_dtype = DType::kBF16;
  Guarded c1(p.m * p.n * 2), c2(p.m * p.n * 2);
  Gemm g(p, o1.va, o1.vb, o1.scales, TensorView::matrix(c1.get(), DType::kBF16, p.m, p.n, 0));
  const GemmPlan before = g.plan();
  EXPECT_EQ(run_repeated(g, o1, c1, DType::kBF16, 3, nullptr).bad_runs, 0);
  g.set_operands(o2.va, o2.vb, o2.scales, TensorView::matrix(c2.get(), DType::kBF16, p.m, p.n, 0));
  EXPECT_EQ(g.plan().kernel, before.kernel);
  EXPECT_EQ(run_repeated(g, o2, c2, DType::kBF16, 3, nullptr).bad_runs, 0);
  // Shapes are checked again: a B of the wrong height is refused naming it.
  try {
    g.set_operands(o2.va, TensorView::matrix(o2.b.get(), DType::kE4M3, 256, 1024, 0), o2.scales,
                   TensorView::matrix(c2.get(), DType::kBF16, p.m, p.n, 0));
    ADD_FAILURE() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'B'"), std::string::npos) << e.what();
  }
}

TEST(GemmOperands, RunIsGraphCapturable) {
  WEAVE_REQUIRE_GPUS(1);
  const OperandSet o = make_operands(ScaleMode::kPtpc, 257, 768, 1280, 21, false);
  GemmProblem p = o.p;
  p.out_dtype = DType::kBF16;
  Guarded c(p.m * p.n * 2);
  Gemm g(p, o.va, o.vb, o.scales, TensorView::matrix(c.get(), DType::kBF16, p.m, p.n, 0));
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  bench::poison_nan(c.get(), c.bytes(), DType::kBF16, s);
  for (int i = 0; i < 4; ++i) g.run(s);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const ref::Comparison cmp = compare_output(o, c, DType::kBF16);
    EXPECT_EQ(cmp.wrong, 0) << "graph replay " << rep;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(GemmOperands, BadOperandsAreRefusedNamingTheArgument) {
  WEAVE_REQUIRE_GPUS(1);
  const OperandSet o = make_operands(ScaleMode::kBlockscale, 256, 256, 512, 31, false);
  GemmProblem p = o.p;
  p.out_dtype = DType::kF32;
  Guarded c(p.m * p.n * 4);
  const TensorView cv = TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0);
  auto expect_refusal = [&](const char* needle, auto&& make) {
    try {
      make();
      ADD_FAILURE() << "expected a refusal mentioning " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  // A in bf16 where e4m3 is required.
  expect_refusal("'A'", [&] { Gemm g(p, TensorView::matrix(o.a.get(), DType::kBF16, 256, 256, 0), o.vb, o.scales, cv); });
  // Misaligned base address (TMA needs 16 bytes).
  expect_refusal("16-byte", [&] {
    Gemm g(p, TensorView::matrix(static_cast<char*>(o.a.get()) + 8, DType::kE4M3, 256, 512, 0), o.vb, o.scales, cv);
  });
  // Block scales in the transposed (M-major) layout: same shape, strides say otherwise.
  expect_refusal("'scale_a'", [&] {
    TensorView t = o.scales.a;
    t.strides = {1, p.m, 0, 0};
    Gemm g(p, o.va, o.vb, GemmScales{t, o.scales.b}, cv);
  });
  // ptpc-style vector scales handed to blockscale.
  expect_refusal("'scale_b'", [&] {
    Gemm g(p, o.va, o.vb, GemmScales{o.scales.a, TensorView::vector(o.sb.get(), DType::kF32, 256, 0)}, cv);
  });
  // C of the wrong dtype.
  expect_refusal("'C'", [&] { Gemm g(p, o.va, o.vb, o.scales, TensorView::matrix(c.get(), DType::kBF16, 256, 256, 0)); });
  // Host memory.
  std::vector<uint8_t> host(256 * 512);
  expect_refusal("'A'", [&] { Gemm g(p, TensorView::matrix(host.data(), DType::kE4M3, 256, 512, kHostDevice), o.vb, o.scales, cv); });
  // K not a multiple of 128 for blockscale: the problem itself is refused.
  GemmProblem bad = p;
  bad.k = 320;
  expect_refusal("multiple of 128", [&] { Gemm g(bad, o.va, o.vb, o.scales, cv); });
}

// One small case per instance, a single launch each: the workload for
// `compute-sanitizer --tool memcheck|racecheck --gtest_filter=GemmSanitizer.*`.
TEST(GemmSanitizer, EveryInstanceOnce) {
  WEAVE_REQUIRE_GPUS(1);
  for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    // K = 416: 3.25 stages (an mxfp8 K tail of one group; blockscale needs K % 128, so 384 there).
    const int64_t k = mode == ScaleMode::kBlockscale ? 384 : 416;
    const OperandSet o = make_operands(mode, 129, 264, k, 41, false);
    for (const auto& inst : gemm::gemm_instances()) {
      if (inst.mode != mode) continue;
      GemmProblem p = o.p;
      p.out_dtype = inst.out_dtype;
      p.scale_layout = inst.scale_layout;
      for (int split : {1, 2}) {
        // split 2 (fp32 partials + the reduction) once per tile: the bf16 instance's split plan
        // runs the same fp32 kernel.
        if (split > 1 && inst.out_dtype != DType::kF32) continue;
        Guarded c(p.m * p.n * dtype_bytes(p.out_dtype));
        GemmPlanOverrides ov;
        ov.block_m = inst.block_m;
        ov.block_n = inst.block_n;
        ov.cluster = inst.cluster_m;
        ov.split_k = split;
        Gemm g(p, o.va, o.vb, o.scales_for(inst.scale_layout), TensorView::matrix(c.get(), p.out_dtype, p.m, p.n, 0),
               ov);
        const Guarded ws = attach_workspace(g);
        const RepeatResult r = run_repeated(g, o, c, p.out_dtype, 1, nullptr);
        EXPECT_EQ(r.bad_runs, 0) << inst.name << " split " << split;
        EXPECT_TRUE(c.guard_intact()) << inst.name;
        if (split > 1) EXPECT_TRUE(ws.guard_intact()) << inst.name;
      }
    }
    if (mode != ScaleMode::kMxfp8) continue;
    // The mxfp8 bf16 route once per layout and output (its conversion kernel, the bf16 kernel on
    // the workspace copies, the guarded native launch), and once with operands that make the
    // guarded launch run (a scale byte outside [10, 246] on non-zero elements; 5, not one near 255:
    // 448 x 2^(250 - 127) would overflow fp32 on every route, so no output could be right).
    for (bool rerun : {false, true}) {
      OperandSet ro = make_operands(mode, 129, 264, k, 43, false);
      if (rerun) {
        ro.qa.ue8m0[0] = 5;  // row 0, group 0: 2^-122, below the range the conversion keeps exact
        finish_mx_operands(ro);
        compute_reference(ro);
      }
      for (ScaleLayout layout : {ScaleLayout::kRaw, ScaleLayout::kPacked})
        for (DType out : {DType::kBF16, DType::kF32}) {
          GemmProblem p = ro.p;
          p.out_dtype = out;
          p.scale_layout = layout;
          Guarded c(p.m * p.n * dtype_bytes(out));
          Gemm g(p, ro.va, ro.vb, ro.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0),
                 GemmPlanOverrides{.mx_route = MxRoute::kBf16});
          const Guarded ws = attach_workspace(g);
          const RepeatResult r = run_repeated(g, ro, c, out, 1, nullptr);
          const std::string what = std::string("bf16 route ") + std::string(to_string(layout)) + " " +
                                   std::string(to_string(out)) + (rerun ? " (rerun)" : "");
          EXPECT_EQ(r.bad_runs, 0) << what;
          EXPECT_TRUE(c.guard_intact()) << what;
          EXPECT_TRUE(ws.guard_intact()) << what;
          uint32_t flag = 0;
          EXPECT_EQ(cudaMemcpy(&flag, ws.get(), 4, cudaMemcpyDeviceToHost), cudaSuccess);
          EXPECT_EQ(flag, rerun ? 1u : 0u) << what;
        }
    }
  }
}
