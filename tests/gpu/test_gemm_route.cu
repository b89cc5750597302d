// weave::Gemm's own decode-GEMV route (M <= 32), through the public API only. The planner takes
// the tiled kernels past M = 8 (mxfp8: 32) (src/gemm/planner_gemv_route.cpp,
// CPU-tested in GemmPlanInstances.DecodeRouteFollowsTheMeasuredRule), so the route is forced here
// with GemmPlanOverrides::decode_route = gemv: what is tested is the GEMV's wiring at every M. tests/gpu/test_gemv.cu
// proves the GEMV kernels by calling detail::gemv_launch with hand-built GemvArgs; nothing there
// covers how weave::Gemm chooses the route and fills those arguments (Gemm::fill_args: pointers,
// lda/ldb/ldc, mode and out dtype, the scale tensors), what set_operands does on a GEMV plan, or
// the GEMV-only refusal of non-dense scale tensors (gemm::check_gemv_scales).
//
// What each test catches:
//  - EveryModeAtDecodeSizes: a route that is not taken (plan().gemv false at M = 1, 7, 32 in a
//    mode the GEMV implements), or arguments wired wrongly on the way (swapped scales, a wrong
//    leading dimension, the mode or out dtype not passed): fresh random inputs against the fp64
//    reference, C NaN-poisoned before each of 20 launches, integer inputs bitwise; also that a
//    forced tile really leaves the GEMV, and mxfp8 packed (not a GEMV layout) goes to the tiles;
//  - SetOperandsRepointsTheGemv: set_operands that re-checks but does not refresh the GEMV's
//    arguments (the output would still be the first operand set's);
//  - ForcedSplitIsTheSplitLaunched: GemmPlanOverrides::split_k beside decode_route = gemv planned
//    but not passed to the launch (the GEMV would run the planner's split);
//  - RefusesNonDenseScales: a padded blockscale B / mxfp8 scale tensor on the GEMV route accepted
//    (the GEMV reads them densely, so it would silently use the padding as scales), a refusal
//    that does not name the argument, and a refused set_operands that half-updated the plan.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gemm/operands.hpp"
#include "gemm/planner.hpp"
#include "gemv/gemv.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

// The modes the GEMV implements (detail::gemv_unsupported_reason): mxfp8 with raw scales only.
const Mode kGemvModes[] = {{ScaleMode::kBF16, ScaleLayout::kRaw},
                           {ScaleMode::kPtpc, ScaleLayout::kRaw},
                           {ScaleMode::kBlockscale, ScaleLayout::kRaw},
                           {ScaleMode::kBlockscale, ScaleLayout::kMnMajor},
                           {ScaleMode::kMxfp8, ScaleLayout::kRaw}};

// Every launch ran, none wrong, every element written, and (random inputs) the whole-output bound.
void expect_clean(const RepeatResult& r, const OperandSet& o, DType out, const std::string& what, int repeats) {
  EXPECT_EQ(r.runs, repeats) << what;
  EXPECT_EQ(r.bad_runs, 0) << what << ": " << r.bad_runs << "/" << r.runs << " runs wrong, worst " << r.worst_wrong
                           << " elements (first at " << r.first_wrong << "), max_abs " << r.worst_max_abs << " rms "
                           << o.rms << " rel_l2 " << r.worst_rel_l2;
  EXPECT_EQ(r.never_written, 0) << what;
  if (!o.exact) EXPECT_LT(r.worst_rel_l2, rel_l2_bound(o.p.mode, out)) << what;
}

const GemmPlanOverrides kGemv{.decode_route = DecodeRoute::kGemv};

// Runs `o` through weave::Gemm with the GEMV route forced: the plan must be the GEMV.
void check_gemv_route(const OperandSet& o, ScaleLayout layout, DType out, cudaStream_t stream) {
  GemmProblem p = o.p;
  p.out_dtype = out;
  p.scale_layout = layout;
  Guarded c(p.m * p.n * dtype_bytes(out));
  Gemm g(p, o.va, o.vb, o.scales_for(layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), kGemv);
  const std::string what = describe(o, out) + " " + g.plan().reason;
  ASSERT_TRUE(g.plan().gemv) << what;
  ASSERT_EQ(g.plan().kernel, "gemv") << what;
  EXPECT_EQ(g.workspace_bytes(), 0u) << what << ": the GEMV needs no workspace";
  const RepeatResult r = run_repeated(g, o, c, out, kRepeats, stream);
  expect_clean(r, o, out, what, kRepeats);
  EXPECT_TRUE(c.guard_intact()) << what << ": wrote past the end of C";
  std::printf("  %-50s %-4s %-60s rel_l2 %.2e  bad %d/%d\n", describe(o, out).c_str(),
              std::string(to_string(layout)).c_str(), g.plan().reason.substr(0, 60).c_str(), r.worst_rel_l2,
              r.bad_runs, r.runs);
}

}  // namespace

TEST(GemmGemvRoute, EveryModeAtDecodeSizes) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  uint64_t seed = 4100;
  for (const Mode md : kGemvModes) {
    for (const int64_t m : {1, 7, 32}) {
      // N = 392: not a multiple of the GEMV's 128-row band; K = 640: 5 blocks of 128, 20 mxfp8 groups.
      const OperandSet o = make_operands(md.mode, m, 392, 640, seed++, false);
      for (DType out : {DType::kBF16, DType::kF32}) {
        check_gemv_route(o, md.layout, out, stream);
        if (HasFatalFailure()) return;
      }
    }
    // Integer-valued inputs with power-of-two scales: bitwise equal to the reference.
    const OperandSet exact = make_operands(md.mode, 7, 264, 1024, seed++, true);
    check_gemv_route(exact, md.layout, DType::kF32, stream);
    check_gemv_route(exact, md.layout, DType::kBF16, stream);
    EXPECT_TRUE(inputs_intact(exact));
    // A forced tile leaves the GEMV (and still computes the same product).
    const OperandSet o = make_operands(md.mode, 7, 392, 640, seed++, false);
    GemmProblem p = o.p;
    p.out_dtype = DType::kF32;
    p.scale_layout = md.layout;
    if (gemm::gemm_tile_candidates(p).empty()) continue;
    Guarded c(p.m * p.n * 4);
    Gemm tiled(p, o.va, o.vb, o.scales_for(md.layout), TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0),
               GemmPlanOverrides{.block_m = 128, .block_n = 128, .split_k = 1});
    EXPECT_FALSE(tiled.plan().gemv) << "a forced 128x128 tile at M = 7 must run the tiled kernel";
    expect_clean(run_repeated(tiled, o, c, DType::kF32, 3, stream), o, DType::kF32,
                 describe(o, DType::kF32) + " forced tile", 3);
  }
  // mxfp8 with packed scales is not a GEMV layout: M = 7 runs the tiled kernel, correctly.
  {
    const OperandSet o = make_operands(ScaleMode::kMxfp8, 7, 392, 640, seed++, false);
    GemmProblem p = o.p;
    p.out_dtype = DType::kF32;
    p.scale_layout = ScaleLayout::kPacked;
    if (!gemm::gemm_tile_candidates(p).empty()) {
      Guarded c(p.m * p.n * 4);
      Gemm g(p, o.va, o.vb, o.scales_packed, TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0));
      EXPECT_FALSE(g.plan().gemv) << g.plan().reason;
      expect_clean(run_repeated(g, o, c, DType::kF32, 3, stream), o, DType::kF32, describe(o, DType::kF32) + " packed",
                   3);
    }
  }
  // M = 33 is past the GEMV; 32 takes it only when forced (pure planner: no GPU work).
  EXPECT_FALSE(gemm_plan(GemmProblem{.m = 33, .n = 392, .k = 640, .mode = ScaleMode::kBF16}, 132).gemv);
  EXPECT_FALSE(gemm_plan(GemmProblem{.m = 32, .n = 392, .k = 640, .mode = ScaleMode::kBF16}, 132).gemv);
  EXPECT_TRUE(gemm_plan(GemmProblem{.m = 32, .n = 392, .k = 640, .mode = ScaleMode::kBF16}, 132, kGemv).gemv);
  cudaStreamDestroy(stream);
}

TEST(GemmGemvRoute, SetOperandsRepointsTheGemv) {
  WEAVE_REQUIRE_GPUS(1);
  for (const Mode md : kGemvModes) {
    const OperandSet o1 = make_operands(md.mode, 5, 264, 640, 4200 + static_cast<int>(md.mode), false);
    const OperandSet o2 = make_operands(md.mode, 5, 264, 640, 4300 + static_cast<int>(md.mode), false);
    GemmProblem p = o1.p;
    p.out_dtype = DType::kF32;
    Guarded c1(p.m * p.n * 4), c2(p.m * p.n * 4);
    Gemm g(p, o1.va, o1.vb, o1.scales, TensorView::matrix(c1.get(), DType::kF32, p.m, p.n, 0), kGemv);
    ASSERT_TRUE(g.plan().gemv);
    expect_clean(run_repeated(g, o1, c1, DType::kF32, 3, nullptr), o1, DType::kF32,
                 describe(o1, DType::kF32) + " set 1", 3);
    g.set_operands(o2.va, o2.vb, o2.scales, TensorView::matrix(c2.get(), DType::kF32, p.m, p.n, 0));
    ASSERT_TRUE(g.plan().gemv);
    expect_clean(run_repeated(g, o2, c2, DType::kF32, 3, nullptr), o2, DType::kF32,
                 describe(o2, DType::kF32) + " set 2", 3);
  }
}

// split_k beside decode_route = gemv is the K split the GEMV launches with: the output is bitwise the
// GEMV's launched directly at that split (detail::gemv_launch, the same arguments), and right against
// the reference. Splits unlike the planner's, so a Gemm that dropped the override would launch the
// planner's split and differ in bits (fp32 out, random inputs: the sums' order differs); checked: split 1
// and split 5 give different bits here, else the comparison could not see a dropped override.
TEST(GemmGemvRoute, ForcedSplitIsTheSplitLaunched) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int num_sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  for (const ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc}) {
    const OperandSet o = make_operands(mode, 4, 392, 4096, 4500 + static_cast<int>(mode), false);
    GemmProblem p = o.p;
    p.out_dtype = DType::kF32;
    const size_t bytes = static_cast<size_t>(p.m * p.n) * 4;
    const int planned = gemm_plan(p, num_sms).split_k;
    std::vector<std::vector<char>> by_split;
    for (const int split : {1, 5}) {
      const std::string what = std::string(to_string(mode)) + " split " + std::to_string(split);
      ASSERT_NE(split, planned) << what << ": the planner's own split cannot show the override";
      GemmPlanOverrides forced = kGemv;
      forced.split_k = split;
      Guarded c(bytes), direct(bytes);
      const TensorView cv = TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0);
      Gemm g(p, o.va, o.vb, o.scales, cv, forced);
      ASSERT_TRUE(g.plan().gemv) << what;
      ASSERT_EQ(g.plan().split_k, split) << what << ": " << g.plan().reason;
      expect_clean(run_repeated(g, o, c, DType::kF32, 3, stream), o, DType::kF32, what, 3);
      detail::GemvArgs args = gemm::make_gemv_args(p, o.va, o.vb, o.scales, direct.get(), p.n);
      args.split = split;
      bench::poison_nan(direct.get(), bytes, DType::kF32, stream);
      detail::gemv_launch(args, num_sms, stream);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      std::vector<char> from_gemm(bytes), launched(bytes);
      ASSERT_EQ(cudaMemcpy(from_gemm.data(), c.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(launched.data(), direct.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(from_gemm, launched) << what << ": weave::Gemm did not launch the forced split";
      by_split.push_back(from_gemm);
    }
    EXPECT_NE(by_split[0], by_split[1]) << to_string(mode) << ": splits 1 and 5 agree bitwise, so this test cannot "
                                           "tell a forced split from another";
  }
  cudaStreamDestroy(stream);
}

TEST(GemmGemvRoute, RefusesNonDenseScales) {
  WEAVE_REQUIRE_GPUS(1);
  for (const ScaleMode mode : {ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    const int64_t m = 7, n = 264, k = 1024;
    const OperandSet o = make_operands(mode, m, n, k, 4400 + static_cast<int>(mode), false);
    GemmProblem p = o.p;
    p.out_dtype = DType::kF32;
    const DType sd = mode == ScaleMode::kBlockscale ? DType::kF32 : DType::kUE8M0;
    // The same scales viewed with one more element per row (the buffers hold the dense tensor plus
    // 4 KB of guard, so the padded views stay inside the allocation; nothing runs anyway).
    const TensorView pad_a =
        TensorView::matrix(o.sa.get(), sd, o.qa.scale_rows, o.qa.scale_cols, o.qa.scale_cols + 4, 0);
    const TensorView pad_b =
        TensorView::matrix(o.sb.get(), sd, o.qb.scale_rows, o.qb.scale_cols, o.qb.scale_cols + 4, 0);
    Guarded c(p.m * p.n * 4);
    const TensorView cv = TensorView::matrix(c.get(), DType::kF32, p.m, p.n, 0);
    const std::string mode_name(to_string(mode));
    if (mode == ScaleMode::kMxfp8) {
      const std::string msg = error_of([&] { Gemm g(p, o.va, o.vb, GemmScales{pad_a, o.scales.b}, cv, kGemv); });
      EXPECT_NE(msg.find("'scale_a'"), std::string::npos) << mode_name << ": " << msg;
      EXPECT_NE(msg.find("dense"), std::string::npos) << mode_name << ": " << msg;
      EXPECT_NE(msg.find("GEMV"), std::string::npos) << mode_name << ": " << msg;
    } else {
      // Blockscale's A scales are read through their strides on the GEMV route: a copy of them
      // with 4 NaN floats after every row (row stride scale_cols + 4), the values checked (issue
      // 36 item 8: this case was only constructed before). A read of the padding makes NaN rows.
      const int64_t rows = o.qa.scale_rows, cols = o.qa.scale_cols, ld = cols + 4;
      Guarded padded(static_cast<size_t>(rows * ld) * 4);
      bench::poison_nan(padded.get(), static_cast<size_t>(rows * ld) * 4, DType::kF32, nullptr);
      ASSERT_EQ(cudaMemcpy2D(padded.get(), static_cast<size_t>(ld) * 4, o.sa.get(), static_cast<size_t>(cols) * 4,
                             static_cast<size_t>(cols) * 4, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice),
                cudaSuccess);
      const TensorView strided_a = TensorView::matrix(padded.get(), DType::kF32, rows, cols, ld, 0);
      Gemm g(p, o.va, o.vb, GemmScales{strided_a, o.scales.b}, cv, kGemv);
      ASSERT_TRUE(g.plan().gemv) << mode_name;
      expect_clean(run_repeated(g, o, c, DType::kF32, 3, nullptr), o, DType::kF32,
                   mode_name + " GEMV, A scales with a padded row stride", 3);
    }
    {
      const std::string msg = error_of([&] { Gemm g(p, o.va, o.vb, GemmScales{o.scales.a, pad_b}, cv, kGemv); });
      EXPECT_NE(msg.find("'scale_b'"), std::string::npos) << mode_name << ": " << msg;
      EXPECT_NE(msg.find("dense"), std::string::npos) << mode_name << ": " << msg;
    }
    // set_operands on a GEMV plan refuses the same, and the plan keeps its previous operands.
    Gemm g(p, o.va, o.vb, o.scales, cv, kGemv);
    ASSERT_TRUE(g.plan().gemv);
    const std::string msg = error_of([&] { g.set_operands(o.va, o.vb, GemmScales{o.scales.a, pad_b}, cv); });
    EXPECT_NE(msg.find("'scale_b'"), std::string::npos) << mode_name << ": " << msg;
    expect_clean(run_repeated(g, o, c, DType::kF32, 2, nullptr), o, DType::kF32,
                 mode_name + " after a refused set_operands", 2);
    std::printf("  %s refusal: %s\n", mode_name.c_str(), msg.c_str());
  }
}
