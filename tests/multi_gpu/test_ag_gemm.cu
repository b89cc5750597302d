// AllGatherGemm over real NCCL communicators, through the public API: one rank per visible Hopper
// GPU (world 1 on a one-GPU machine; W over NVLink on a multi-GPU one).
//   - every mode x quant through self_test (every source rank's rows checked on every rank against
//     the closed form; fused-ce at its quants: bf16, ptpc, blockscale); gemm-only, which moves
//     nothing, fails it at W >= 2;
//   - at model sizes (a column-parallel projection: N_r 4096, K 7168), every split mode bitwise equal
//     to split-lsa (a gather moves bytes; split-nccl too), fused-ce bitwise equal to weave::Gemm at
//     its tile (plan(m): the planner's) over the stacked rows (and to split-lsa where split-lsa ran
//     that tile), each identical on every rank, within the bound of an independent reference per
//     source rank (CUDA-core GEMMs of every rank's A, made here); auto with a calibration table that
//     alternates fused-ce and split-lsa per m: each call the bits of the mode the table names;
//   - a soak of 10,000 calls against split-lsa's bits (fused-ce: the reference's bound, then its own
//     quiet bits); a peer that never arrives.
// Elsewhere over NCCL: graph replays (test_fused_graphs.cu), a delayed rank
// (test_fused_delayed_rank.cu), a PDL consumer (test_fused_pdl.cu), the scale gather's control
// (test_fused_controls_self_test.cu).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused_op_world.hpp"
#include "fused_peer_timeout.hpp"
#include "fused_soak.hpp"
#include "fused_support.hpp"
#include "support/expect_error.hpp"
#include "support/scoped_file.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/all_gather_gemm.hpp"
#include "weave/gemm.hpp"

using namespace weave;
using namespace weave::test;
using Mode = AllGatherGemmMode;

namespace {

const ScaleMode kQuants[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8};

constexpr auto agm_config = &fused_op_config<AllGatherGemmConfig>;

// The quants fused-ce runs (with bf16 output): its GEMM reads A's scales as they land, so not mxfp8,
// whose config AllGatherGemm::validate refuses (kInvalidArgument, not a "not run").
bool fused_ce_runs(ScaleMode q) {
  return q == ScaleMode::kBF16 || q == ScaleMode::kPtpc || q == ScaleMode::kBlockscale;
}

// weave::Gemm forced to fused-ce's tile (`tile`: the op's plan(m), no K split, the tiled kernels at
// every m) over every rank's A stacked as the gather stacks them (rank s's rows at s m): the bits
// fused-ce's output must have. bf16 [W m, N] on the host.
std::vector<uint8_t> gemm_at_fused_ce_tile(const std::vector<bench::DeviceOperand>& as, const bench::DeviceOperand& b,
                                           int64_t m, int64_t n, int64_t k, ScaleMode q, const AllGatherGemmPlan& at,
                                           int dev, cudaStream_t st) {
  const int64_t w = static_cast<int64_t>(as.size()), rows = w * m;
  const size_t a_bytes = as[0].values.bytes(), s_bytes = as[0].scales.bytes();  // one rank's, contiguous
  bench::DeviceBuffer a(w * a_bytes), sa(w * s_bytes), out(static_cast<size_t>(rows * n) * 2);
  for (int64_t s = 0; s < w; ++s) {
    WEAVE_CHECK_CUDA(
        cudaMemcpyAsync(a.as<char>() + s * a_bytes, as[s].values.get(), a_bytes, cudaMemcpyDeviceToDevice, st));
    if (s_bytes > 0)
      WEAVE_CHECK_CUDA(
          cudaMemcpyAsync(sa.as<char>() + s * s_bytes, as[s].scales.get(), s_bytes, cudaMemcpyDeviceToDevice, st));
  }
  // As the operands' own: ptpc fp32 [rows], blockscale fp32 [rows, K/128] row-major; none for bf16.
  TensorView scale_a;
  if (q == ScaleMode::kPtpc) scale_a = TensorView::vector(sa.get(), DType::kF32, rows, dev);
  if (q == ScaleMode::kBlockscale) scale_a = TensorView::matrix(sa.get(), DType::kF32, rows, k / 128, dev);
  GemmPlanOverrides tile;
  tile.block_m = at.block_m;
  tile.block_n = at.block_n;
  tile.split_k = 1;
  tile.decode_route = DecodeRoute::kTiles;
  if (q == ScaleMode::kBlockscale) tile.scale_a_route = ScaleARoute::kAsGiven;  // fused-ce's K-major A scales
  const GemmProblem p{.m = rows, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
  Gemm g(p, TensorView::matrix(a.get(), as[0].view.dtype, rows, k, dev), b.view, GemmScales{scale_a, b.scale_view},
         TensorView::matrix(out.get(), DType::kBF16, rows, n, dev), tile);
  EXPECT_EQ(g.plan().block_m, at.block_m) << g.plan().kernel;
  EXPECT_EQ(g.plan().block_n, at.block_n) << g.plan().kernel;
  EXPECT_FALSE(g.plan().gemv) << g.plan().kernel;
  bench::DeviceBuffer ws(g.workspace_bytes());
  if (ws.bytes() > 0) g.set_workspace(ws.get(), ws.bytes());
  g.run(st);
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(st));
  g.check();
  std::vector<uint8_t> h(out.bytes());
  out.download(h.data(), h.size());
  return h;
}

}  // namespace

TEST(MultiGpuAllGatherGemm, SelfTestEveryModeAndQuant) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  for (ScaleMode q : kQuants)
    for (Mode mode : {Mode::kAuto, Mode::kSplitNccl, Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedCe}) {
      if (mode == Mode::kFusedCe && !fused_ce_runs(q)) continue;
      SCOPED_TRACE(std::string(to_string(q)) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
      std::string reason;
      for_each_rank([&](Communicator& c) {
        std::string why;
        auto op = make_or_reason<AllGatherGemm>(c, agm_config(q, mode, 512, 384 * (q == ScaleMode::kBF16 ? 1 : 2), 1100), why);
        if (!op) {
          if (c.rank() == 0) reason = why;
          return;
        }
        for (int64_t m : {1, 77, 128, 1000}) {
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
        }
      });
      if (!reason.empty()) print_not_run("ag-gemm", q, mode, w, reason);
    }
}

TEST(MultiGpuAllGatherGemm, SelfTestFailsWhenNothingMoves) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    AllGatherGemm op(c, agm_config(ScaleMode::kBF16, Mode::kGemmOnly, 256, 512, 1024));
    const SelfTestReport rep = op.self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[c.rank()], 0) << "the own rows are gathered locally";
  });
}

TEST(MultiGpuAllGatherGemm, EveryModeEqualsSplitBitwiseAndTheReferenceAtModelSizes) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 4096, k = 7168, m_max = 2048;
  const Mode modes[] = {Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto};
  for (ScaleMode q : kQuants) {
    SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
    std::vector<std::string> reasons(std::size(modes));
    std::string fused_reason;
    // auto's table for this op shape: fused-ce at m 1 and 1000, split-lsa at 128 and m_max.
    const ScopedTextFile table("weave-agm-multi", "weave-calibration 1\nop ag-gemm\nquant " + std::string(to_string(q)) +
                                                      "\nout bf16\nn 4096\nk 7168\nworld " + std::to_string(w) +
                                                      "\nwhere test\nm 1 fused-ce\nm 128 split-lsa\nm 1000 fused-ce\n"
                                                      "m 2048 split-lsa\n");
    for_each_rank([&](Communicator& c) {
      const int r = c.rank(), dev = c.device();
      StreamHolder st;
      AllGatherGemmConfig lsa_cfg = agm_config(q, Mode::kSplitLsa, n, k, m_max);
      if (q == ScaleMode::kMxfp8) lsa_cfg.mx_route = MxRoute::kNative;  // one kernel for every mode's bits
      AllGatherGemm split(c, lsa_cfg);
      std::vector<std::unique_ptr<AllGatherGemm>> ops;
      for (size_t i = 0; i < std::size(modes); ++i) {
        AllGatherGemmConfig cfg = agm_config(q, modes[i], n, k, m_max);
        if (q == ScaleMode::kMxfp8) cfg.mx_route = MxRoute::kNative;
        std::string why;
        ops.push_back(make_or_reason<AllGatherGemm>(c, cfg, why));
        if (r == 0) reasons[i] = why;
      }
      std::unique_ptr<AllGatherGemm> fused;  // fused-ce: its own kernel at plan(m)'s tile, held to weave::Gemm at it
      std::unique_ptr<AllGatherGemm> calibrated;  // auto whose table alternates fused-ce and split-lsa per m
      if (fused_ce_runs(q)) {
        std::string why;
        fused = make_or_reason<AllGatherGemm>(c, agm_config(q, Mode::kFusedCe, n, k, m_max), why);
        if (r == 0) fused_reason = why;
        if (fused && w > 1) {
          AllGatherGemmConfig cfg = agm_config(q, Mode::kAuto, n, k, m_max);
          cfg.calibration = table.path;
          calibrated = std::make_unique<AllGatherGemm>(c, cfg);
        }
      }
      const bench::DeviceOperand b = operand(77, n, k, q, ref::Operand::kB, dev);  // one B on every rank
      for (int64_t m : {int64_t(1), int64_t(128), int64_t(1000), m_max}) {
        std::vector<bench::DeviceOperand> as;  // every rank's A, made here for the reference
        for (int s = 0; s < w; ++s) as.push_back(operand(1000 * m + s, m, k, q, ref::Operand::kA, dev));
        const size_t bytes = static_cast<size_t>(w * m * n) * 2;
        // Every source's rows of `op`'s last output within the bound of that source's reference GEMM.
        auto expect_within_reference = [&](const AllGatherGemm& op) {
          bench::DeviceBuffer ref(static_cast<size_t>(m * n) * 4);
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw,
                              .out_dtype = DType::kBF16};
          for (int s = 0; s < w; ++s) {
            bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view},
                                      ref.as<float>(), st.s);
            const TensorView rows = TensorView::matrix(static_cast<char*>(op.output(m).data) + s * m * n * 2,
                                                       DType::kBF16, m, n, dev);
            const ref::Comparison cmp =
                bench::gpu_compare(rows, ref.as<float>(), bench::gemm_tolerance(q, DType::kBF16), st.s);
            EXPECT_EQ(cmp.wrong, 0) << to_string(op.last_mode()) << " m " << m << " source " << s << ": " << cmp.wrong
                                    << " of " << cmp.count << " beyond the bound, rel_l2 " << cmp.rel_l2;
            EXPECT_LT(cmp.rel_l2, 1e-2) << to_string(op.last_mode()) << " m " << m << " source " << s;
          }
        };
        const std::vector<uint8_t> want = poisoned_call(c, split, m, bytes, as[r], b, st.s);
        expect_within_reference(split);
        const auto hashes = c.all_gather(fnv1a64(want.data(), want.size()), "the output hash");
        for (int s = 1; s < w; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i]) continue;
          const std::vector<uint8_t> got = poisoned_call(c, *ops[i], m, bytes, as[r], b, st.s);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
              << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ops[i]->last_mode())
              << ") differs from split-lsa";
        }
        if (fused) {
          const std::vector<uint8_t> got = poisoned_call(c, *fused, m, bytes, as[r], b, st.s);
          EXPECT_EQ(fused->last_mode(), Mode::kFusedCe);
          expect_within_reference(*fused);
          const AllGatherGemmPlan fp = fused->plan(m);
          const std::vector<uint8_t> tile_bits = gemm_at_fused_ce_tile(as, b, m, n, k, q, fp, dev, st.s);
          EXPECT_EQ(std::memcmp(got.data(), tile_bits.data(), bytes), 0)
              << "m " << m << ": fused-ce differs from weave::Gemm at " << fp.block_m << "x" << fp.block_n
              << " over the stacked rows";
          // Where split-lsa's plan ran the same tile (not the GEMV, not another tile, no K split), the same sums.
          const AllGatherGemmPlan sp = split.plan(m);
          if (sp.block_m == fp.block_m && sp.block_n == fp.block_n && sp.gemm_kernel.find("gemv") == std::string::npos &&
              sp.gemm_split_k == 1)
            EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
                << "m " << m << ": fused-ce differs from split-lsa at split-lsa's tile";
          const auto fused_hashes = c.all_gather(fnv1a64(got.data(), got.size()), "fused-ce's output hash");
          for (int s = 1; s < w; ++s)
            EXPECT_EQ(fused_hashes[s], fused_hashes[0]) << "m " << m << ": fused-ce on rank " << s << " differs";
          if (calibrated) {  // the table's mode at m, with that mode's bits
            const Mode expect = (m == 1 || m == 1000) ? Mode::kFusedCe : Mode::kSplitLsa;
            const std::vector<uint8_t> cal = poisoned_call(c, *calibrated, m, bytes, as[r], b, st.s);
            EXPECT_EQ(calibrated->last_mode(), expect) << "m " << m << ": " << calibrated->plan(m).reason;
            EXPECT_EQ(std::memcmp(cal.data(), (expect == Mode::kFusedCe ? got : want).data(), bytes), 0)
                << "m " << m << ": auto from the table differs from " << to_string(expect);
          }
        }
      }
    });
    for (size_t i = 0; i < std::size(modes); ++i)
      if (!reasons[i].empty()) print_not_run("ag-gemm", q, modes[i], w, reasons[i]);
    if (!fused_reason.empty()) print_not_run("ag-gemm", q, Mode::kFusedCe, w, fused_reason);
  }
}

// 10,000 calls of random m over every mode, each output NaN-poisoned first and compared bit for bit
// with split-lsa's output of the same inputs (fused-ce: within the reference's bound; fused_soak.hpp),
// then every call with its quiet output; now and then one rank is late.
TEST(MultiGpuAllGatherGemm, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  randomised_soak_against_split<AgmWorld>(
      {Mode::kSplitLsa, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto, Mode::kFusedCe}, 256, 256, 512,
      [](std::mt19937_64& shared, int, int) { return 1 + static_cast<int64_t>(shared() % 512); });
}

// A peer that never makes the call (W >= 2): rank 0's waits end after the timeout naming the peer;
// the op refuses further calls (fused_peer_timeout.hpp).
TEST(MultiGpuAllGatherGemm, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  a_peer_that_never_arrives_times_out_naming_it<AgmWorld>({Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedCe}, 512, 256,
                                                         1024);
}
