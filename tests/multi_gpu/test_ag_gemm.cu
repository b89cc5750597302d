// AllGatherGemm over real NCCL communicators, through the public API: one rank per visible Hopper
// GPU (world 1 on a one-GPU machine; W over NVLink on a multi-GPU one).
//   - every mode x quant through self_test (every source rank's rows checked on every rank against
//     the closed form); gemm-only, which moves nothing, fails it at W >= 2;
//   - at model sizes (a column-parallel projection: N_r 4096, K 7168), every mode bitwise equal to
//     split-lsa (a gather moves bytes; split-nccl too), identical on every rank, within the bound of
//     an independent reference per source rank (CUDA-core GEMMs of every rank's A, made here);
//   - a soak of 10,000 calls against split-lsa's bits; a peer that never arrives.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused_support.hpp"
#include "support/expect_error.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/all_gather_gemm.hpp"

using namespace weave;
using namespace weave::test;
using Mode = AllGatherGemmMode;

namespace {

const ScaleMode kQuants[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8};

constexpr auto agm_config = &fused_op_config<AllGatherGemmConfig>;

}  // namespace

TEST(MultiGpuAllGatherGemm, SelfTestEveryModeAndQuant) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  for (ScaleMode q : kQuants)
    for (Mode mode : {Mode::kAuto, Mode::kSplitNccl, Mode::kSplitLsa, Mode::kSplitCe}) {
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
      const bench::DeviceOperand b = operand(77, n, k, q, ref::Operand::kB, dev);  // one B on every rank
      for (int64_t m : {int64_t(1), int64_t(128), int64_t(1000), m_max}) {
        std::vector<bench::DeviceOperand> as;  // every rank's A, made here for the reference
        for (int s = 0; s < w; ++s) as.push_back(operand(1000 * m + s, m, k, q, ref::Operand::kA, dev));
        const size_t bytes = static_cast<size_t>(w * m * n) * 2;
        const std::vector<uint8_t> want = poisoned_call(c, split, m, bytes, as[r], b, st.s);
        bench::DeviceBuffer ref(static_cast<size_t>(m * n) * 4);
        const GemmProblem p{.m = m, .n = n, .k = k, .mode = q, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
        for (int s = 0; s < w; ++s) {
          bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view}, ref.as<float>(), st.s);
          const TensorView rows = TensorView::matrix(static_cast<char*>(split.output(m).data) + s * m * n * 2,
                                                     DType::kBF16, m, n, dev);
          const ref::Comparison cmp = bench::gpu_compare(rows, ref.as<float>(), bench::gemm_tolerance(q, DType::kBF16), st.s);
          EXPECT_EQ(cmp.wrong, 0) << "m " << m << " source " << s << ": " << cmp.wrong << " of " << cmp.count
                                  << " beyond the bound, rel_l2 " << cmp.rel_l2;
          EXPECT_LT(cmp.rel_l2, 1e-2) << "m " << m << " source " << s;
        }
        const auto hashes = c.all_gather(fnv1a64(want.data(), want.size()), "the output hash");
        for (int s = 1; s < w; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
        for (size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i]) continue;
          const std::vector<uint8_t> got = poisoned_call(c, *ops[i], m, bytes, as[r], b, st.s);
          EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
              << "m " << m << ": " << to_string(modes[i]) << " (ran " << to_string(ops[i]->last_mode())
              << ") differs from split-lsa";
        }
      }
    });
    for (size_t i = 0; i < std::size(modes); ++i)
      if (!reasons[i].empty()) print_not_run("ag-gemm", q, modes[i], w, reasons[i]);
  }
}

// 10,000 calls of random m over split-ce, split-nccl and auto (the same pick on every rank), each
// output NaN-poisoned first and compared bit for bit with split-lsa's output of the same inputs;
// now and then one rank is late.
TEST(MultiGpuAllGatherGemm, RandomisedSoakAgainstSplit) {
  WEAVE_REQUIRE_GPUS(1);
  const int w = local_world();
  const int64_t n = 256, k = 256, m_max = 512;
  constexpr int kCalls = 10000, kVariants = 8;
  std::vector<long long> differing(w, 0), calls_made(w, 0);
  for_each_rank([&](Communicator& c) {
    const int r = c.rank(), dev = c.device();
    StreamHolder st;
    AllGatherGemm split(c, agm_config(ScaleMode::kBF16, Mode::kSplitLsa, n, k, m_max));
    std::vector<std::unique_ptr<AllGatherGemm>> ops;
    for (Mode mode : {Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto}) {
      std::string why;
      auto op = make_or_reason<AllGatherGemm>(c, agm_config(ScaleMode::kBF16, mode, n, k, m_max), why);
      if (op) ops.push_back(std::move(op));
    }
    ASSERT_FALSE(ops.empty());
    const bench::DeviceOperand b = operand(91, n, k, ScaleMode::kBF16, ref::Operand::kB, dev);
    std::mt19937_64 shared(20261205);
    std::vector<bench::DeviceOperand> as;
    std::vector<int64_t> ms;
    std::vector<bench::DeviceBuffer> want;
    for (int v = 0; v < kVariants; ++v) {
      const int64_t m = 1 + static_cast<int64_t>(shared() % m_max);
      ms.push_back(m);
      as.push_back(operand(5000 + 97 * v + r, m, k, ScaleMode::kBF16, ref::Operand::kA, dev));
      const size_t bytes = static_cast<size_t>(w * m * n) * 2;
      (void)poisoned_call(c, split, m, bytes, as.back(), b, st.s);
      want.emplace_back(bytes);
      WEAVE_CHECK_CUDA(cudaMemcpy(want.back().get(), split.output(m).data, bytes, cudaMemcpyDeviceToDevice));
    }
    c.barrier();
    for (int i = 0; i < kCalls; ++i) {
      const int v = static_cast<int>(shared() % kVariants);
      AllGatherGemm& op = *ops[shared() % ops.size()];
      const int64_t m = ms[v];
      const bool late = static_cast<int>(shared() % w) == r && i % 7 == 0;
      const size_t elems = static_cast<size_t>(w * m * n);
      bench::poison_nan(op.output(m).data, elems * 2, DType::kBF16, st.s);
      if (late) spin_delay(20'000, st.s);
      op.run(m, as[v].view, b.view, {}, st.s);
      ++calls_made[r];
      differing[r] += bench::gpu_count_differing(op.output(m).data, want[v].get(), elems, DType::kBF16, st.s);
      op.check();
    }
    c.barrier();
  });
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(calls_made[r], kCalls) << "rank " << r;
    EXPECT_EQ(differing[r], 0) << "rank " << r << ": elements that differ from split-lsa";
  }
  std::printf("  soak: %d calls at W%d over split-ce / split-nccl / auto, every output compared: %lld differing\n",
              kCalls, w, differing[0]);
}

// A peer that never makes the call (W >= 2): rank 0's waits end after the timeout naming the peer;
// the op refuses further calls; the others wait on a host flag, then every rank destroys its op.
TEST(MultiGpuAllGatherGemm, APeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(2);
  std::atomic<bool> rank0_done{false};
  for_each_rank([&](Communicator& c) {
    const int64_t m = 1024;
    AllGatherGemm op(c, agm_config(ScaleMode::kBF16, Mode::kSplitLsa, 512, 256, m));
    const bench::DeviceOperand a = operand(5 + c.rank(), m, 256, ScaleMode::kBF16, ref::Operand::kA, c.device());
    const bench::DeviceOperand b = operand(9, 512, 256, ScaleMode::kBF16, ref::Operand::kB, c.device());
    expect_rank0_alone_times_out(c, op, rank0_done, "split-lsa",
                                 [&](cudaStream_t s) { op.run(m, a.view, b.view, {}, s); });
  });
}
