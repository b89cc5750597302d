// The fused operators' protocol in the emulated world, once per operator (fused_op_typed.hpp):
// back-to-back calls of changing M with a slow rank, graph replays across the epoch wrap, a peer
// that never arrives, ranks that disagree on m, and a randomised soak. Every output is checked
// against its one-hot closed form (the trait's OneHot and DeviceExpect).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <memory>
#include <random>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "fused_op_typed.hpp"
#include "support/expect_error.hpp"
#include "testing/emulated_world.hpp"
#include "testing/spin_delay.hpp"

namespace weave::test {

// Back-to-back calls of changing M (and mode, for auto) on one op, no host sync between them, the
// trait's slow rank and a late rank per call; every call's output snapshotted on the device and
// checked at the end.
TYPED_TEST(EmulatedFusedOp, BackToBackCallsOfChangingMWithASlowRank) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = T::kBackToBackShape.n, k = T::kBackToBackShape.k, m_max = T::kBackToBackShape.m_max;
  const std::vector<int64_t> ms(std::begin(T::kBackToBackMs), std::end(T::kBackToBackMs));
  for (typename T::Mode mode : T::kBackToBackModes) {
    const int world = fits_queues(mode, 4) ? 4 : 2;  // fused-ce: W = 2 (copy streams, "Queues")
    if (world != 4) print_not_run(mode_name(mode) + " (run at W2 instead)", 4, not_run_reason(mode, 4));
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode) + " W" + std::to_string(world));
    ew.run([&](comm::Group& g) {
      auto cfg = T::config(T::kQuants[0], mode, n, k, m_max);
      typename T::Hooks hooks;
      T::slow_down_for_back_to_back(hooks, g.rank(), world, mode);
      auto op = T::create(g, cfg, hooks);
      typename T::OneHot oh(m_max, n, k, g.rank());
      Stream st;
      std::vector<bench::DeviceBuffer> as, snaps;
      for (size_t c = 0; c < ms.size(); ++c) {
        const auto h = oh.host_a(100 + c, ms[c]);
        as.emplace_back(m_max * k * 2);
        as.back().upload(h.data(), h.size() * 2);
        snaps.emplace_back(T::out_rows(world, ms[c]) * n * 2);
      }
      g.barrier();
      for (size_t c = 0; c < ms.size(); ++c) {
        if (g.rank() == static_cast<int>(c % world)) bench::spin_delay(2'000'000, st.s);  // a late rank
        op->run(ms[c], TensorView::matrix(as[c].get(), DType::kBF16, ms[c], k, g.device()), oh.b_view(g.device()), {},
                st.s);
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snaps[c].get(), op->output(ms[c]).data, snaps[c].bytes(),
                                         cudaMemcpyDeviceToDevice, st.s));
      }
      comm::sync_stream_bounded(st.s, 20, "back-to-back calls, mode " + mode_name(mode));
      op->check();
      for (size_t c = 0; c < ms.size(); ++c) {
        std::vector<uint8_t> h(snaps[c].bytes());
        snaps[c].download(h.data(), h.size());
        oh.expect_right(h, DType::kBF16, 100 + c, world, ms[c],
                        "rank " + std::to_string(g.rank()) + " call " + std::to_string(c) + " (m " +
                            std::to_string(ms[c]) + ")");
      }
      g.barrier();
    });
  }
}

// Graph replay: each rank captures [input variant copy -> output NaN poison -> run -> device
// check] per variant, for two M on one op; 1000 replays in an interleaved order, epochs started 50
// calls before the 2^32 wrap; #wrong accumulated on the device, every graph replayed (counted).
TYPED_TEST(EmulatedFusedOp, GraphReplaysAcrossTheEpochWrapWithChangingInputs) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = T::kGraphShape.n, k = T::kGraphShape.k, m_max = T::kGraphShape.m_max;
  const int world = 2, variants = 5, replays = 1000;
  for (typename T::Mode mode : T::kGraphModes) {
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto cfg = T::config(T::kQuants[0], mode, n, k, m_max);
      typename T::Hooks hooks;
      hooks.initial_epoch = 0xFFFFFFFFu - 50u;
      auto op = T::create(g, cfg, hooks);
      typename T::OneHot oh(m_max, n, k, g.rank());
      Stream st;
      // One wrong-element counter per graph (M and variant), so a failure says which replays erred.
      bench::DeviceBuffer wrong(8 * 2 * variants), a_live(m_max * k * 2);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, wrong.bytes()));
      std::vector<bench::DeviceBuffer> a_var;
      std::vector<std::unique_ptr<typename T::DeviceExpect>> want;
      std::vector<cudaGraphExec_t> execs;
      // Three phases, each ended by a barrier: the variants' uploads and closed forms (cudaMalloc,
      // synchronous copies), the captures, the instantiations. A peer's allocation or synchronous
      // copy while this rank captures can invalidate the capture (seen once in 6 runs of fused-ce,
      // whose capture waits for the peer's inside enqueue_lockstep, 2026-12-05).
      for (int gi = 0; gi < 2; ++gi)
        for (int v = 0; v < variants; ++v) {
          const int64_t m = T::kGraphMs[gi];
          const uint64_t seed = 500 + 10 * gi + v;
          const auto h = oh.host_a(seed, m);
          a_var.emplace_back(m_max * k * 2);
          a_var.back().upload(h.data(), h.size() * 2);
          want.push_back(std::make_unique<typename T::DeviceExpect>(oh, seed, world, m, false));
        }
      g.barrier();
      std::vector<cudaGraph_t> graphs;
      for (int gi = 0; gi < 2; ++gi)
        for (int v = 0; v < variants; ++v) {
          const int64_t m = T::kGraphMs[gi];
          const size_t index = graphs.size();
          cudaGraph_t graph;
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
          WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var[index].get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
          // The output NaN-poisoned around every replay's call (bf16 0xFFFF), so a replay whose call
          // writes nothing reads as wrong, not as the previous replay's right answer: before the
          // call (before its credit lets a peer store into it), or, where peers may still read
          // rows after this rank's call (fused-ce's pulls of the own rows, under any earlier M),
          // after the check, every row but those (poisoning them raced a slow peer's copy: wrong
          // elements at m 77 in 4 of 8 runs, 2026-12-05). The first replay finds it poisoned below.
          const RowRange keep = T::rows_peers_read(mode, world, m, g.rank());
          char* out = static_cast<char*>(op->output(m).data);
          const size_t row_bytes = static_cast<size_t>(n) * 2;
          const int64_t rows = T::out_rows(world, m);
          if (keep.empty()) poison_rows_except(out, row_bytes, rows, keep, st.s);
          op->run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
          want[index]->count_wrong(out, false, wrong.as<unsigned long long>() + index, 64, st.s);
          if (!keep.empty()) poison_rows_except(out, row_bytes, rows, keep, st.s);
          WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
          graphs.push_back(graph);
        }
      g.barrier();
      for (cudaGraph_t graph : graphs) {
        cudaGraphExec_t exec;
        WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
        WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
        execs.push_back(exec);
      }
      // Every row poisoned once before the first replay (no call in flight yet).
      WEAVE_CHECK_CUDA(cudaMemset(op->output(m_max).data, 0xFF, static_cast<size_t>(T::out_rows(world, m_max) * n) * 2));
      g.barrier();
      std::mt19937 order(99);  // the same order on every rank (every rank must make the same calls)
      std::vector<int> launched(execs.size(), 0);
      for (int i = 0; i < replays; ++i) {
        const size_t e = order() % execs.size();
        WEAVE_CHECK_CUDA(cudaGraphLaunch(execs[e], st.s));
        ++launched[e];
        g.barrier();  // lockstep enqueue: a replay ends in a check that waits for the call ("Queues")
      }
      // Both M and every input variant replayed (the order could leave one out).
      for (size_t e = 0; e < execs.size(); ++e) EXPECT_GT(launched[e], 0) << "graph " << e << " never replayed";
      comm::sync_stream_bounded(st.s, 60, "graph replays");
      op->check();
      std::vector<unsigned long long> per_graph(execs.size());
      wrong.download(per_graph.data(), wrong.bytes());
      unsigned long long bad = 0;
      std::string which;
      for (size_t e = 0; e < execs.size(); ++e) {
        bad += per_graph[e];
        if (per_graph[e])
          which += " graph " + std::to_string(e) + " (m " + std::to_string(T::kGraphMs[e / variants]) + ", " +
                   std::to_string(launched[e]) + " replays): " + std::to_string(per_graph[e]) + ";";
      }
      EXPECT_EQ(bad, 0ull) << mode_name(mode) << ", rank " << g.rank() << ": wrong elements over " << replays
                           << " replays:" << which;
      for (auto e : execs) cudaGraphExecDestroy(e);
      g.barrier();
    });
  }
}

// A peer that never makes the call: the others' waits end after the timeout with a named error
// (rank, peer, flag, expected, seen), the kernel completes (no pipeline trap: its bound is above
// the comm timeout), and the op reports kTimeout and refuses further calls.
TYPED_TEST(EmulatedFusedOp, APeerThatNeverArrivesTimesOutNamingIt) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = T::kTimeoutShape.n, k = T::kTimeoutShape.k, m = T::kTimeoutShape.m_max;
  for (typename T::Mode mode : T::kTimeoutModes) {
    bench::EmulatedWorld ew(2, 0, 1.0);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto op = T::create(g, T::config(T::kQuants[0], mode, n, k, m));
      typename T::OneHot oh(m, n, k, g.rank());
      oh.set_a(1, m);
      g.barrier();
      if (g.rank() == 0) {
        Stream st;
        op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
        comm::sync_stream_bounded(st.s, 10, "the call whose peer never arrives");
        const std::string msg = error_of([&] { op->check(); }, Status::kTimeout);
        expect_first_call_timeout_names_everything(msg, 0, 1);  // rank, peer, flag, expected, seen
        std::printf("  %s: %s\n", mode_name(mode).c_str(), msg.c_str());
        // The op refuses further calls.
        EXPECT_FALSE(error_of([&] { op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s); },
                              Status::kTimeout)
                         .empty());
      }
    });
  }
}

// Issue 36 item 3: ranks that call one fused call with m = 1000 and 1001 get kMismatch on every
// rank naming both m (docs/memory_ordering.md "call-key"), not misplaced rows with a clean check()
// and not a timeout. All-gather (rank r's rows land at r x m in every peer) finds it with the
// credit before any store to a peer, and with the credit off (a testing hook) on the arrival flags
// after the stores; all-reduce cuts rows and bands from each rank's own m.
TYPED_TEST(EmulatedFusedOp, RanksThatDisagreeOnMAreAMismatchOnEveryRank) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = T::kDisagreeShape.n, k = T::kDisagreeShape.k, m_max = T::kDisagreeShape.m_max;
  for (typename T::Mode mode : T::kDisagreeModes)
    for (bool credit : T::kDisagreeCredits) {
      if (!fits_queues(mode, 2)) {
        ADD_FAILURE() << mode_name(mode) << " not run: " << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
        continue;
      }
      SCOPED_TRACE(mode_name(mode) + (credit ? "" : ", credit off"));
      bench::EmulatedWorld ew(2, 0, 2.0);
      ew.run([&](comm::Group& g) {
        auto cfg = T::config(T::kQuants[0], mode, n, k, m_max);
        typename T::Hooks hooks;
        hooks.flow_control = credit;
        auto op = T::create(g, cfg, hooks);
        const int64_t m = 1000 + g.rank();
        typename T::OneHot oh(m_max, n, k, g.rank());
        oh.set_a(3, m);
        Stream st;
        g.barrier();
        op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
        comm::sync_stream_bounded(st.s, 20, "the call of disagreeing m");
        const std::string msg = error_of([&] { op->check(); }, Status::kMismatch);
        EXPECT_NE(msg.find("m = " + std::to_string(m)), std::string::npos) << msg;
        EXPECT_NE(msg.find("m = " + std::to_string(2001 - m)), std::string::npos) << "the peer's m: " << msg;
        if (g.rank() == 0) std::printf("  %s%s: %s\n", mode_name(mode).c_str(), credit ? "" : " (credit off)", msg.c_str());
        g.barrier();
      });
    }
}

namespace {

struct SoakCount {
  long long calls = 0, ptpc = 0;
  std::vector<long long> per_op;                  // calls of each op of the run
  std::map<std::string, long long> modes_taken;  // calls by the mode the op says it ran (last_mode)
};

// One rank's part of a soak run: run.calls calls of random M (16 variants, the same sequence on
// every rank from run.seed) over `ops` (picked at random per call, the same pick on every rank;
// bf16, or ptpc with PtpcOneHot's operands), a late rank now and then, each output NaN-poisoned
// before its call and checked on the device against its closed form after it. Returns the calls
// made, how many were ptpc, per op, and by the mode each op says it ran.
template <class T>
SoakCount soak_rank(comm::Group& g, const std::vector<typename T::Op*>& ops, const SoakRun<typename T::Mode>& run) {
  const int world = g.world_size(), dev = g.device();
  const int64_t n = T::kSoakShape.n, k = T::kSoakShape.k, m_max = T::kSoakShape.m_max;
  typename T::OneHot oh(m_max, n, k, g.rank());
  const PtpcOneHot pt(g.rank(), m_max, n, k, [&](int64_t r, int64_t c) { return oh.b_value(r, c); });
  Stream st;
  bench::DeviceBuffer wrong(8);
  WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
  constexpr int kVariants = 16;
  std::vector<bench::DeviceBuffer> a_var, a8_var;
  std::vector<std::unique_ptr<typename T::DeviceExpect>> want;
  std::vector<int64_t> var_m;
  std::mt19937_64 shared_rng(run.seed);  // the same sequence on every rank
  for (int v = 0; v < kVariants; ++v) {
    const int64_t m = 1 + static_cast<int64_t>(shared_rng() % m_max);
    var_m.push_back(m);
    const auto h = oh.host_a(run.a_seed + v, m);
    a_var.emplace_back(m_max * k * 2);
    a_var.back().upload(h.data(), h.size() * 2);
    const auto h8 = PtpcOneHot::host_a(h);
    a8_var.emplace_back(m_max * k);
    a8_var.back().upload(h8.data(), h8.size());
    want.push_back(std::make_unique<typename T::DeviceExpect>(oh, run.a_seed + v, world, m, true));
  }
  SoakCount count;
  count.per_op.assign(ops.size(), 0);
  for (typename T::Op* op : ops)  // every row poisoned once before the first call (none in flight yet)
    WEAVE_CHECK_CUDA(cudaMemset(op->output(m_max).data, 0xFF, static_cast<size_t>(T::out_rows(world, m_max) * n) * 2));
  g.barrier();
  for (int i = 0; i < run.calls; ++i) {
    const int v = static_cast<int>(shared_rng() % kVariants);
    const size_t o = shared_rng() % ops.size();
    typename T::Op* op = ops[o];
    if (g.rank() == static_cast<int>(shared_rng() % world) && (i % 7) == 0) bench::spin_delay(20'000, st.s);
    const int64_t m = var_m[v];
    const bool fp8 = op->config().quant == ScaleMode::kPtpc;
    // NaN (bf16 0xFFFF) before the call, on this rank's stream: after the previous call's check
    // read it, before this call's kernel (whose credit lets peers store into it), so a call that
    // writes nothing, or leaves a peer's rows out, counts as wrong. Where peers may still read rows
    // after this rank's call (fused-ce), after the check instead, every row but those (as the
    // graph test; poisoning them raced a slow puller: 73M wrong elements in one run, 2026-12-05).
    const RowRange keep = T::rows_peers_read(op->config().mode, world, m, g.rank());
    const int64_t rows = T::out_rows(world, m);
    if (keep.empty()) poison_rows_except(op->output(m).data, static_cast<size_t>(n) * 2, rows, keep, st.s);
    if (fp8)
      op->run(m, TensorView::matrix(a8_var[v].get(), DType::kE4M3, m, k, dev), pt.b_view(dev), pt.scales(m, dev), st.s);
    else
      op->run(m, TensorView::matrix(a_var[v].get(), DType::kBF16, m, k, dev), oh.b_view(dev), {}, st.s);
    ++count.calls;
    count.ptpc += fp8 ? 1 : 0;
    ++count.per_op[o];
    ++count.modes_taken[mode_name(op->last_mode())];
    g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
    want[v]->count_wrong(op->output(m).data, fp8, wrong.as<unsigned long long>(), 32, st.s);
    if (!keep.empty()) poison_rows_except(op->output(m).data, static_cast<size_t>(n) * 2, rows, keep, st.s);
    if (i % 256 == 255) comm::sync_stream_bounded(st.s, 60, "soak batch");
  }
  comm::sync_stream_bounded(st.s, 60, "soak");
  for (typename T::Op* op : ops) op->check();
  unsigned long long bad = 0;
  wrong.download(&bad, 8);
  EXPECT_EQ(bad, 0ull) << "rank " << g.rank() << " W" << world << ", " << ops[0]->describe();
  EXPECT_EQ(count.calls, run.calls) << "rank " << g.rank() << " W" << world;
  // Every op of the run was called, and an op of an explicit mode ran that mode on every call
  // (last_mode is the op's own report; auto may take any).
  for (size_t o = 0; o < ops.size(); ++o) {
    EXPECT_GT(count.per_op[o], 0) << "rank " << g.rank() << " W" << world << ": " << ops[o]->describe() << " never called";
    const auto mode = ops[o]->config().mode;
    if (mode != T::Mode::kAuto) {
      long long same_mode_calls = 0;  // the calls of every op of this mode
      for (size_t p = 0; p < ops.size(); ++p) same_mode_calls += ops[p]->config().mode == mode ? count.per_op[p] : 0;
      const auto taken = count.modes_taken.find(mode_name(mode));
      // auto ops may also take this mode, so at least the explicit ops' calls
      EXPECT_GE(taken == count.modes_taken.end() ? 0 : taken->second, same_mode_calls)
          << "rank " << g.rank() << " W" << world << ": calls that ran " << mode_name(mode);
    }
  }
  // Every rank made the same calls (the shared sequence): a rank that skipped one would have
  // stalled its peers, but count them anyway.
  const auto all = g.all_gather(static_cast<uint64_t>(count.calls), "the soak's call count");
  for (int s = 0; s < world; ++s) EXPECT_EQ(all[s], all[0]) << "rank " << s << " W" << world;
  g.barrier();
  return count;
}

}  // namespace

// >= 10,000 randomised collective calls (a call = every rank's run() of one op) at a model layer's
// N = 7168, K_r = 2048 (T::kSoakShape; M random up to m_max) over the trait's worlds and runs (W =
// 2, 3, 4: its modes of bf16 and ptpc with power-of-two row scales, fused-ce at W = 2 where copy
// streams fit): M, a late rank; every output NaN-poisoned before its call and checked on the
// device against its closed form after it; every call counted, per world and per mode taken.
TYPED_TEST(EmulatedFusedOp, RandomisedSoak) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = T::kSoakShape.n, k = T::kSoakShape.k, m_max = T::kSoakShape.m_max;
  const auto worlds = T::soak_worlds();
  long long planned = 0;
  for (const auto& sw : worlds)  // the soak's operands and device checks are bf16 and ptpc, bf16 out
    for (const auto& run : sw.runs) {
      planned += run.calls;
      for (const auto& o : run.ops) {
        const QuantCase& q = T::kQuants[o.quant];
        ASSERT_TRUE(q.quant == ScaleMode::kBF16 || q.quant == ScaleMode::kPtpc) << q.name;
        ASSERT_EQ(q.out, DType::kBF16) << q.name;
      }
    }
  long long calls = 0, ptpc_calls = 0;
  std::map<std::string, long long> modes_taken;
  std::string worlds_run;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& sw : worlds) {
    const std::string why_not = bench::EmulatedWorld::copy_engine_unsupported_reason(sw.world);
    if (sw.needs_copy_streams && !why_not.empty()) {
      ADD_FAILURE() << "W" << sw.world << " soak of copy-engine modes not run: " << why_not;
      continue;
    }
    for (const auto& run : sw.runs)
      for (const auto& o : run.ops)
        if (o.if_it_fits && !fits_queues(o.mode, sw.world))
          print_not_run(std::string(T::kName) + " soak op " + mode_name(o.mode) + " (" + T::kQuants[o.quant].name + ")",
                        sw.world, not_run_reason(o.mode, sw.world));
    bench::EmulatedWorld ew(sw.world, 0, 30);
    long long world_calls = 0;
    const auto tw = std::chrono::steady_clock::now();
    for (const auto& run : sw.runs)
      ew.run([&](comm::Group& g) {
        std::vector<std::unique_ptr<typename T::Op>> owned;
        for (const auto& o : run.ops) {
          if (o.if_it_fits && !fits_queues(o.mode, sw.world)) continue;  // said above
          auto cfg = T::config(T::kQuants[o.quant], o.mode, n, k, m_max);
          typename T::Hooks hooks;
          if (g.rank() == o.slow_puller) hooks.delay_pull_ns = o.delay_pull_ns;
          owned.push_back(T::create(g, cfg, hooks));
        }
        std::vector<typename T::Op*> ops;
        for (const auto& op : owned) ops.push_back(op.get());
        const SoakCount c = soak_rank<T>(g, ops, run);
        if (g.rank() == 0) {
          world_calls += c.calls;
          ptpc_calls += c.ptpc;
          for (const auto& [mode, count] : c.modes_taken) modes_taken[mode] += count;
        }
      });
    calls += world_calls;
    const double ws = std::chrono::duration<double>(std::chrono::steady_clock::now() - tw).count();
    std::printf("  soak W%d: %lld collective calls, %.1f s\n", sw.world, world_calls, ws);
    worlds_run += (worlds_run.empty() ? "W " : ", ") + std::to_string(sw.world);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(calls, planned) << "collective calls made of those the trait's runs plan";
  EXPECT_GE(calls, 10'000) << "collective calls over the soak's worlds";
  EXPECT_GT(ptpc_calls, calls / 10) << "the fp8 (ptpc) share of the soak";
  long long by_mode = 0;
  std::string taken;
  for (const auto& [mode, count] : modes_taken) {
    EXPECT_GT(count, 0) << mode;
    by_mode += count;
    taken += " " + mode + " " + std::to_string(count);
  }
  EXPECT_EQ(by_mode, calls) << "every call ran some mode";
  EXPECT_GT(modes_taken[mode_name(T::kFused)], 0) << "the main fused mode ran in the soak";
  std::printf("  soak: %lld collective calls (%lld ptpc) over %s at N %lld K %lld m <= %lld, each output poisoned "
              "before and checked on the device after its call, %.1f s; by mode:%s\n",
              calls, ptpc_calls, worlds_run.c_str(), static_cast<long long>(n), static_cast<long long>(k),
              static_cast<long long>(m_max), secs, taken.c_str());
}

}  // namespace weave::test
