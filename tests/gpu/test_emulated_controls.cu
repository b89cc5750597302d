// Negative controls of the collectives' checks in the emulated world (testing/emulated_world.hpp:
// W ranks as threads on one GPU, the same Collective code and kernels as over NCCL), so one GPU
// shows that each check can fail:
//   - self_test: one source sends the previous seed's values (Impl::self_test_stale_source, the
//     data a transport delivering a stale call would show); every rank must report the failure,
//     charged to that source where the values attribute per source (all-gather, fp32 sums).
//   - LL line reuse (docs/memory_ordering.md "ll-reuse"): with one LL copy per source
//     (flow_control = false) and the last rank waiting between sending and receiving, the fast
//     rank overwrites lines before they are read; the run must fail (a timeout naming the
//     overwritten line, or wrong sums). Inputs are hashed per (rank, element, call), so a line of
//     another call read as this call's shows as a wrong sum (the multi-GPU control used zeros).
//   - ce reduction credit (docs/memory_ordering.md "credit"): the ce one-shot all-reduce (and
//     reduce-scatter, the same code path) stages every peer's data in one fixed slot of the
//     receiver's window; with credits off (flow_control = false) and the last rank waiting before
//     it reduces (receive_delay_ns, in the ce reduce kernel), the fast rank's next call overwrites
//     that slot before it is read; the sums must come out wrong. With credits on, the same
//     sequence is right. Two-shot is right either way, and the test asserts it: its second leg's
//     arrival (phase 1) is published only after the receiver has reduced, and the sender's next
//     call starts after it, so the staging is always read first (measured on the device: 0 wrong
//     without credits). (The lsa staging slots cannot be overwritten even without credits; their
//     credit logic is CPU-tested, tests/cpu/test_comm_protocol.cpp.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/collective_impl.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/comm_values.hpp"
#include "testing/emulated_world.hpp"
#include "weave/quant.hpp"

using namespace weave;

namespace {

struct Combo {
  CollectiveOp op;
  Algorithm algorithm;
  DType dtype;
};

CollectiveConfig config_of(const Combo& c, size_t max_count) {
  CollectiveConfig cfg;
  cfg.op = c.op;
  cfg.transport = Transport::kLsa;
  cfg.algorithm = c.algorithm;
  cfg.dtype = c.dtype;
  cfg.max_count = max_count;
  return cfg;
}

std::string name_of(const Combo& c, int world) {
  return std::string(to_string(c.op)) + "/" + std::string(to_string(c.algorithm)) + "/" +
         std::string(to_string(c.dtype)) + "/W" + std::to_string(world);
}

}  // namespace

TEST(EmulatedControls, SelfTestReportsAStaleSourceOnEveryRank) {
  WEAVE_REQUIRE_GPUS(1);
  const Combo combos[] = {
      {CollectiveOp::kAllGather, Algorithm::kPush, DType::kBF16},
      {CollectiveOp::kAllGather, Algorithm::kLowLatency, DType::kBF16},
      {CollectiveOp::kReduceScatter, Algorithm::kPush, DType::kF32},
      {CollectiveOp::kAllReduce, Algorithm::kOneShot, DType::kF32},
      {CollectiveOp::kAllReduce, Algorithm::kTwoShot, DType::kBF16},
      {CollectiveOp::kAllReduce, Algorithm::kLowLatency, DType::kF32},
  };
  const size_t count = 4099;
  for (int world : {2, 4}) {
    if (!bench::EmulatedWorld::queue_budget_ok(2 * world)) {
      std::printf("  W = %d: too few hardware queues\n", world);
      continue;
    }
    bench::EmulatedWorld ew(world, 0, 20);
    const int stale = world - 1;
    for (const Combo& combo : combos) {
      SCOPED_TRACE(name_of(combo, world));
      // Per source where the values say which source a wrong element came from (all-gather bytes,
      // fp32 octal digits); a bf16 sum charges every source.
      const bool per_source = combo.op == CollectiveOp::kAllGather || combo.dtype == DType::kF32;
      ew.run([&](comm::Group& g) {
        auto op = Collective::Impl::create(g, config_of(combo, count));
        Collective::Impl::of(*op).self_test_stale_source = stale;
        const SelfTestReport bad = op->self_test(count);
        EXPECT_FALSE(bad.ok) << "rank " << g.rank() << ": a stale source passed: " << bad.detail;
        EXPECT_NE(bad.detail.find("FAILED"), std::string::npos) << bad.detail;
        ASSERT_EQ(bad.wrong_from_rank.size(), static_cast<size_t>(world));
        EXPECT_GT(bad.wrong_from_rank[stale], 0) << "rank " << g.rank() << ": " << bad.detail;
        if (per_source)
          for (int src = 0; src < world; ++src)
            if (src != stale) EXPECT_EQ(bad.wrong_from_rank[src], 0) << "rank " << g.rank() << " source " << src;
        // The same op, hook off: the failure came from the stale source, not from the op.
        Collective::Impl::of(*op).self_test_stale_source = -1;
        const SelfTestReport good = op->self_test(count);
        EXPECT_TRUE(good.ok) << "rank " << g.rank() << ": " << good.detail;
      });
    }
  }
}

namespace {

constexpr size_t kLlCount = 20000;  // bf16 elements per call
constexpr int kLlCalls = 8;

struct LlOutcome {
  int timed_out = 0;      // ranks whose op recorded a timeout
  int64_t wrong = 0;      // wrong output elements on the ranks without one
  bool overwrite_named = false;  // the last rank's timeout said "overwritten before it was read"
};

// What one rank saw over a sequence of all-reduces (run_sum_sequence).
struct RankSequence {
  bool timed_out = false;
  std::string message;  // the recorded timeout, if any
  int64_t wrong = 0;    // wrong output elements over all calls
};

// `calls` bf16 all-reduces of `count` elements through `op` back to back (no host sync between
// them); every call has its own inputs, hashed per (rank, element, call), and its own NaN-poisoned
// output, so data of another call read as this call's shows as a wrong sum.
RankSequence run_sum_sequence(comm::Group& g, Collective& op, size_t count, int calls) {
  const int r = g.rank(), w = g.world_size();
  const size_t bytes = count * 2;
  std::vector<uint16_t> in(count * calls), want(count * calls);
  for (int k = 0; k < calls; ++k)
    for (size_t j = 0; j < count; ++j) {
      in[k * count + j] = ref::float_to_bf16(bench::comm_test_int(r, j, k));
      float sum = 0;  // exact: small integers, rank order
      for (int q = 0; q < w; ++q) sum += bench::comm_test_int(q, j, k);
      want[k * count + j] = ref::float_to_bf16(sum);
    }
  OwnedDeviceMemory d_in(bytes * calls), d_out(bytes * calls);
  WEAVE_CHECK_CUDA(cudaMemcpy(d_in.p, in.data(), bytes * calls, cudaMemcpyHostToDevice));
  WEAVE_CHECK_CUDA(cudaMemset(d_out.p, 0xFF, bytes * calls));  // bf16 NaN: unwritten is wrong
  OwnedStream st;
  g.barrier();
  RankSequence out;
  for (int k = 0; k < calls; ++k) {
    // run() raises a timeout an earlier call recorded; every rank still reaches the barrier
    // (lockstep enqueue, emulated_world.hpp), so none waits for a rank that stopped.
    try {
      op.run(static_cast<char*>(d_in.p) + k * bytes, static_cast<char*>(d_out.p) + k * bytes, count, st.s);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kTimeout) << e.what();
      out.timed_out = true;
    }
    g.barrier();
  }
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
  try {
    op.check();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kTimeout) << e.what();
    out.timed_out = true;
    out.message = e.message();
  }
  std::vector<uint16_t> got(count * calls);
  WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), d_out.p, bytes * calls, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < got.size(); ++i) out.wrong += got[i] != want[i];
  return out;
}

// kLlCalls LL all-reduces back to back, the last rank waiting 200 us between sending and
// receiving.
LlOutcome run_ll_sequence(int world, bool two_copies) {
  LlOutcome outcome;
  std::mutex mu;
  // 2 s bounds each device wait and rendezvous: a timed-out op is unusable, so this world is
  // used for one sequence only.
  bench::EmulatedWorld ew(world, 0, 2);
  ew.run([&](comm::Group& g) {
    CollectiveConfig cfg = config_of({CollectiveOp::kAllReduce, Algorithm::kLowLatency, DType::kBF16}, kLlCount);
    comm::CollectiveHooks hooks;
    hooks.flow_control = two_copies;  // false: one LL copy per source
    hooks.receive_delay_ns = 200000;
    auto op = Collective::Impl::create(g, cfg, hooks);
    const RankSequence seen = run_sum_sequence(g, *op, kLlCount, kLlCalls);
    {
      std::lock_guard<std::mutex> lock(mu);
      outcome.timed_out += seen.timed_out;
      if (!seen.timed_out) outcome.wrong += seen.wrong;  // a timed-out rank's outputs are incomplete by design
      if (g.rank() == g.world_size() - 1 && seen.message.find("overwritten before it was read") != std::string::npos)
        outcome.overwrite_named = true;
    }
    g.barrier();
  });
  return outcome;
}

}  // namespace

namespace {

constexpr size_t kCeCount = 65536;  // bf16 elements per call
constexpr int kCeCalls = 8;

struct CeOutcome {
  int timed_out = 0;  // ranks whose op recorded a timeout (none expected either way)
  int64_t wrong = 0;  // wrong output elements over all ranks and calls
};

// kCeCalls ce all-reduces of `algorithm` back to back, the last rank waiting 200 us before each
// reduce.
CeOutcome run_ce_sequence(Algorithm algorithm, bool credits) {
  CeOutcome outcome;
  std::mutex mu;
  bench::EmulatedWorld ew(2, 0, 2);
  ew.run([&](comm::Group& g) {
    CollectiveConfig cfg;
    cfg.op = CollectiveOp::kAllReduce;
    cfg.transport = Transport::kCe;
    cfg.algorithm = algorithm;
    cfg.dtype = DType::kBF16;
    cfg.max_count = kCeCount;
    comm::CollectiveHooks hooks;
    hooks.flow_control = credits;
    hooks.receive_delay_ns = 200000;
    auto op = Collective::Impl::create(g, cfg, hooks);
    const RankSequence seen = run_sum_sequence(g, *op, kCeCount, kCeCalls);
    {
      std::lock_guard<std::mutex> lock(mu);
      outcome.timed_out += seen.timed_out;
      outcome.wrong += seen.wrong;
    }
    g.barrier();
  });
  return outcome;
}

}  // namespace

TEST(EmulatedControls, CeReductionCreditProtectsASlowReceiversStaging) {
  WEAVE_REQUIRE_GPUS(1);
  if (const std::string why = bench::EmulatedWorld::copy_engine_unsupported_reason(2); !why.empty())
    GTEST_SKIP() << why;
  for (Algorithm algorithm : {Algorithm::kOneShot, Algorithm::kTwoShot}) {
    SCOPED_TRACE(std::string(to_string(algorithm)));
    const CeOutcome ok = run_ce_sequence(algorithm, /*credits=*/true);
    EXPECT_EQ(ok.timed_out, 0) << "credits on, slow receiver: no wait may time out";
    EXPECT_EQ(ok.wrong, 0) << "credits on, slow receiver: every sum must be right";
    const CeOutcome bad = run_ce_sequence(algorithm, /*credits=*/false);
    EXPECT_EQ(bad.timed_out, 0) << "credits off: nothing waits on them, so nothing may time out";
    if (algorithm == Algorithm::kOneShot)
      EXPECT_GT(bad.wrong, 0) << "negative control: without credits a fast sender must overwrite the slow "
                                 "receiver's staging before it is reduced";
    else
      EXPECT_EQ(bad.wrong, 0) << "two-shot: the phase-1 arrival orders the receiver's reduce before the "
                                 "sender's next call, credits or not";
    std::printf("  ce %s credit negative control (W = 2, %d calls of %zu bf16): %lld wrong elements without "
                "credits, %lld with\n",
                std::string(to_string(algorithm)).c_str(), kCeCalls, kCeCount, static_cast<long long>(bad.wrong),
                static_cast<long long>(ok.wrong));
  }
}

TEST(EmulatedControls, LowLatencyLinesOverwrittenWithOneCopyAreCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  const LlOutcome ok = run_ll_sequence(world, /*two_copies=*/true);
  EXPECT_EQ(ok.timed_out, 0) << "two LL copies, slow receiver: no wait may time out";
  EXPECT_EQ(ok.wrong, 0) << "two LL copies, slow receiver: every sum must be right";
  const LlOutcome bad = run_ll_sequence(world, /*two_copies=*/false);
  EXPECT_GT(bad.timed_out + bad.wrong, 0)
      << "negative control: with one LL copy per source and a slow receiver the run must fail";
  if (bad.timed_out) EXPECT_TRUE(bad.overwrite_named) << "the slow rank's timeout must name the overwritten line";
  std::printf("  ll negative control (W = %d): %d rank(s) timed out, %lld wrong elements\n", world, bad.timed_out,
              static_cast<long long>(bad.wrong));
}

// An exception that escapes a collective's call after its checks (mid-enqueue) may leave the op's
// words half-advanced: the op must refuse every later call and check() (kInternal, "unusable") on
// the rank that raised, as the fused ops do (tests/gpu/test_fused_ops_broken.cu). The negative
// control: an argument error, raised before anything is enqueued, leaves the op usable. W = 2, lsa
// and ce all-reduce. (Issue 36 item 7.)
TEST(EmulatedControls, AnErrorMidEnqueueBreaksTheCollective) {
  WEAVE_REQUIRE_GPUS(1);
  constexpr size_t kCount = 4096;
  for (Transport transport : {Transport::kLsa, Transport::kCe}) {
    SCOPED_TRACE(std::string(to_string(transport)));
    if (transport == Transport::kCe && !bench::EmulatedWorld::copy_engine_unsupported_reason(2).empty()) {
      std::printf("  not run over ce: %s\n", bench::EmulatedWorld::copy_engine_unsupported_reason(2).c_str());
      continue;
    }
    bench::EmulatedWorld ew(2, 0, 10);
    std::string arg_error, first, later_check, later_run;
    ew.run([&](comm::Group& g) {
      CollectiveConfig cfg;
      cfg.op = CollectiveOp::kAllReduce;
      cfg.transport = transport;
      cfg.dtype = DType::kBF16;
      cfg.max_count = kCount;
      auto op = Collective::Impl::create(g, cfg);
      OwnedDeviceMemory in_mem(kCount * 2), out_mem(kCount * 2);
      void *in = in_mem.p, *out = out_mem.p;
      WEAVE_CHECK_CUDA(cudaMemset(in, 0, kCount * 2));
      OwnedStream stream;
      const cudaStream_t s = stream.s;
      // Control: an argument error (count 0) before anything is enqueued; then a normal call.
      const std::string bad = test::error_of([&] { op->run(in, out, 0, s); });
      g.barrier();
      op->run(in, out, kCount, s);
      comm::sync_stream_bounded(s, 20, "the control call");
      op->check();  // raises if the argument error had broken the op
      // Both ranks enqueue the whole call (the peer's waits pass); rank 0's run() then raises.
      if (g.rank() == 0) Collective::Impl::of(*op).fail_after_enqueue_for_testing = true;
      g.barrier();
      std::string e;
      if (g.rank() == 0)
        e = test::error_of([&] { op->run(in, out, kCount, s); }, Status::kInternal);
      else
        op->run(in, out, kCount, s);
      g.barrier();
      comm::sync_stream_bounded(s, 20, "the call that raised after enqueueing");
      if (g.rank() == 0) {
        arg_error = bad;
        first = e;
        later_check = test::error_of([&] { op->check(); }, Status::kInternal);
        later_run = test::error_of([&] { op->run(in, out, kCount, s); }, Status::kInternal);
      } else {
        op->check();  // the peer's call completed: its op is clean
      }
      g.barrier();
    });
    EXPECT_NE(arg_error.find("count must be"), std::string::npos) << arg_error;
    EXPECT_NE(first.find("fail_after_enqueue_for_testing"), std::string::npos) << first;
    EXPECT_NE(later_check.find("unusable"), std::string::npos) << "check() after the escape: " << later_check;
    EXPECT_NE(later_run.find("unusable"), std::string::npos) << "run() after the escape: " << later_run;
    std::printf("  %s all-reduce after an error mid-enqueue: %s\n", std::string(to_string(transport)).c_str(),
                later_run.c_str());
  }
}
