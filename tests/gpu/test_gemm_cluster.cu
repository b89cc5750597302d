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

#include <cstdio>
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
