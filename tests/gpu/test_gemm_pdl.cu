// weave::Gemm::set_allow_pdl (the GEMM kernel launched with programmatic dependent launch: the
// decode GEMV, a tiled plan, a split-K plan), checked across kernel boundaries on one stream, per
// call:
//   producer (writes A after a 20 us spin; lets dependents launch at once) -> GEMM (PDL) ->
//   consumer (launched with PDL itself; griddepcontrol.wait, then copies C).
// The GEMM starts under the producer's spin, yet its C is bitwise the C of the same GEMM run on
// settled operands (the expected output of each A variant, computed first), and the consumer sees
// it complete: the contract's two directions. Negative controls, each expected to be caught:
//   - a producer that writes B instead (the contract broken): the GEMM requests its first K slices
//     of B before its wait, so some calls compute with the old B;
//   - a consumer that does not wait: it copies C before the GEMM (or its split-K reduction) wrote it.
// And the default (allow_pdl off) with the B-writing producer: 0 wrong (nothing overlaps).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "gemm/kernel_args.hpp"
#include "gemm/pdl_flags.hpp"
#include "hopper/ptx/griddepcontrol.cuh"
#include "hopper/ptx/misc.cuh"
#include "support/gpu.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/pdl_copy.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/gemm.hpp"

using namespace weave;

namespace {

// Lets the next kernel launch (PDL), spins `ns`, then copies `bytes` from src to dst.
__global__ void late_copy(const uint4* src, uint4* dst, size_t n16, uint64_t ns) {
  ptx::griddepcontrol_launch_dependents();
  const uint64_t t0 = ptx::globaltimer_ns();
  while (ptx::globaltimer_ns() - t0 < ns) {
  }
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) dst[i] = src[i];
}

enum class Case { kPdlRight, kPdlProducerWritesB, kPdlConsumerDoesNotWait, kNoPdlProducerWritesB };

// The plan under test: the decode GEMV (M 8), or the tiled kernel at M 64 with K unsplit or split 4.
enum class Route { kGemv, kTiles, kTilesSplitK };

// Wrong elements over `calls` calls of one case.
long long wrong_elements(ScaleMode q, Case what, int calls, Route route = Route::kGemv) {
  const int64_t m = route == Route::kGemv ? 8 : 64, n = 4096, k = 4096;
  const int dev = 0;
  const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .out_dtype = DType::kBF16};
  GemmPlanOverrides ov;
  if (route != Route::kGemv) ov.split_k = route == Route::kTilesSplitK ? 4 : 1;
  constexpr int kVariants = 4;
  std::vector<bench::DeviceOperand> as, bs;
  for (int v = 0; v < kVariants; ++v) {
    as.push_back(bench::upload_operand(
        bench::quantize_parallel(bench::random_operand(100 + v, m, k), m, k, q, ref::Operand::kA), dev));
    bs.push_back(bench::upload_operand(
        bench::quantize_parallel(bench::random_operand(200 + v, n, k), n, k, q, ref::Operand::kB), dev));
  }
  // The live operands the GEMM reads (copies of variant 0), C and the snapshots.
  bench::DeviceOperand a = bench::upload_operand(
      bench::quantize_parallel(bench::random_operand(100, m, k), m, k, q, ref::Operand::kA), dev);
  bench::DeviceOperand b = bench::upload_operand(
      bench::quantize_parallel(bench::random_operand(200, n, k), n, k, q, ref::Operand::kB), dev);
  const size_t c_bytes = static_cast<size_t>(m * n) * 2;
  bench::DeviceBuffer c(c_bytes), snaps(c_bytes * calls), want(c_bytes * kVariants);
  const TensorView cv = TensorView::matrix(c.get(), DType::kBF16, m, n, dev);
  Gemm gemm(p, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, cv, ov);
  EXPECT_EQ(gemm.plan().gemv, route == Route::kGemv) << gemm.plan().kernel;
  EXPECT_EQ(gemm.plan().split_k, route == Route::kTilesSplitK ? 4 : route == Route::kTiles ? 1 : gemm.plan().split_k);
  bench::DeviceBuffer workspace(std::max<size_t>(gemm.workspace_bytes(), 16));
  if (gemm.workspace_bytes() > 0) gemm.set_workspace(workspace.get(), workspace.bytes());
  OwnedStream st;
  const bool writes_b = what == Case::kPdlProducerWritesB || what == Case::kNoPdlProducerWritesB;
  // The expected C of every variant, on settled operands (A's or B's variant v, the other variant 0).
  // The copies go on the GEMM's stream: a device-to-device cudaMemcpy returns before it is done and
  // does not order a non-blocking stream, so the first run of this test raced its own references.
  for (int v = 0; v < kVariants; ++v) {
    const bench::DeviceOperand& src = writes_b ? bs[v] : as[v];
    bench::DeviceOperand& dst = writes_b ? b : a;
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst.values.get(), src.values.get(), src.values.bytes(), cudaMemcpyDeviceToDevice,
                                     st.s));
    if (src.scales.bytes())
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst.scales.get(), src.scales.get(), src.scales.bytes(),
                                       cudaMemcpyDeviceToDevice, st.s));
    gemm.run(st.s);
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(want.get()) + v * c_bytes, c.get(), c_bytes,
                                     cudaMemcpyDeviceToDevice, st.s));
  }
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
  gemm.set_allow_pdl(what != Case::kNoPdlProducerWritesB);
  for (int i = 0; i < calls; ++i) {
    const int v = (i + 1) % kVariants;  // never the variant already in place
    const bench::DeviceOperand& src = writes_b ? bs[v] : as[v];
    bench::DeviceOperand& dst = writes_b ? b : a;
    // Scales first (small, settled by the time the spin ends), then the values after the spin.
    if (src.scales.bytes())
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst.scales.get(), src.scales.get(), src.scales.bytes(),
                                       cudaMemcpyDeviceToDevice, st.s));
    WEAVE_CHECK_CUDA(cudaMemsetAsync(c.get(), 0xFF, c_bytes, st.s));  // NaN: a C never written shows
    late_copy<<<64, 256, 0, st.s>>>(static_cast<const uint4*>(src.values.get()), static_cast<uint4*>(dst.values.get()),
                                    src.values.bytes() / 16, 20'000);
    WEAVE_CHECK_LAUNCH();
    gemm.run(st.s);
    bench::launch_pdl_copy(c.get(), static_cast<char*>(snaps.get()) + i * c_bytes, c_bytes,
                           what != Case::kPdlConsumerDoesNotWait, st.s);
  }
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
  gemm.check();
  long long wrong = 0;
  for (int i = 0; i < calls; ++i) {
    const int v = (i + 1) % kVariants;
    wrong += bench::gpu_count_differing(static_cast<char*>(snaps.get()) + i * c_bytes,
                                        static_cast<char*>(want.get()) + v * c_bytes, static_cast<size_t>(m * n),
                                        DType::kBF16, st.s);
  }
  return wrong;
}

// The four cases of one plan, checked and printed. `b_in_smem`: whether B's early loads land in
// shared memory (the GEMV; the tiled kernel's ring prologue), where a producer of B must be caught;
// an L2 prefetch (WEAVE_GEMM_PDL=l2:N) reads B again after the wait, so there it need not be.
void expect_the_contract(ScaleMode q, Route route, int calls, bool b_in_smem) {
  const long long right = wrong_elements(q, Case::kPdlRight, calls, route);
  const long long b_written = wrong_elements(q, Case::kPdlProducerWritesB, calls, route);
  // The unwaiting consumer is a race by nature: it is early only if it reads C before the GEMM's
  // last stores, and on an H200 one round of 30 bf16 tiled calls once lost all 30 races (0 wrong).
  // Up to 4 rounds: a control that never catches in 120 calls still fails.
  long long no_wait = 0;
  int rounds = 0;
  while (no_wait == 0 && rounds < 4) {
    no_wait = wrong_elements(q, Case::kPdlConsumerDoesNotWait, calls, route);
    ++rounds;
  }
  const long long no_pdl = wrong_elements(q, Case::kNoPdlProducerWritesB, calls, route);
  EXPECT_EQ(right, 0) << "PDL with the producer writing A and a waiting consumer must be right";
  EXPECT_EQ(no_pdl, 0) << "without PDL nothing overlaps: a producer of B is fine";
  if (b_in_smem) EXPECT_GT(b_written, 0) << "a producer of B under PDL breaks the contract: the first B loads are stale";
  EXPECT_GT(no_wait, 0) << "a consumer that does not wait reads C before it is written";
  const char* what = route == Route::kGemv ? "M 8 (GEMV)" : route == Route::kTiles ? "M 64 (tiles)" : "M 64 (tiles, split-K 4)";
  std::printf("  %s, %d calls of %s x N 4096 x K 4096: PDL right %lld wrong; controls: producer of B %lld, consumer "
              "without wait %lld (round %d); PDL off with a producer of B %lld\n",
              std::string(to_string(q)).c_str(), calls, what, right, b_written, no_wait, rounds, no_pdl);
}

}  // namespace

TEST(GemmPdl, AProducerOfAAndAWaitingConsumerOfCAroundAPdlGemvAreRightAndTheControlsAreCaught) {
  WEAVE_REQUIRE_GPUS(1);
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc}) {
    SCOPED_TRACE(std::string(to_string(q)));
    expect_the_contract(q, Route::kGemv, 50, true);
  }
}

// The tiled kernel's PDL prologue (gemm/kernel.cuh): B of the first K blocks before the wait, A
// and the scales after it; with K unsplit and split 4 (the reduction after it), bf16, ptpc and
// blockscale (where its plan copies the raw A scales MN-major, that copy kernel runs between the
// producer and the GEMM).
TEST(GemmPdl, AProducerOfAAndAWaitingConsumerOfCAroundAPdlTiledGemmAreRightAndTheControlsAreCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const uint32_t flags = gemm::pdl_flags_for_launch();
  std::printf("  tiled kernel PDL: %s\n", gemm::describe_pdl_flags(flags).c_str());
  for (Route route : {Route::kTiles, Route::kTilesSplitK})
    for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale}) {
      SCOPED_TRACE(std::string(to_string(q)) + (route == Route::kTiles ? " tiles" : " tiles split-K 4"));
      expect_the_contract(q, route, 30, (flags & gemm::kPdlBIntoRing) != 0);
    }
}
