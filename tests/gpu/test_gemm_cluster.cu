// The 2-CTA cluster instances (gemm/kernel.cuh "Clusters": pairs of CTAs along M, each loading half
// of the pair's B tile and multicasting it to both). Multicast moves bytes, not arithmetic: each
// CTA runs the plain instance's wgmmas in the same K order, so its output must equal the plain
// instance's of the same tile bit for bit. What each test catches:
//  - EqualsThePlainInstanceBitwise: a B half landing at the wrong offset or from the wrong rows, a
//    stage refilled before the peer read it (an empty barrier counting one CTA's warps), pairs
//    across columns or an odd last row block's empty partner writing rows (NaN-poisoned outputs,
//    the fp64 reference, 20 repeats per case), a grid of one pair or a few, PDL launches;
//  - the early-release and dropped-wait controls, and the abort of a stage never loaded, run on
//    these instances in test_gemm_controls.cu and test_gemm_wait_timeout.cu; the soak draws them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gemm/dispatch.hpp"
#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

std::vector<uint8_t> download(const Guarded& g, std::size_t bytes) {
  std::vector<uint8_t> h(bytes);
  EXPECT_EQ(cudaMemcpy(h.data(), g.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(GemmCluster, EqualsThePlainInstanceBitwise) {
  WEAVE_REQUIRE_GPUS(1);
  int tried = 0;
  for (const gemm::GemmInstance& inst : gemm::gemm_instances()) {
    if (inst.cluster_m != 2) continue;
    // Row blocks odd and even (an empty partner or none), partial tiles in M and N, K of 1 to 16
    // stages, one pair of CTAs to a full grid.
    struct Case {
      int64_t m, n, k;
    };
    // 384: three full row blocks of 128, so the empty partner's rows start exactly at M (the full
    // box of zeros; no half-box map is encoded for such an M).
    for (const Case s : {Case{1, 128, 128}, Case{129, 256, 384}, Case{300, 384, 1024}, Case{384, 256, 512},
                         Case{1000, 1024, 2048}, Case{2049, 640, 640}, Case{4096, 7168, 2048}}) {
      OperandSet o = make_operands(inst.mode, s.m, s.n, s.k, 9000 + static_cast<uint64_t>(s.m), false);
      o.p.out_dtype = inst.out_dtype;
      o.p.scale_layout = inst.scale_layout;
      const std::size_t bytes = static_cast<std::size_t>(s.m * s.n) * dtype_bytes(inst.out_dtype);
      Guarded c(bytes);
      const TensorView cv = TensorView::matrix(c.get(), inst.out_dtype, s.m, s.n, 0);
      GemmPlanOverrides plain{.block_m = inst.block_m, .block_n = inst.block_n, .split_k = 1, .cluster = 1};
      Gemm g1(o.p, o.va, o.vb, o.scales_for(inst.scale_layout), cv, plain);
      const RepeatResult r1 = run_repeated(g1, o, c, inst.out_dtype, 1, nullptr);
      ASSERT_EQ(r1.bad_runs, 0) << "the plain instance itself";
      const std::vector<uint8_t> want = download(c, bytes);
      for (int grid : {0, 2, 6}) {
        for (bool pdl : {false, true}) {
          GemmPlanOverrides ov = plain;
          ov.cluster = 2;
          ov.grid = grid;
          Gemm g(o.p, o.va, o.vb, o.scales_for(inst.scale_layout), cv, ov);
          ASSERT_EQ(g.plan().kernel, inst.name);
          g.set_allow_pdl(pdl);
          const std::string what = describe(o, inst.out_dtype) + " " + inst.name + " grid " +
                                   std::to_string(g.plan().grid) + (pdl ? " pdl" : "");
          const RepeatResult r = run_repeated(g, o, c, inst.out_dtype, pdl ? 5 : kRepeats, nullptr);
          EXPECT_EQ(r.bad_runs, 0) << what << ": " << r.worst_wrong << " wrong (first at " << r.first_wrong << ")";
          EXPECT_EQ(r.never_written, 0) << what;
          EXPECT_TRUE(c.guard_intact()) << what << ": wrote past the end of C";
          const std::vector<uint8_t> got = download(c, bytes);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << what << ": not bitwise the plain instance's";
          EXPECT_NO_THROW(g.check()) << what;
          ++tried;
        }
      }
      std::printf("  %-52s %-30s grids 0/2/6, with and without PDL: bitwise the plain tile's\n", inst.name,
                  describe(o, inst.out_dtype).c_str());
    }
  }
  if (tried == 0) GTEST_SKIP() << "no 2-CTA cluster instance in this build (WEAVE_GEMM_KERNELS narrowed)";
}

}  // namespace

namespace {

// Diagnostic (WEAVE_GEMM_CLUSTER_DIAG=1; prints, asserts nothing about speed): each fp8 tile's
// plain and 2-CTA cluster instances, the CTAs the device holds at once, and the time of one
// 8192 x 8192 x 2048 ptpc GEMM at grids from one pair to every SM (operands constant: timing only).
TEST(GemmCluster, DiagnosticTimeByGrid) {
  WEAVE_REQUIRE_GPUS(1);
  if (std::getenv("WEAVE_GEMM_CLUSTER_DIAG") == nullptr) GTEST_SKIP() << "diagnostic: set WEAVE_GEMM_CLUSTER_DIAG=1";
  GemmProblem p;
  p.m = 8192;
  p.n = 8192;
  p.k = 2048;
  p.mode = ScaleMode::kPtpc;
  Guarded a(p.m * p.k), b(p.n * p.k), sa(p.m * 4), sb(p.n * 4), c(p.m * p.n * 2);
  ASSERT_EQ(cudaMemset(a.get(), 0x38, p.m * p.k), cudaSuccess);  // e4m3 1.0
  ASSERT_EQ(cudaMemset(b.get(), 0x38, p.n * p.k), cudaSuccess);
  const std::vector<float> ones(static_cast<size_t>(std::max(p.m, p.n)), 1.0f);
  ASSERT_EQ(cudaMemcpy(sa.get(), ones.data(), p.m * 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(sb.get(), ones.data(), p.n * 4, cudaMemcpyHostToDevice), cudaSuccess);
  const TensorView va = TensorView::matrix(a.get(), DType::kE4M3, p.m, p.k, 0);
  const TensorView vb = TensorView::matrix(b.get(), DType::kE4M3, p.n, p.k, 0);
  const GemmScales s{TensorView::vector(sa.get(), DType::kF32, p.m, 0), TensorView::vector(sb.get(), DType::kF32, p.n, 0)};
  const TensorView vc = TensorView::matrix(c.get(), DType::kBF16, p.m, p.n, 0);
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  for (int bm : {128, 256})
    for (int cluster : {1, 2}) {
      const gemm::GemmInstance* inst = gemm::find_gemm_instance(p.mode, DType::kBF16, gemm::EpilogueKind::kStoreLocal,
                                                                bm, 128, ScaleLayout::kRaw, cluster);
      if (inst == nullptr) continue;
      inst->prepare();
      std::printf("  %-50s resident CTAs %d\n", inst->name, inst->resident_ctas());
      for (int grid : {2, 8, 32, 64, 66, 96, 128, 132}) {
        Gemm g(p, va, vb, s, vc, GemmPlanOverrides{.block_m = bm, .block_n = 128, .grid = grid, .split_k = 1,
                                                    .cluster = cluster});
        for (int i = 0; i < 2; ++i) g.run(nullptr);
        ASSERT_EQ(cudaEventRecord(e0), cudaSuccess);
        for (int i = 0; i < 5; ++i) g.run(nullptr);
        ASSERT_EQ(cudaEventRecord(e1), cudaSuccess);
        ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
        float ms = 0;
        ASSERT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
        std::printf("    grid %3d: %8.1f us\n", grid, 1000.0 * ms / 5);
      }
    }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
