// GemmAllReduce's mode decode-fused (gemv/gemv_all_reduce.hpp: the decode GEMV and the LL
// all-reduce as one kernel) in the emulated world: bitwise equal to mode decode at every M bucket,
// quant and world; the negative controls of its two mechanisms (the flag in each line, two line
// copies); graph replays across the epoch wrap; a peer that never arrives; ranks that disagree on
// m; a randomised soak of more than 10,000 calls at a model layer's size.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/all_reduce/impl.hpp"
#include "gemv/gemv_all_reduce.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "testing/spin_delay.hpp"

using namespace weave;
using test::Stream;
using Traits = test::AllReduceTraits;
using Mode = GemmAllReduceMode;

namespace {

std::unique_ptr<GemmAllReduce> make_op(comm::Group& g, const test::QuantCase& q, Mode mode, int64_t n, int64_t k,
                                       int64_t m_max, const fused::GemmAllReduceHooks& hooks = {}) {
  return GemmAllReduce::Impl::create(g, Traits::config(q, mode, n, k, m_max), hooks);
}

const test::QuantCase& bf16_case() { return Traits::kQuants[0]; }
size_t bytes_of(int64_t m, int64_t n) { return static_cast<size_t>(m * n) * 2; }

// The first byte at which two outputs differ, as "byte i (row r, column c)", or "".
std::string first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, int64_t n) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i] != b[i])
      return "byte " + std::to_string(i) + " (row " + std::to_string(i / 2 / n) + ", column " +
             std::to_string(i / 2 % n) + ")";
  return a.size() == b.size() ? "" : "sizes differ";
}

}  // namespace

// Bitwise equal to mode decode (the same K split, GEMV roundings and fp32 sum of bf16 partials in
// rank order; GemmAllReduce's decode runs decode-fused's split): M of each token-tile bucket and
// partial tiles, N not a multiple of the 128-row band, W = 2, 3, 4, 8, every quant the GEMV reads;
// identical on every rank, within the summed reference's bound; self_test passes; m = 33 refused
// by name; mxfp8 packed refused at construction.
TEST(EmulatedGemmAllReduce, DecodeFusedEqualsDecodeBitwise) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 392, k = 512, m_max = 40;
  int compared = 0;
  for (int world : {2, 3, 4, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const test::QuantCase& q : Traits::kQuants) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        if (q.layout == ScaleLayout::kPacked) {
          const std::string msg = test::error_of([&] { make_op(g, q, Mode::kDecodeFused, n, k, m_max); },
                                                 Status::kUnavailable);
          EXPECT_NE(msg.find("raw scales only"), std::string::npos) << msg;
          return;
        }
        auto fused = make_op(g, q, Mode::kDecodeFused, n, k, m_max);
        auto decode = make_op(g, q, Mode::kDecode, n, k, m_max);
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(700 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {1, 7, 8, 13, 16, 29, 32}) {
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 7000 + 100 * m, m, k, q.quant, dev);
          test::LayoutScales held;
          const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
          const size_t bytes = static_cast<size_t>(m * n) * 2;
          const auto want = test::poisoned_call(g, *decode, m, as[r].view, bs[r].view, sc, bytes, st.s);
          const auto got = test::poisoned_call(g, *fused, m, as[r].view, bs[r].view, sc, bytes, st.s);
          EXPECT_EQ(fused->last_mode(), Mode::kDecodeFused);
          EXPECT_TRUE(got == want) << "m " << m << ": decode-fused differs from decode at "
                                   << first_difference(got, want, n);
          const auto hashes = g.all_gather(fnv1a64(got.data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw,
                              .out_dtype = DType::kBF16};
          test::SummedReference ref(as, bs, p, st.s);
          bench::DeviceBuffer dev_got(bytes);
          dev_got.upload(got.data(), bytes);
          const ref::Comparison cmp =
              bench::gpu_compare(TensorView::matrix(dev_got.get(), DType::kBF16, m, n, dev), ref.sum.as<float>(),
                                 bench::reduced_gemm_tolerance(q.quant, world), st.s, ref.mag.as<float>());
          EXPECT_EQ(cmp.wrong, 0) << "m " << m << ": " << cmp.wrong << " of " << cmp.count << " beyond the bound";
          EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m;
          if (r == 0) ++compared;
          g.barrier();
        }
        const SelfTestReport rep = fused->self_test(29);
        EXPECT_TRUE(rep.ok) << rep.detail;
        test::ArOneHot oh(m_max, n, k, r);
        const std::string msg = test::error_of(
            [&] { fused->run(33, oh.a_view(33, dev), oh.b_view(dev), {}, st.s); }, Status::kInvalidArgument);
        EXPECT_NE(msg.find("mode decode-fused runs m <= 32"), std::string::npos) << msg;
        g.barrier();
      });
    }
  }
  std::printf("  decode-fused == decode bitwise: %d (world, quant, m) cases\n", compared);
}

// auto with a calibration table that measured decode-fused fastest at small M: the op hosts the
// lines, takes decode-fused at those M (bitwise equal to a decode op), and split-lsa / fused at the
// table's larger M on the same op in between (one epoch sequence across the kernels of every
// mode: each call's output equals the explicit mode's op bitwise).
TEST(EmulatedGemmAllReduce, AutoTakesDecodeFusedFromACalibrationTable) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 1024, k = 512, m_max = 512;
  const std::string path = ::testing::TempDir() + "weave_gar_decode_fused_" + std::to_string(::getpid()) + ".txt";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr) << path;
    std::fprintf(f, "weave-calibration 1\nop gemm-ar\nquant bf16\nn %lld\nk %lld\nworld 2\nwhere test\n"
                    "m 1 decode-fused\nm 8 decode-fused\nm 64 split-lsa\nm 256 fused\n",
                 static_cast<long long>(n), static_cast<long long>(k));
    std::fclose(f);
  }
  bench::EmulatedWorld ew(2, 0, 20);
  const test::QuantCase& q = bf16_case();
  ew.run([&](comm::Group& g) {
    const int dev = g.device(), r = g.rank();
    GemmAllReduceConfig cfg = Traits::config(q, Mode::kAuto, n, k, m_max);
    cfg.calibration = path;
    auto autop = GemmAllReduce::Impl::create(g, cfg, {});
    EXPECT_NE(autop->describe().find("decode-fused LL lines"), std::string::npos) << autop->describe();
    auto decode = make_op(g, q, Mode::kDecode, n, k, m_max);
    auto split = make_op(g, q, Mode::kSplitLsa, n, k, m_max);
    std::vector<bench::DeviceOperand> bs;
    for (int s = 0; s < 2; ++s)
      bs.push_back(bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(900 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
    Stream st;
    int call = 0;
    for (int64_t m : {1, 8, 64, 8, 200, 1, 5, 256, 2}) {  // nearest table row within 2x in M
      SCOPED_TRACE("call " + std::to_string(call++) + ", m " + std::to_string(m));
      const std::vector<bench::DeviceOperand> as = test::upload_every_a(2, 9000 + 10 * m, m, k, q.quant, dev);
      test::LayoutScales held;
      const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
      const size_t bytes = bytes_of(m, n);
      const Mode want_mode = m <= 8 ? Mode::kDecodeFused : m <= 90 ? Mode::kSplitLsa : Mode::kFused;
      GemmAllReduce& explicit_op = m <= 8 ? *decode : *split;  // fused == split-lsa bitwise
      const auto want = test::poisoned_call(g, explicit_op, m, as[r].view, bs[r].view, sc, bytes, st.s);
      const auto got = test::poisoned_call(g, *autop, m, as[r].view, bs[r].view, sc, bytes, st.s);
      EXPECT_EQ(autop->last_mode(), want_mode) << to_string(autop->last_mode());
      EXPECT_TRUE(got == want) << "auto differs from " << to_string(explicit_op.last_mode()) << " at "
                               << first_difference(got, want, n);
      g.barrier();
    }
    autop->check();  // no wait timed out, nothing mismatched
  });
  std::remove(path.c_str());
}

// The two mechanisms, each flipped (the hooks of fused/all_reduce/hooks.hpp), with a slow rank:
//  - the flag in every line: taking the peers' lines unchecked while a peer sends late reads lines
//    that were never written (zeros), so the sum misses the peer's term; with the check, the same
//    delay gives decode's output;
//  - two copies of the lines: with one, a rank a call ahead overwrites lines a slow receiver has
//    not read yet, and the receiver times out finding a LATER call's line; with two, the same
//    back-to-back calls are right.
TEST(EmulatedGemmAllReduce, DecodeFusedNegativeControls) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 512, m_max = 32, m = 8;
  for (bool checked : {true, false}) {
    SCOPED_TRACE(checked ? "flags checked" : "flags unchecked (control)");
    bench::EmulatedWorld ew(2, 0, 5);
    ew.run([&](comm::Group& g) {
      const int dev = g.device(), r = g.rank();
      fused::GemmAllReduceHooks h;
      h.skip_arrival_wait = !checked;
      if (r == 1) h.delay_stores_ns = 2'000'000;  // rank 1 sends 2 ms late
      auto fused = make_op(g, bf16_case(), Mode::kDecodeFused, n, k, m_max, h);
      auto decode = make_op(g, bf16_case(), Mode::kDecode, n, k, m_max);
      test::ArOneHot oh(m_max, n, k, r);
      oh.set_a(41, m);
      Stream st;
      const size_t bytes = static_cast<size_t>(m * n) * 2;
      const auto want = test::poisoned_call(g, *decode, m, oh.a_view(m, dev), oh.b_view(dev), {}, bytes, st.s);
      const auto got = test::poisoned_call(g, *fused, m, oh.a_view(m, dev), oh.b_view(dev), {}, bytes, st.s);
      if (checked) {
        EXPECT_TRUE(got == want) << "rank " << r << ": with the check, differs at " << first_difference(got, want, n);
      } else if (r == 0) {
        EXPECT_FALSE(got == want) << "the control passed: unchecked lines read right although rank 1 sent 2 ms late";
      }
      g.barrier();
    });
  }
  for (bool two_copies : {true, false}) {
    SCOPED_TRACE(two_copies ? "two line copies" : "one line copy (control)");
    bench::EmulatedWorld ew(2, 0, 2);
    ew.run([&](comm::Group& g) {
      const int dev = g.device(), r = g.rank();
      if (r == 0) {  // the K split these calls run (one timeout of this part was seen once: which split?)
        int num_sms = 0;
        WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, dev));
        const GemmProblem p{.m = m, .n = n, .k = k, .mode = ScaleMode::kBF16, .scale_layout = ScaleLayout::kRaw,
                            .out_dtype = DType::kBF16};
        std::printf("  decode-fused split %d (the registers GEMV's planned split %d, the stream path's %d)\n",
                    detail::gemv_all_reduce_config(p, num_sms, g.ranks_per_device()).split,
                    detail::gemv_planned_split(p, num_sms),
                    detail::gemv_config(p, num_sms, 0, detail::GemvArgs::Path::kStream, {},
                                        detail::gemv_device_residency(ScaleMode::kBF16))
                        .split);
      }
      fused::GemmAllReduceHooks h;
      h.flow_control = two_copies;
      if (r == 1) h.delay_receive_ns = 20'000'000;  // rank 1 reads the lines 20 ms after sending its own
      auto fused = make_op(g, bf16_case(), Mode::kDecodeFused, n, k, m_max, h);
      test::ArOneHot oh(m_max, n, k, r);
      Stream st;
      bench::DeviceBuffer a2(m_max * k * 2), wrong(8);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      oh.set_a(51, m);
      const auto h2 = oh.host_a(52, m);
      a2.upload(h2.data(), h2.size() * 2);
      const test::ArDeviceExpect first(oh, 51, 2, m, false), second(oh, 52, 2, m, false);
      WEAVE_CHECK_CUDA(cudaMemset(fused->output(m).data, 0xFF, bytes_of(m, n)));
      g.barrier();
      // Two calls back to back (no host sync between them): the first's output checked on the
      // stream before the second call overwrites it.
      fused->run(m, oh.a_view(m, dev), oh.b_view(dev), {}, st.s);
      first.count_wrong(fused->output(m).data, false, wrong.as<unsigned long long>(), 8, st.s);
      g.barrier();
      fused->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, dev), oh.b_view(dev), {}, st.s);
      second.count_wrong(fused->output(m).data, false, wrong.as<unsigned long long>(), 8, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "two back-to-back decode-fused calls");
      unsigned long long bad = 0;
      wrong.download(&bad, 8);
      if (two_copies) {
        fused->check();
        EXPECT_EQ(bad, 0ull) << "rank " << r;
      } else if (r == 1) {
        const std::string msg = test::error_of([&] { fused->check(); }, Status::kTimeout);
        EXPECT_NE(msg.find("LATER call"), std::string::npos) << "the control passed, or failed otherwise: " << msg;
        std::printf("  one line copy: %s\n", msg.c_str());
      }
      g.barrier();
    });
  }
}

// 1000 replays of per-rank graphs (2 M x 5 input variants, one call each, replayed in a shared
// random order) from 50 calls before the epoch wrap: every replay's output against its closed
// form (one-hot operands: exact), NaN-poisoned before each call.
TEST(EmulatedGemmAllReduce, DecodeFusedGraphReplaysAcrossTheEpochWrap) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 392, k = 512, m_max = 32;
  const int64_t ms[2] = {13, 1};
  const int world = 2, variants = 5, replays = 1000;
  bench::EmulatedWorld ew(world, 0, 20);
  ew.run([&](comm::Group& g) {
    fused::GemmAllReduceHooks hooks;
    hooks.initial_epoch = 0xFFFFFFFFu - 50u;
    auto op = make_op(g, bf16_case(), Mode::kDecodeFused, n, k, m_max, hooks);
    test::ArOneHot oh(m_max, n, k, g.rank());
    Stream st;
    bench::DeviceBuffer wrong(8 * 2 * variants), a_live(m_max * k * 2);
    WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, wrong.bytes()));
    std::vector<bench::DeviceBuffer> a_var;
    std::vector<std::unique_ptr<test::ArDeviceExpect>> want;
    for (int gi = 0; gi < 2; ++gi)
      for (int v = 0; v < variants; ++v) {
        const uint64_t seed = 900 + 10 * gi + v;
        const auto h = oh.host_a(seed, ms[gi]);
        a_var.emplace_back(m_max * k * 2);
        a_var.back().upload(h.data(), h.size() * 2);
        want.push_back(std::make_unique<test::ArDeviceExpect>(oh, seed, world, ms[gi], false));
      }
    g.barrier();
    std::vector<cudaGraph_t> graphs;
    for (int gi = 0; gi < 2; ++gi)
      for (int v = 0; v < variants; ++v) {
        const int64_t m = ms[gi];
        const size_t index = graphs.size();
        cudaGraph_t graph;
        WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var[index].get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(op->output(m).data, 0xFF, bytes_of(m, n), st.s));
        op->run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
        want[index]->count_wrong(op->output(m).data, false, wrong.as<unsigned long long>() + index, 16, st.s);
        WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
        graphs.push_back(graph);
      }
    g.barrier();
    // Instantiated, replayed in an order every rank shares (one barrier after each launch: the
    // lockstep enqueue of testing/emulated_world.hpp "Queues"), waited for and destroyed.
    const std::vector<int> launched = test::replay_graphs_in_lockstep(g, graphs, replays, 77, st.s);
    for (size_t e = 0; e < launched.size(); ++e) EXPECT_GT(launched[e], 0) << "graph " << e << " never replayed";
    op->check();
    std::vector<unsigned long long> per_graph(launched.size());
    wrong.download(per_graph.data(), wrong.bytes());
    for (size_t e = 0; e < launched.size(); ++e)
      EXPECT_EQ(per_graph[e], 0ull) << "rank " << g.rank() << " graph " << e << " (m " << ms[e / variants] << ", "
                                    << launched[e] << " replays)";
    g.barrier();
  });
}

// A peer that never makes the call: rank 0's waits end after the timeout with the error naming the
// rank, the peer, the line and its flag; the op then refuses further calls.
TEST(EmulatedGemmAllReduce, DecodeFusedPeerThatNeverArrivesTimesOutNamingIt) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 16;
  bench::EmulatedWorld ew(2, 0, 1.0);
  ew.run([&](comm::Group& g) {
    auto op = make_op(g, bf16_case(), Mode::kDecodeFused, n, k, m);
    test::ArOneHot oh(m, n, k, g.rank());
    oh.set_a(1, m);
    g.barrier();
    if (g.rank() == 0) {
      Stream st;
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 10, "the call whose peer never arrives");
      const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
      test::expect_first_call_timeout_names_everything(msg, 0, 1);
      EXPECT_NE(msg.find("never written"), std::string::npos) << msg;
      std::printf("  decode-fused: %s\n", msg.c_str());
      EXPECT_FALSE(test::error_of([&] { op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s); },
                                  Status::kTimeout)
                       .empty());
    }
  });
}

// The pushed cluster reduction's landing wait (M <= 8) when it gives up: rank 0's CTAs of cluster
// rank 1 push none of their partials (the hook), so their cluster peers' landing waits give up after
// 40 s. Those CTAs have no rows and send no lines, so rank 1's waits for them end after its timeout
// (50 s) naming rank 0, and both ranks' check() raise: rank 0 naming the landing wait, rank 1 the
// peer. About 50 s.
// Before the fix, rank 0 sent what had landed and rank 1 summed it with a clean check().
TEST(EmulatedGemmAllReduce, DecodeFusedLandingWaitThatGaveUpSendsNothing) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 1024, k = 4096, m = 4;
  // The ranks' bound (device and host waits) outlasts the 40 s landing bound, so rank 1's waits for
  // the lines that never come end after rank 0's landing waits did, and both meet at the barrier.
  bench::EmulatedWorld ew(2, 0, 50.0);
  ew.run([&](comm::Group& g) {
    const GemmProblem p{.m = m, .n = n, .k = k, .mode = ScaleMode::kBF16, .out_dtype = DType::kBF16};
    int sms = 0;
    WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g.device()));
    const int split = detail::gemv_all_reduce_config(p, sms, g.ranks_per_device()).split;
    ASSERT_GE(split, 2) << "no cluster peer to withhold a push";
    fused::GemmAllReduceHooks h;
    if (g.rank() == 0) h.skip_gemv_push_rank = 1;
    auto op = make_op(g, bf16_case(), Mode::kDecodeFused, n, k, m, h);
    test::ArOneHot oh(m, n, k, g.rank());
    oh.set_a(1, m);
    Stream st;
    g.barrier();
    op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 150, "the call whose landing wait gives up");
    g.barrier();
    const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
    if (g.rank() == 0)
      EXPECT_NE(msg.find("gemv landed partials"), std::string::npos) << msg;
    else
      test::expect_first_call_timeout_names_everything(msg, 1, 0);
    std::printf("  split %d, rank %d: %s\n", split, g.rank(), msg.substr(0, 240).c_str());
  });
}

// Ranks that call with m = 5 and 6: every line carries M x N x 2 in its second flag, so both ranks
// find the other's count (kMismatch naming both), not a misread or a timeout.
TEST(EmulatedGemmAllReduce, DecodeFusedRanksThatDisagreeOnMAreAMismatchOnEveryRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m_max = 32;
  bench::EmulatedWorld ew(2, 0, 2.0);
  ew.run([&](comm::Group& g) {
    auto op = make_op(g, bf16_case(), Mode::kDecodeFused, n, k, m_max);
    const int64_t m = 5 + g.rank();
    test::ArOneHot oh(m_max, n, k, g.rank());
    oh.set_a(3, m);
    Stream st;
    g.barrier();
    op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    g.barrier();
    comm::sync_stream_bounded(st.s, 20, "the call of disagreeing m");
    const std::string msg = test::error_of([&] { op->check(); }, Status::kMismatch);
    EXPECT_NE(msg.find("moves " + std::to_string(m * n * 2) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("moves " + std::to_string((11 - m) * n * 2)), std::string::npos) << "the peer's count: " << msg;
    if (g.rank() == 0) std::printf("  decode-fused: %s\n", msg.c_str());
    g.barrier();
  });
}

// Randomised soak: decode-fused (bf16 and ptpc) interleaved with decode, M random in 1..32 (16
// variants, the same sequence on every rank), a late rank now and then, each output NaN-poisoned
// before its call and checked on the device against its closed form after it. W = 2 at a model
// layer (N 7168, K_r 2048: 56 bands, one wave beside the peer's) and W = 4 at N 2048, decode-fused
// only. Two limits of ranks sharing one GPU, both seen at W = 4 on the device (a rank's wait gave
// up after 20 s; none of it can happen with a GPU per rank, where the multi-GPU soak interleaves
// every mode call by call):
//  - mode decode behind a late rank: the peers' LL kernels wait on the SMs for its lines, and the
//    late rank's GEMV clusters may find no GPC with room until those waits give up. So at W = 4 the
//    decode op is left out (the W = 2 run keeps it);
//  - two ops' kernels a call apart (other cluster shapes) need not fit together where each op's one
//    wave does. So the ops take turns in runs of kRun back-to-back calls, each run drained (bounded
//    sync, then every op's check(), which names a wait that gave up) before the next op's.
TEST(EmulatedGemmAllReduce, DecodeFusedRandomisedSoak) {
  WEAVE_REQUIRE_GPUS(1);
  struct Run {
    int world;
    int64_t n;
    int calls;
    bool with_decode;  // the decode op among the ops (above: not at W = 4)
  };
  long long total = 0;
  for (const Run run : {Run{2, 7168, 9000, true}, Run{4, 2048, 2500, false}}) {
    SCOPED_TRACE("W" + std::to_string(run.world));
    const int64_t n = run.n, k = 2048, m_max = 32;
    bench::EmulatedWorld ew(run.world, 0, 20);
    ew.run([&](comm::Group& g) {
      const int world = g.world_size(), dev = g.device();
      std::vector<std::unique_ptr<GemmAllReduce>> ops;
      ops.push_back(make_op(g, Traits::kQuants[0], Mode::kDecodeFused, n, k, m_max));
      ops.push_back(make_op(g, Traits::kQuants[1], Mode::kDecodeFused, n, k, m_max));
      if (run.with_decode) ops.push_back(make_op(g, Traits::kQuants[0], Mode::kDecode, n, k, m_max));
      ASSERT_EQ(ops[1]->config().quant, ScaleMode::kPtpc);
      test::ArOneHot oh(m_max, n, k, g.rank());
      const test::PtpcOneHot pt(g.rank(), m_max, n, k, [&](int64_t r, int64_t c) { return oh.b_value(r, c); });
      Stream st;
      bench::DeviceBuffer wrong(8);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      constexpr int kVariants = 16;
      std::mt19937_64 shared(4321 + world);  // the same sequence on every rank
      std::vector<bench::DeviceBuffer> a_var, a8_var;
      std::vector<std::unique_ptr<test::ArDeviceExpect>> want;
      std::vector<int64_t> var_m;
      for (int v = 0; v < kVariants; ++v) {
        const int64_t m = 1 + static_cast<int64_t>(shared() % m_max);
        var_m.push_back(m);
        const auto h = oh.host_a(6000 + v, m);
        a_var.emplace_back(m_max * k * 2);
        a_var.back().upload(h.data(), h.size() * 2);
        const auto h8 = test::PtpcOneHot::host_a(h);
        a8_var.emplace_back(m_max * k);
        a8_var.back().upload(h8.data(), h8.size());
        want.push_back(std::make_unique<test::ArDeviceExpect>(oh, 6000 + v, world, m, true));
      }
      std::vector<long long> per_op(ops.size(), 0);
      g.barrier();
      constexpr int kRun = 32;
      size_t o = 0;
      for (int i = 0; i < run.calls; ++i) {
        const int v = static_cast<int>(shared() % kVariants);
        if (i % kRun == 0) {  // the next op's run, once every rank's calls of the last have ended
          comm::sync_stream_bounded(st.s, 60, "soak run");
          for (auto& each : ops) each->check();  // a wait that gave up names itself here, not as a barrier timeout
          g.barrier();
          o = shared() % ops.size();
        }
        GemmAllReduce& op = *ops[o];
        if (g.rank() == static_cast<int>(shared() % world) && i % 7 == 0) bench::spin_delay(20'000, st.s);
        const int64_t m = var_m[v];
        const bool fp8 = op.config().quant == ScaleMode::kPtpc;
        WEAVE_CHECK_CUDA(cudaMemsetAsync(op.output(m).data, 0xFF, bytes_of(m, n), st.s));
        if (fp8)
          op.run(m, TensorView::matrix(a8_var[v].get(), DType::kE4M3, m, k, dev), pt.b_view(dev), pt.scales(m, dev), st.s);
        else
          op.run(m, TensorView::matrix(a_var[v].get(), DType::kBF16, m, k, dev), oh.b_view(dev), {}, st.s);
        ++per_op[o];
        EXPECT_EQ(op.last_mode(), op.config().mode);
        g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
        want[v]->count_wrong(op.output(m).data, fp8, wrong.as<unsigned long long>(), 32, st.s);
      }
      comm::sync_stream_bounded(st.s, 60, "soak");
      for (auto& op : ops) op->check();
      unsigned long long bad = 0;
      wrong.download(&bad, 8);
      EXPECT_EQ(bad, 0ull) << "rank " << g.rank() << " W" << world;
      for (size_t o = 0; o < ops.size(); ++o) EXPECT_GT(per_op[o], 0) << ops[o]->describe() << " never called";
      if (g.rank() == 0) total += run.calls;
      g.barrier();
    });
  }
  std::printf("  decode-fused soak: %lld collective calls\n", total);
  EXPECT_GE(total, 10'000);
}
