// weave::Gemm correctness on the GPU: every mode x output dtype x built tile x two grid sizes, on
// edge shapes (M = 1, 7, 64, 129, 1000; N not a multiple of the tile; K = one block, a K tail,
// 640, 7168), fresh random inputs (magnitudes varying per 128-block, so a misapplied scale shows),
// the output NaN-poisoned before each of 20 launches, each launch compared to the fp64 reference;
// integer-valued inputs with power-of-two scales compared bitwise; guard bytes after every input,
// scale and output tensor checked afterwards.
#include <gtest/gtest.h>

#include <cstdio>

#include "gemm/dispatch.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {


// Runs every built instance of (mode, out) on `o` with the planner's grid and with a grid of 3
// (many tiles per persistent CTA), kRepeats poisoned launches each.
void check_every_tile(const OperandSet& o, DType out) {
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  GemmProblem p = o.p;
  p.out_dtype = out;
  int tried = 0;
  for (const auto& inst : gemm::gemm_instances()) {
    if (inst.mode != p.mode || inst.out_dtype != out || p.mode == ScaleMode::kMxfp8) continue;  // mxfp8: test_gemm_mxfp8.cu
    p.scale_layout = inst.scale_layout;  // blockscale: raw and mn-major instances, each with its own scales
    for (int grid : {0, inst.cluster_m == 2 ? 4 : 3}) {  // a 2-CTA cluster instance takes whole pairs
      Guarded c(p.m * p.n * dtype_bytes(out));
      GemmPlanOverrides ov;
      ov.block_m = inst.block_m;
      ov.block_n = inst.block_n;
      ov.cluster = inst.cluster_m;
      ov.grid = grid;
      ov.split_k = 1;  // this test checks the instance itself; split-K: test_gemm_split_k.cu
      const TensorView cv = TensorView::matrix(c.get(), out, p.m, p.n, 0);
      Gemm g(p, o.va, o.vb, o.scales_for(inst.scale_layout), cv, ov);
      ASSERT_EQ(g.plan().kernel, inst.name);
      const RepeatResult r = run_repeated(g, o, c, out, kRepeats, stream);
      const std::string what = describe(o, out) + " " + inst.name + " grid " + std::to_string(g.plan().grid);
      EXPECT_EQ(r.runs, kRepeats) << what;
      EXPECT_EQ(r.bad_runs, 0) << what << ": " << r.bad_runs << "/" << r.runs << " runs wrong, worst " << r.worst_wrong
                               << " elements (first at " << r.first_wrong << "), max_abs " << r.worst_max_abs
                               << " rms " << o.rms << " rel_l2 " << r.worst_rel_l2;
      EXPECT_EQ(r.never_written, 0) << what;
      if (!o.exact) EXPECT_LT(r.worst_rel_l2, rel_l2_bound(p.mode, out)) << what;
      EXPECT_TRUE(c.guard_intact()) << what << ": wrote past the end of C";
      std::printf("  %-52s %-46s grid %3d  rel_l2 %.2e  max_abs/rms %.2e  bad %d/%d\n", describe(o, out).c_str(),
                  inst.name, g.plan().grid, r.worst_rel_l2, o.rms > 0 ? r.worst_max_abs / o.rms : 0.0, r.bad_runs,
                  r.runs);
      ++tried;
    }
  }
  EXPECT_GT(tried, 0) << "no instance built for " << describe(o, out);
  EXPECT_TRUE(inputs_intact(o)) << describe(o, out) << ": an input or scale guard changed";
  cudaStreamDestroy(stream);
}

void check_mode(ScaleMode mode, const std::vector<Shape>& shapes) {
  uint64_t seed = 1000 + 100 * static_cast<uint64_t>(mode);
  for (const Shape& s : shapes) {
    const OperandSet o = make_operands(mode, s.m, s.n, s.k, seed++, s.exact);
    for (DType out : {DType::kBF16, DType::kF32}) check_every_tile(o, out);
  }
}

}  // namespace

TEST(GemmCorrectness, Bf16) {
  WEAVE_REQUIRE_GPUS(1);
  check_mode(ScaleMode::kBF16, {
                                   {1, 256, 64, false},     // one K block, one row
                                   {7, 384, 640, false},    // N = 1.5 x 256
                                   {64, 136, 8, false},     // K far below one 64-wide block
                                   {129, 264, 7168, false}, // long K, one row past a tile
                                   {1000, 392, 136, false}, // K tail (136 = 2 x 64 + 8)
                                   {300, 520, 1000, false}, // K tail, ring wraps many times
                                   {129, 264, 640, true},
                                   {1000, 136, 64, true},
                               });
}

TEST(GemmCorrectness, Ptpc) {
  WEAVE_REQUIRE_GPUS(1);
  check_mode(ScaleMode::kPtpc, {
                                   {1, 256, 128, false},
                                   {7, 384, 640, false},
                                   {64, 136, 48, false},  // K below one 128-wide block
                                   {129, 264, 7168, false},
                                   {1000, 392, 144, false},  // K tail
                                   {129, 264, 640, true},
                                   {1000, 136, 128, true},
                               });
}

TEST(GemmCorrectness, Blockscale) {
  WEAVE_REQUIRE_GPUS(1);
  check_mode(ScaleMode::kBlockscale, {
                                         {1, 256, 128, false},   // K = one group
                                         {7, 384, 640, false},
                                         {64, 136, 128, false},  // partial last B scale block
                                         {129, 264, 7168, false},
                                         {1000, 392, 640, false},
                                         {129, 264, 640, true},
                                         {1000, 136, 256, true},
                                     });
}
