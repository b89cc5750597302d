// GemmAllReduce in the emulated world (testing/emulated_world.hpp), its negative controls and
// timeouts: skipping the partial wait, the chunk election or the arrival wait (fused, fused-rs,
// fused-ce) must corrupt; a fast rank never overwrites what a slow reader has not read (no credit
// needed, fused and split-lsa) while fused-ce needs its credit; fused-ce's graph replays (both
// ranks in one graph); partials that never arrive time out inside the pipeline; a timed-out
// combine never overwrites a slow peer's output. Routes: test_gemm_all_reduce.cu; what every
// fused op has: EmulatedFusedOp/GemmAllReduce.* (test_fused_ops_typed*.cu).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/spin_delay.hpp"

using namespace weave;
using test::fits_queues;
using test::mode_name;
using test::Stream;
using Traits = test::AllReduceTraits;

namespace {

std::vector<uint16_t> download_output(const GemmAllReduce& op, int64_t m, int64_t n) {
  std::vector<uint16_t> h(m * n);
  WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), op.output(m).data, h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

// Negative controls of the fused protocol, each with a slow rank 1 (every tile's stores start 2 ms
// late). One chunk per band of 256 tiles, so a chunk spans four waves of a rank's 65 CTAs: rank 1's
// partials for band 0 land over ~8 ms, and its own band (the next round) after them. With every
// mechanism on, 0 wrong; skipping the partial wait (own tiles summed before the peer's partials
// landed), the chunk election (a chunk's flag published after its first tile) or the arrival wait
// (rank 0 reads its output as soon as its own kernel ends) must each corrupt rank 0's output.
// The same for fused-rs: its tail's partial wait and arrival wait, each skipped, must corrupt. And
// for fused-ce: its combine's wait for the landed copies, the chunk election (a copy triggered
// after a chunk's first tile) and the trigger lanes' flag waits (every copy triggered at once),
// each skipped, must corrupt.
TEST(EmulatedGemmAllReduce, SkippingAWaitOrTheElectionIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 16384;
  enum Control {
    kNone, kPartialWait, kElection, kArrivalWait, kRsNone, kRsPartialWait, kRsArrivalWait,
    kCeNone, kCePartialWait, kCeElection, kCeArrivalWait
  };
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  for (Control ctl : {kNone, kPartialWait, kElection, kArrivalWait, kRsNone, kRsPartialWait, kRsArrivalWait, kCeNone,
                      kCePartialWait, kCeElection, kCeArrivalWait}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong0 = 0;
    ew.run([&](comm::Group& g) {
      const bool rs = ctl >= kRsNone && ctl < kCeNone, ce = ctl >= kCeNone;
      auto cfg = Traits::config(Traits::kQuants[0],
                           rs ? GemmAllReduceMode::kFusedRs : (ce ? GemmAllReduceMode::kFusedCe : GemmAllReduceMode::kFused),
                           n, k, m);
      fused::GemmAllReduceHooks hooks;
      hooks.skip_partial_wait = ctl == kPartialWait || ctl == kRsPartialWait || ctl == kCePartialWait;
      hooks.publish_every_tile = ctl == kElection || ctl == kCeElection;
      hooks.skip_arrival_wait = ctl == kArrivalWait || ctl == kRsArrivalWait || ctl == kCeArrivalWait;
      cfg.chunks = 1;
      if (g.rank() == 1) hooks.delay_stores_ns = 2'000'000;
      auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
      test::ArOneHot oh(m, n, k, g.rank());
      oh.set_a(5, m);
      Stream st;
      WEAVE_CHECK_CUDA(cudaMemsetAsync(op->output(m).data, 0xFF, m * n * 2, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      g.barrier();
      bench::DeviceBuffer snapshot(m * n * 2);
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, snapshot.bytes(), cudaMemcpyDeviceToDevice, st.s));
      comm::sync_stream_bounded(st.s, 20, "the controlled call");
      std::vector<uint16_t> out(m * n);
      snapshot.download(out.data(), snapshot.bytes());
      if (g.rank() == 0) wrong0 = oh.wrong(out, 5, 2, m);
      g.barrier();
    });
    const char* names[] = {"every mechanism on",          "partial wait SKIPPED",        "chunk election OFF",
                           "arrival wait SKIPPED",        "fused-rs, every mechanism on", "fused-rs, tail's partial wait SKIPPED",
                           "fused-rs, arrival wait SKIPPED", "fused-ce, every mechanism on",
                           "fused-ce, landed wait SKIPPED", "fused-ce, chunk election OFF",
                           "fused-ce, trigger waits SKIPPED"};
    if (ctl == kNone || ctl == kRsNone || ctl == kCeNone) EXPECT_EQ(wrong0, 0) << names[ctl];
    else EXPECT_GT(wrong0, 0) << names[ctl] << " must corrupt the output of rank 0";
    std::printf("  %s: rank 0 saw %lld wrong elements of %lld\n", names[ctl], static_cast<long long>(wrong0),
                static_cast<long long>(m * n));
  }
}

// No credit is needed, in fused (it has none) nor split-lsa (run here with flow_control = false):
// rank 0 reads call 1's output 30 ms after its kernel (a slow consumer) while rank 1 goes straight on
// to call 2 with other values. Rank 1's final tiles of call 2 go to rank 0 only after rank 0's
// partials of call 2 arrived, i.e. after rank 0 finished reading call 1: 0 wrong. (GemmAllGather,
// which has no such dependency, needs its credit; its test shows the corruption without.)
TEST(EmulatedGemmAllReduce, AFastRankNeverOverwritesWhatASlowReaderHasNotRead) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 1024;
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong = 0, calls_seen = 0;
    ew.run([&](comm::Group& g) {
      auto cfg = Traits::config(Traits::kQuants[0], mode, n, k, m);
      fused::GemmAllReduceHooks hooks;
      hooks.flow_control = false;
      auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
      test::ArOneHot oh(m, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer a2(m * k * 2), snapshot(m * n * 2);
      const auto h2 = oh.host_a(6, m);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m);
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0) {
        bench::spin_delay(30'000'000, st.s);
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, m * n * 2, cudaMemcpyDeviceToDevice, st.s));
      }
      op->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 20, "two calls");
      if (g.rank() == 0) {
        std::vector<uint16_t> h(m * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m);
        calls_seen = oh.wrong(download_output(*op, m, n), 6, 2, m);  // call 2's output is right too
      }
      g.barrier();
    });
    EXPECT_EQ(wrong, 0) << mode_name(mode) << ": the slow reader must see call 1's output";
    EXPECT_EQ(calls_seen, 0) << mode_name(mode) << ": call 2's output";
    std::printf("  %s without credits: the slow reader saw %lld wrong elements\n", mode_name(mode).c_str(),
                static_cast<long long>(wrong));
  }
}

// fused-ce needs its credit: a peer's copy engine reads this rank's output during the peer's call,
// and a call of another M owns other rows. Rank 0 pulls slowly (each gather trigger 3 ms late); rank 1
// runs call 1 at m = 1024 (rows 512..1023 are its band: final tiles rank 0 pulls last) and goes
// straight on to call 2 at m = 2048, where those rows are band 0's and take rank 1's partials at
// once. With the credit, rank 1's call 2 waits for rank 0's call 2 (after rank 0's pulls of call 1
// joined): rank 0's snapshot of call 1 is right. Without it (flow_control = false) the snapshot
// must hold call 2's partials.
TEST(EmulatedGemmAllReduce, FusedCeCreditKeepsAFastRankFromOverwritingWhatASlowPullerReads) {
  WEAVE_REQUIRE_GPUS(1);
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  const int64_t n = 512, k = 256, m1 = 1024, m2 = 2048;
  for (bool credit : {true, false}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong = -1, second = -1;
    ew.run([&](comm::Group& g) {
      auto cfg = Traits::config(Traits::kQuants[0], GemmAllReduceMode::kFusedCe, n, k, m2);
      fused::GemmAllReduceHooks hooks;
      hooks.flow_control = credit;
      cfg.chunks = 1;
      if (g.rank() == 0) hooks.delay_pull_ns = 3'000'000;
      auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
      test::ArOneHot oh(m2, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer a2(m2 * k * 2), snapshot(m1 * n * 2);
      const auto h2 = oh.host_a(6, m2);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m1);
      g.barrier();
      op->run(m1, oh.a_view(m1, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0)
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m1).data, m1 * n * 2, cudaMemcpyDeviceToDevice, st.s));
      op->run(m2, TensorView::matrix(a2.get(), DType::kBF16, m2, k, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "two calls");
      op->check();
      if (g.rank() == 0) {
        std::vector<uint16_t> h(m1 * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m1);
        second = oh.wrong(download_output(*op, m2, n), 6, 2, m2);
      }
      g.barrier();
    });
    EXPECT_EQ(second, 0) << "call 2's output";
    if (credit) EXPECT_EQ(wrong, 0) << "with the credit, rank 0's pulls of call 1 read call 1's rows";
    else EXPECT_GT(wrong, 0) << "without the credit, rank 1's call 2 must overwrite rows rank 0 still pulls";
    std::printf("  fused-ce, credit %s: the slow puller's call 1 had %lld wrong elements\n", credit ? "on" : "OFF",
                static_cast<long long>(wrong));
  }
}

// Issue 36 item 2 (docs/memory_ordering.md "ar-fused-ce", "peer-abort"): rank 0 is a slow gatherer
// (its copy engine pulls rank 1's final rows of call 1 only 1.5 s after they are ready), so rank 1's
// second call times out on rank 0's credit (0.6 s) while those pulls are still to come. A rank that
// gave up stores nothing: rank 0's call-1 output holds call 1's rows. Then rank 0's call 2 waits
// for rank 1, which stopped, and gives up naming rank 1's abort instead of timing out on its own.
// Negative control (pull_stores_after_abort): rank 1 stores its call-2 tiles anyway and rank 0's
// call 1 returns call-2 rows. (Every wait of rank 1's call 1 is short: only gather pulls are late.)
TEST(EmulatedGemmAllReduce, FusedCeRankThatGaveUpStoresNothingAndItsPeerHearsOfIt) {
  WEAVE_REQUIRE_GPUS(1);
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  const int64_t n = 512, k = 256, m = 1024;
  constexpr double kTimeoutS = 0.6;
  for (bool control : {false, true}) {
    // Host rendezvous bounded by 10 s, not by the 0.6 s device timeout: rank 0's stream runs its
    // 1.5 s-late pulls before its barrier, and rank 1 waits there for it.
    bench::EmulatedWorld ew(2, 0, kTimeoutS, /*rendezvous_timeout_s=*/10);
    int64_t wrong = -1;
    std::string rank0_error, rank1_error;
    ew.run([&](comm::Group& g) {
      auto cfg = Traits::config(Traits::kQuants[0], GemmAllReduceMode::kFusedCe, n, k, m);
      cfg.chunks = 1;
      fused::GemmAllReduceHooks hooks;
      if (g.rank() == 0) hooks.delay_pull_ns = 1'500'000'000;
      hooks.pull_stores_after_abort = control;
      auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
      test::ArOneHot oh(m, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer a2(m * k * 2), snapshot(m * n * 2);
      const auto h2 = oh.host_a(6, m);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m);
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0)
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, m * n * 2, cudaMemcpyDeviceToDevice, st.s));
      op->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "two calls, the second given up");
      std::string& err = g.rank() == 0 ? rank0_error : rank1_error;
      err = test::error_of([&] { op->check(); }, Status::kTimeout);
      if (g.rank() == 0) {
        std::vector<uint16_t> h(m * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m);
      }
      g.barrier();
    });
    std::printf("  fused-ce, a rank gave up%s: the slow puller's call 1 had %lld wrong elements; rank 0: %s\n",
                control ? " (stores after the abort: negative control)" : "", static_cast<long long>(wrong),
                rank0_error.c_str());
    EXPECT_NE(rank1_error.find("credit"), std::string::npos) << "rank 1 gave up on rank 0's credit: " << rank1_error;
    if (control) {
      EXPECT_GT(wrong, 0) << "storing after the abort must overwrite rows rank 0 still pulls";
      continue;
    }
    EXPECT_EQ(wrong, 0) << "rank 1 gave up and stored nothing: rank 0's call 1 read call 1's rows";
    EXPECT_NE(rank0_error.find("peer 1 gave up this op first"), std::string::npos)
        << "rank 0's call 2 learns of rank 1's abort instead of timing out alone: " << rank0_error;
  }
}

// fused-ce in graphs. A graph per rank, replayed by each rank as above, cannot run in the emulated
// world: a replayed graph enters the shared hardware queues as the driver schedules it, and a
// rank's copy-stream wait (on a trigger its kernel stores once the PEER's chunk is ready) can sit
// ahead of that peer's kernel in a queue: seen on the device (2026-12-02, the 9th replay: rank 0's
// kernel waited for rank 1's credit until its 20 s timeout, then rank 1's kernel started). A
// multi-GPU run has no shared queue. So here both ranks' calls are captured into ONE graph (rank
// 1's stream joins rank 0's capture through an event), whose launch hands the driver every kernel
// and every copy as one DAG. Each variant: [both ranks: input copy -> run -> device check]; 1000
// replays by rank 0 in a random order over two M, epochs started 50 calls before the 2^32 wrap.
// fused runs the same graphs, and the time per replay of both is printed (one GPU: not NVLink).
TEST(EmulatedGemmAllReduce, FusedCeGraphReplaysInOneGraphAcrossTheEpochWrap) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 1024;
  const int world = 2, variants = 5, replays = 1000;
  const int64_t graph_ms[2] = {1024, 77};
  ASSERT_TRUE(fits_queues(GemmAllReduceMode::kFusedCe, world)) << bench::EmulatedWorld::copy_engine_unsupported_reason(world);
  for (GemmAllReduceMode mode : {GemmAllReduceMode::kFusedCe, GemmAllReduceMode::kFused}) {
  SCOPED_TRACE(mode_name(mode));
  bench::EmulatedWorld ew(world, 0, 20);
  std::vector<cudaStream_t> streams(world, nullptr);
  std::vector<cudaEvent_t> joined(world, nullptr);  // [r]: rank r's part of the capture is enqueued
  std::vector<cudaGraphExec_t> execs;
  ew.run([&](comm::Group& g) {
    const int r = g.rank();
    auto cfg = Traits::config(Traits::kQuants[0], mode, n, k, m_max);
    fused::GemmAllReduceHooks hooks;
    hooks.initial_epoch = 0xFFFFFFFFu - 50u;
    auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
    test::ArOneHot oh(m_max, n, k, r);
    Stream st;
    streams[r] = st.s;
    WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&joined[r], cudaEventDisableTiming));
    bench::DeviceBuffer wrong(8), a_live(m_max * k * 2);
    WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
    std::vector<bench::DeviceBuffer> a_var, want;
    g.barrier();
    for (int gi = 0; gi < 2; ++gi)
      for (int v = 0; v < variants; ++v) {
        const int64_t m = graph_ms[gi];
        const uint64_t seed = 700 + 10 * gi + v;
        const auto h = oh.host_a(seed, m);
        a_var.emplace_back(m_max * k * 2);
        a_var.back().upload(h.data(), h.size() * 2);
        const auto e = oh.expected(seed, world, m);
        want.emplace_back(e.size() * 2);
        want.back().upload(e.data(), e.size() * 2);
        if (r == 0) {
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeRelaxed));
          WEAVE_CHECK_CUDA(cudaEventRecord(joined[0], st.s));
        }
        g.barrier();
        if (r != 0) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, joined[0], 0));  // joins rank 0's capture
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var.back().get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
        op->run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
        test::ar_count_diff(op->output(m).data, want.back().get(), m * n, wrong.as<unsigned long long>(), 64, st.s);
        if (r != 0) WEAVE_CHECK_CUDA(cudaEventRecord(joined[r], st.s));
        g.barrier();
        if (r == 0) {
          for (int q = 1; q < world; ++q) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, joined[q], 0));
          cudaGraph_t graph;
          WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
          cudaGraphExec_t exec;
          WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
          WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
          execs.push_back(exec);
        }
        g.barrier();
      }
    if (r == 0) {
      std::mt19937 order(77);
      cudaEvent_t t0, t1;
      WEAVE_CHECK_CUDA(cudaEventCreate(&t0));
      WEAVE_CHECK_CUDA(cudaEventCreate(&t1));
      WEAVE_CHECK_CUDA(cudaEventRecord(t0, st.s));
      for (int i = 0; i < replays; ++i) WEAVE_CHECK_CUDA(cudaGraphLaunch(execs[order() % execs.size()], st.s));
      WEAVE_CHECK_CUDA(cudaEventRecord(t1, st.s));
      comm::sync_stream_bounded(st.s, 120, "one-graph replays");
      float ms = 0;
      WEAVE_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
      std::printf("  %s, both ranks in one graph: %.1f us per replay (m 1024 or 77, N %lld, K_r %lld, W %d on one GPU)\n",
                  mode_name(mode).c_str(), 1000.0 * ms / replays, static_cast<long long>(n), static_cast<long long>(k),
                  world);
      cudaEventDestroy(t0);
      cudaEventDestroy(t1);
    }
    g.barrier();  // every replay of every rank's part is complete
    op->check();
    unsigned long long bad = 0;
    wrong.download(&bad, 8);
    EXPECT_EQ(bad, 0ull) << "rank " << r << ": wrong elements over " << replays << " replays";
    g.barrier();
    if (r == 0)
      for (auto e : execs) cudaGraphExecDestroy(e);
    WEAVE_CHECK_CUDA(cudaEventDestroy(joined[r]));
    g.barrier();
  });
  }
}

// A peer whose partials come late (every tile's stores 1.5 s late, past the 1 s timeout): rank 0's
// own tiles' wait inside the GEMM pipeline times out by the comm bound, names the peer and the
// flag (phase 0), and the kernel completes (no pipeline trap: its bound is above the comm
// timeout). The end-of-call wait is skipped on both ranks (an agreed testing hook): a CTA with no
// tile holds the last ticket in some runs and would start that wait at once, so its timeout, not
// the pipeline's, was recorded first (seen 2026-12-01). Rank 1 had its peer's partials before rank
// 0 gave up, so it completes without an error.
TEST(EmulatedGemmAllReduce, PartialsThatNeverArriveTimeOutInsideThePipeline) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 1.0);
  ew.run([&](comm::Group& g) {
    auto cfg = Traits::config(Traits::kQuants[0], GemmAllReduceMode::kFused, 512, 256, 1024);
    fused::GemmAllReduceHooks hooks;
    hooks.skip_arrival_wait = true;
    if (g.rank() == 1) hooks.delay_stores_ns = 1'500'000'000ull;
    auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
    test::ArOneHot oh(1024, 512, 256, g.rank());
    oh.set_a(1, 1024);
    g.barrier();
    Stream st;
    op->run(1024, oh.a_view(1024, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 30, "the call with late partials");
    if (g.rank() == 0) {
      const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
      EXPECT_NE(msg.find("peer 1"), std::string::npos) << msg;
      EXPECT_NE(msg.find("phase 0"), std::string::npos) << "the partial wait: " << msg;
      std::printf("  rank 0: %s\n", msg.c_str());
    } else {
      EXPECT_NO_THROW(op->check()) << "rank 1 had rank 0's partials before rank 0 gave up";
    }
  });
}

// Issue 36 item 1: a combine wait that times out must not broadcast the tile it summed. Both ranks
// make call 1 and check it; then only rank 0 makes call 2 (rank 1 is alive but slow: it has not
// entered the call and still holds call 1's output). Rank 0's own tiles wait for rank 1's partials,
// time out (1 s) and are summed with call 1's stale staging: they must stay in rank 0's output.
// Rank 1's output must still be call 1's, every element (before the fix, rank 0 stored its stale
// sums of band 0 there), and its check() clean: nothing of its own failed.
TEST(EmulatedGemmAllReduce, ATimedOutCombineNeverOverwritesASlowPeersOutput) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 1024;
  bench::EmulatedWorld ew(2, 0, 1.0);
  int64_t before = -1, after = -1;
  std::string rank0_error;
  std::atomic<bool> rank0_done{false};
  ew.run([&](comm::Group& g) {
    auto cfg = Traits::config(Traits::kQuants[0], GemmAllReduceMode::kFused, n, k, m);
    // The end-of-call wait skipped (the agreed testing hook, as in the test above): it would start
    // at once in a CTA without tiles, and its abort, claimed before the combine, hides the bug.
    fused::GemmAllReduceHooks hooks;
    hooks.skip_arrival_wait = true;
    auto op = GemmAllReduce::Impl::create(g, cfg, hooks);
    test::ArOneHot oh(m, n, k, g.rank());
    Stream st;
    oh.set_a(5, m);
    g.barrier();
    op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 20, "call 1");
    op->check();
    if (g.rank() == 1) before = oh.wrong(download_output(*op, m, n), 5, 2, m);
    g.barrier();
    // Rank 0's call outlasts the world's 1 s rendezvous bound (its wait times out after 1 s), so
    // rank 1 waits for it on a host flag (bounded) instead of a barrier.
    if (g.rank() == 0) {
      oh.set_a(6, m);  // other values: a stale sum differs from call 1's
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 20, "call 2, whose peer never arrives");
      rank0_error = test::error_of([&] { op->check(); }, Status::kTimeout);
      rank0_done.store(true);
    } else {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!rank0_done.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ASSERT_TRUE(rank0_done.load()) << "rank 0's call 2 did not finish in 30 s";
    }
    if (g.rank() == 1) {
      after = oh.wrong(download_output(*op, m, n), 5, 2, m);
      EXPECT_NO_THROW(op->check()) << "rank 1 made no call that failed";
    }
  });
  EXPECT_EQ(before, 0) << "call 1";
  EXPECT_NE(rank0_error.find("phase 0"), std::string::npos) << "rank 0's combine wait timed out: " << rank0_error;
  EXPECT_EQ(after, 0) << "rank 1's call-1 output was overwritten by rank 0's timed-out call 2";
  std::printf("  rank 0 timed out (%s); rank 1's previous output: %lld wrong elements\n", rank0_error.c_str(),
              static_cast<long long>(after));
}
