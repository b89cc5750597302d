// fp8 accumulation error against K (docs/gemm.md "Accumulation error vs K"): ptpc accumulates in
// the tensor cores over the whole K; blockscale promotes every 128-wide K block, mxfp8 every
// 32-wide K group, into fp32 registers. Both against the fp64 reference on the same quantised operands (no quantisation
// error in the numbers), fp32 output; bf16 as the fp32-accumulation control.
#include <gtest/gtest.h>

#include <cstdio>

#include "bench/cublaslt.hpp"
#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

TEST(GemmAccuracy, Fp8AccumulationErrorVsK) {
  WEAVE_REQUIRE_GPUS(1);
  constexpr int64_t kM = 256, kN = 256;
  std::printf("  %-10s %6s %12s %14s\n", "mode", "K", "rel_l2", "max_abs/rms");
  for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    if (mode == ScaleMode::kMxfp8 && gemm::gemm_tile_candidates(GemmProblem{.m = kM, .n = kN, .k = 128, .mode = mode,
                                                                            .out_dtype = DType::kF32})
                                         .empty())
      continue;
    for (int64_t k : {128, 512, 1024, 2048, 4096, 7168, 16384}) {
      const OperandSet o = make_operands(mode, kM, kN, k, 900 + k, false);
      GemmProblem p = o.p;
      p.out_dtype = DType::kF32;
      Guarded c(kM * kN * 4);
      // split_k = 1: the kernel's own accumulation over the whole K (the planner would split K here);
      // mxfp8 on its native fp8 kernel, whose per-32 promotion this measures (not the bf16 route).
      GemmPlanOverrides ov{.split_k = 1};
      if (mode == ScaleMode::kMxfp8) ov.mx_route = MxRoute::kNative;
      Gemm g(p, o.va, o.vb, o.scales_for(p.scale_layout), TensorView::matrix(c.get(), DType::kF32, kM, kN, 0), ov);
      bench::poison_nan(c.get(), c.bytes(), DType::kF32, nullptr);
      g.run(nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> h(kM * kN);
      ASSERT_EQ(cudaMemcpy(h.data(), c.get(), h.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const ref::Comparison cmp = ref::compare(h.data(), o.ref.data(), kM * kN, 1.0, 0.0);
      std::printf("  %-10s %6lld %12.3e %14.3e\n", std::string(to_string(mode)).c_str(), static_cast<long long>(k),
                  cmp.rel_l2, cmp.max_abs / o.rms);
      EXPECT_EQ(cmp.nonfinite, 0);
      EXPECT_EQ(cmp.never_written, 0);
      // Bounds well above what fp32 promotion gives, well below what a defect gives.
      // (H200, first run: bf16 1.9e-5 at K = 16384; blockscale flat ~1.3e-4 for every K, the fp8
      // accumulator's precision inside one 128-wide block. ptpc promotes every 128 K as blockscale
      // does; it grew to 3.6e-3 at K = 16384 when it accumulated in the tensor cores.)
      if (mode == ScaleMode::kBF16) EXPECT_LT(cmp.rel_l2, 5e-5) << k;
      if (mode == ScaleMode::kBlockscale || mode == ScaleMode::kMxfp8) EXPECT_LT(cmp.rel_l2, 5e-4) << k;
      if (mode == ScaleMode::kPtpc) EXPECT_LT(cmp.rel_l2, 5e-4) << k;
    }
  }
}

// fp8 accuracy against cuBLASLt's default (non-fast-accumulation) result on the same operands,
// fp32 output, both measured against the fp64 reference in the same run: weave's relative L2 must
// be within 10% of cuBLASLt's, or better (issue: GEMM engine v2, item 4).
TEST(GemmAccuracy, Fp8WithinTenPercentOfCublasLtDefault) {
  WEAVE_REQUIRE_GPUS(1);
  constexpr int64_t kM = 256, kN = 256;
  std::printf("  %-10s %6s %12s %12s %8s\n", "mode", "K", "weave", "cublaslt", "ratio");
  for (ScaleMode mode : {ScaleMode::kPtpc, ScaleMode::kBlockscale}) {
    for (int64_t k : {512, 2048, 7168, 16384}) {
      const OperandSet o = make_operands(mode, kM, kN, k, 4200 + k, false);
      GemmProblem p = o.p;
      p.out_dtype = DType::kF32;
      Guarded cw(kM * kN * 4), cl(kM * kN * 4);
      const TensorView vw = TensorView::matrix(cw.get(), DType::kF32, kM, kN, 0);
      const TensorView vl = TensorView::matrix(cl.get(), DType::kF32, kM, kN, 0);
      Gemm g(p, o.va, o.vb, o.scales, vw, GemmPlanOverrides{.split_k = 1});
      bench::CublasLtGemm lt(p, 0);
      const bench::CublasLtScales ls = lt.prepare_scales(o.scales, nullptr);
      bench::poison_nan(cw.get(), cw.bytes(), DType::kF32, nullptr);
      bench::poison_nan(cl.get(), cl.bytes(), DType::kF32, nullptr);
      g.run(nullptr);
      lt.run(o.va, o.vb, ls, vl, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<float> hw(kM * kN), hl(kM * kN);
      ASSERT_EQ(cudaMemcpy(hw.data(), cw.get(), hw.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(hl.data(), cl.get(), hl.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      const ref::Comparison w = ref::compare(hw.data(), o.ref.data(), kM * kN, 1.0, 0.0);
      const ref::Comparison l = ref::compare(hl.data(), o.ref.data(), kM * kN, 1.0, 0.0);
      std::printf("  %-10s %6lld %12.3e %12.3e %8.3f\n", std::string(to_string(mode)).c_str(),
                  static_cast<long long>(k), w.rel_l2, l.rel_l2, w.rel_l2 / l.rel_l2);
      EXPECT_EQ(w.nonfinite, 0);
      EXPECT_EQ(l.nonfinite, 0);
      EXPECT_LE(w.rel_l2, 1.10 * l.rel_l2) << to_string(mode) << " K " << k;
    }
  }
}
