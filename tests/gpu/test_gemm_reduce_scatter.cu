// GemmReduceScatter in the emulated world (testing/emulated_world.hpp: W ranks as threads on one
// GPU, the same op code and kernels as over NCCL). The op is GemmAllReduce's Impl without the
// gather leg (fused/reduce_scatter/impl.hpp), so its operands, closed forms and references are
// GemmAllReduce's (fused_op_traits_all_reduce.hpp), checked on this rank's band only: rows
// [r m / W, (r + 1) m / W). Here: self-tests in every mode, quant and world (and gemm-only failing
// them); fused == split-lsa == split-ce == GemmAllReduce's rows, bitwise, within the summed
// reference; the negative controls of the partial wait, the chunk election and the end-of-call wait
// (the staging's credit); back-to-back calls of changing m with a late rank; graph replays across
// the epoch wrap; a peer that never arrives; ranks that disagree on m; a randomised soak; bad
// inputs. Over NCCL on 2+ GPUs: tests/multi_gpu/test_fused_ops.cu.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "fused/reduce_scatter/impl.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/reduce_reference.hpp"
#include "testing/spin_delay.hpp"

using namespace weave;
using test::fits_queues;
using test::mode_name;
using test::Stream;
using ArTraits = test::AllReduceTraits;  // quants, one-hot operands and references of the all-reduce
using Mode = GemmReduceScatterMode;

namespace {

GemmReduceScatterConfig rs_config(const test::QuantCase& q, Mode mode, int64_t n, int64_t k, int64_t m_max) {
  return test::fused_config<GemmReduceScatterConfig, Mode>(q, mode, n, k, m_max);
}

std::unique_ptr<GemmReduceScatter> make(comm::Group& g, const GemmReduceScatterConfig& c,
                                        const fused::GemmAllReduceHooks& h = {}) {
  return GemmReduceScatter::Impl::create(g, c, h);
}

// Elements of rank r's band (rows [r m / W, (r + 1) m / W) of the one-hot all-reduce) that differ
// from the closed form; `band` is the op's output, bf16 bits.
int64_t band_wrong(const test::ArOneHot& oh, const std::vector<uint16_t>& band, uint64_t seed, int world, int64_t m,
                   int r) {
  const std::vector<uint16_t> want = oh.expected(seed, world, m);
  const int64_t rows = m / world, n = oh.n;
  int64_t wrong = 0;
  for (int64_t i = 0; i < rows * n; ++i) wrong += band[i] != want[(r * rows) * n + i];
  return wrong;
}

std::vector<uint16_t> download(const TensorView& v) {
  std::vector<uint16_t> h(static_cast<size_t>(v.rows() * v.cols()));
  WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), v.data, h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}

// The M a mode can run at world W (fused: multiples of W x 128), from a list of wishes.
std::vector<int64_t> ms_for(Mode mode, int world, int64_t m_max) {
  std::vector<int64_t> ms;
  if (mode == Mode::kFused) {
    const int64_t unit = int64_t(world) * 128;
    for (int64_t m : {unit, m_max / unit * unit})
      if (m >= unit && (ms.empty() || ms.back() != m)) ms.push_back(m);
  } else {
    for (int64_t m : {int64_t(world), 33 * int64_t(world), int64_t(1000 / world * world), m_max / world * world})
      if (ms.empty() || ms.back() != m) ms.push_back(m);
  }
  return ms;
}

// Rank r's band of the op's output (bf16 bytes) against the summed reference of every rank's
// product (per source, fp64-accumulated on CUDA cores, not weave's kernel): the per-element bound
// and the relative-L2 bound.
void expect_band_within_reference(const std::vector<uint8_t>& band, const std::vector<bench::DeviceOperand>& as,
                                  const std::vector<bench::DeviceOperand>& bs, const test::QuantCase& q, int64_t m,
                                  int64_t n, int64_t k, int world, int r, int dev, cudaStream_t st) {
  const int64_t rows = m / world;
  const size_t bytes = static_cast<size_t>(rows * n) * 2;
  const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw,
                      .out_dtype = DType::kBF16};
  test::SummedReference want(as, bs, p, st);
  bench::DeviceBuffer got(bytes);
  got.upload(band.data(), bytes);
  const size_t row0 = static_cast<size_t>(r * rows * n);
  const ref::Comparison cmp =
      bench::gpu_compare(TensorView::matrix(got.get(), DType::kBF16, rows, n, dev), want.sum.as<float>() + row0,
                         bench::reduced_gemm_tolerance(q.quant, world), st, want.mag.as<float>() + row0);
  EXPECT_EQ(cmp.wrong, 0) << "m " << m << ": " << cmp.wrong << " of " << cmp.count << " beyond the bound";
  EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m;
}

}  // namespace

// Every mode x quant at W = 2 and 4 (W = 3 and 8: bf16 and ptpc), M of one row per rank, a
// partial tile, several bands, the capacity: every element of every band the closed-form sum.
// gemm-only (nothing moves) fails, each wrong element attributed to the peer whose term is missing.
TEST(EmulatedGemmReduceScatter, SelfTestEveryModeQuantAndWorld) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 384, k = 256, m_max = 4104;  // 4104: a multiple of 2, 3, 4 and 8
  int passed = 0;
  for (int world : {2, 4, 3, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const test::QuantCase& q : ArTraits::kQuants) {
      if ((world == 3 || world == 8) && q.quant != ScaleMode::kBF16 && q.quant != ScaleMode::kPtpc) continue;
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      for (Mode mode : {Mode::kSplitLsa, Mode::kSplitCe, Mode::kFused, Mode::kAuto}) {
        if (!fits_queues(mode, world)) {
          test::print_not_run(mode_name(mode) + " " + q.name, world, test::not_run_reason(mode, world));
          continue;
        }
        ew.run([&](comm::Group& g) {
          auto op = make(g, rs_config(q, mode, n, k, m_max));
          for (int64_t m : ms_for(mode, world, m_max)) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << mode_name(mode) << " m " << m << ": " << rep.detail;
            if (mode != Mode::kAuto) EXPECT_EQ(op->last_mode(), mode);
            if (g.rank() == 0 && rep.ok) ++passed;
          }
        });
      }
      ew.run([&](comm::Group& g) {  // the negative control: nothing moves
        auto op = make(g, rs_config(q, Mode::kGemmOnly, n, k, m_max));
        const SelfTestReport rep = op->self_test(8 * world);
        EXPECT_FALSE(rep.ok) << "gemm-only moves nothing and must fail: " << rep.detail;
        // Attribution names one missing source: at W = 2 the only peer. (At W > 2 every element
        // misses W - 1 terms, which the self-test leaves unattributed, or, where the peers' terms
        // happen to sum to the own one, pins on the own rank.)
        if (world == 2) {
          EXPECT_GT(rep.wrong_from_rank[1 - g.rank()], 0) << "the missing term is the peer's: " << rep.detail;
          EXPECT_EQ(rep.wrong_from_rank[g.rank()], 0) << "the own term is computed locally: " << rep.detail;
        }
      });
    }
  }
  std::printf("  reduce-scatter self-tests passed: %d (rank 0 counted)\n", passed);
}

// Random operands, W = 2 and 4, every quant: fused, split-lsa and split-ce (W = 2) give the same
// bytes, and they are GemmAllReduce fused's rows of this rank's band (the same sums in the same
// order); within the per-element bound of the summed reference (per source, fp64-accumulated on
// CUDA cores, not weave's kernel) and the relative-L2 bound. M: fused's (multiples of W x 128) and
// split-only ones (3 W, a multiple of W that is no tile multiple).
TEST(EmulatedGemmReduceScatter, FusedEqualsSplitAndTheAllReducesBandBitwise) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 512, m_max = 4096;
  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const test::QuantCase& q : ArTraits::kQuants) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto fused = make(g, rs_config(q, Mode::kFused, n, k, m_max));
        auto lsa = make(g, rs_config(q, Mode::kSplitLsa, n, k, m_max));
        std::unique_ptr<GemmReduceScatter> ce;
        if (fits_queues(Mode::kSplitCe, world)) ce = make(g, rs_config(q, Mode::kSplitCe, n, k, m_max));
        auto ar = GemmAllReduce::Impl::create(g, ArTraits::config(q, GemmAllReduceMode::kFused, n, k, m_max));
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(77 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {int64_t(128) * world, int64_t(3) * world, int64_t(1000 / world * world), m_max}) {
          const bool fused_runs = fused::grs_fused_fits(m, world);
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 900, m, k, q.quant, dev);
          test::LayoutScales held;
          const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
          const int64_t rows = m / world;
          const size_t bytes = static_cast<size_t>(rows * n) * 2;
          std::vector<std::vector<uint8_t>> outs;
          std::vector<std::string> names;
          for (GemmReduceScatter* op : {fused_runs ? fused.get() : nullptr, lsa.get(), ce.get()}) {
            if (!op) continue;
            outs.push_back(test::poisoned_call(g, *op, m, as[r].view, bs[r].view, sc, bytes, st.s));
            names.push_back(mode_name(op->config().mode));
          }
          for (size_t i = 1; i < outs.size(); ++i)
            EXPECT_EQ(outs[i], outs[0]) << "m " << m << ": " << names[i] << " differs from " << names[0];
          const std::vector<uint8_t> all = test::poisoned_call(g, *ar, m, as[r].view, bs[r].view, sc,
                                                               static_cast<size_t>(m * n) * 2, st.s);
          EXPECT_EQ(0, std::memcmp(all.data() + static_cast<size_t>(r * rows * n) * 2, outs[0].data(), bytes))
              << "m " << m << ": " << names[0] << " differs from GemmAllReduce fused's band";
          expect_band_within_reference(outs[0], as, bs, q, m, n, k, world, r, dev, st.s);
        }
      });
    }
  }
}

// Every tile the op may run (GemmAllReduce's candidates: the same fused kernels, here with
// no_gather), forced on fused and split-lsa: the same bytes, within the summed reference. W = 2,
// every quant; M 512 and 1024 are whole bands at every tile height; N 672 leaves a partial column
// tile at every width (64, 128, 160, 256).
TEST(EmulatedGemmReduceScatter, EveryBuiltTileFusedEqualsSplit) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 672, k = 1024, m_max = 1024;
  const int world = 2;
  bench::EmulatedWorld ew(world, 0, 20);
  int tiles = 0;
  for (const test::QuantCase& q : ArTraits::kQuants) {
    const auto cands = fused::gar_tile_candidates(fused::grs_ar_config(rs_config(q, Mode::kFused, n, k, m_max)));
    EXPECT_GE(cands.size(), q.quant == ScaleMode::kMxfp8 ? 1u : 4u) << q.name << ": the tiles built";
    for (const auto& t : cands) {
      SCOPED_TRACE(std::string(q.name) + " tile " + std::to_string(t.block_m) + "x" + std::to_string(t.block_n));
      ++tiles;
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        fused::GemmAllReduceHooks h;
        h.tile = {t.block_m, t.block_n};
        auto fused = make(g, rs_config(q, Mode::kFused, n, k, m_max), h);
        auto lsa = make(g, rs_config(q, Mode::kSplitLsa, n, k, m_max), h);
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(301 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {int64_t(512), m_max}) {
          ASSERT_TRUE(fused::grs_fused_fits(m, world) && m % (int64_t(world) * t.block_m) == 0) << "m " << m;
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 700 + m, m, k, q.quant, dev);
          test::LayoutScales held;
          const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
          const int64_t rows = m / world;
          const size_t bytes = static_cast<size_t>(rows * n) * 2;
          const std::vector<uint8_t> got_fused = test::poisoned_call(g, *fused, m, as[r].view, bs[r].view, sc, bytes, st.s);
          const std::vector<uint8_t> got_lsa = test::poisoned_call(g, *lsa, m, as[r].view, bs[r].view, sc, bytes, st.s);
          EXPECT_EQ(got_fused, got_lsa) << "m " << m << ": fused differs from split-lsa";
          expect_band_within_reference(got_fused, as, bs, q, m, n, k, world, r, dev, st.s);
        }
      });
    }
  }
  std::printf("  GemmReduceScatter W2: %d quant x tile cases (fused == split-lsa, reference)\n", tiles);
}

// The fused protocol's negative controls (W = 2, one chunk per band of 256 tiles, every tile's
// stores 2 ms late on the slow rank):
//  - partial wait skipped, or the chunk election off (a chunk's flag after its first tile), with
//    rank 1 slow: rank 0 sums its band before rank 1's partials landed;
//  - the end-of-call wait skipped (the staging's credit), with rank 0 slow and a second call of
//    other values right after: rank 1 ends call 1 before rank 0 summed its band and stores call 2's
//    partials into rank 0's staging while rank 0 still reads it.
// With every mechanism on, 0 wrong; each control must corrupt rank 0's band of call 1.
TEST(EmulatedGemmReduceScatter, SkippingAWaitOrTheElectionIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m = 16384;
  enum Control { kNone, kPartialWait, kElection, kEndWaitNone, kEndWait };
  const char* names[] = {"every mechanism on (rank 1 slow)", "partial wait SKIPPED", "chunk election OFF",
                         "every mechanism on (rank 0 slow, two calls)", "end-of-call wait SKIPPED"};
  for (Control ctl : {kNone, kPartialWait, kElection, kEndWaitNone, kEndWait}) {
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong0 = -1;
    ew.run([&](comm::Group& g) {
      auto cfg = rs_config(ArTraits::kQuants[0], Mode::kFused, n, k, m);
      cfg.chunks = 1;
      fused::GemmAllReduceHooks hooks;
      hooks.skip_partial_wait = ctl == kPartialWait;
      hooks.publish_every_tile = ctl == kElection;
      hooks.skip_arrival_wait = ctl == kEndWait;
      const bool two_calls = ctl >= kEndWaitNone;
      if (g.rank() == (two_calls ? 0 : 1)) hooks.delay_stores_ns = 2'000'000;
      auto op = make(g, cfg, hooks);
      test::ArOneHot oh(m, n, k, g.rank());
      bench::DeviceBuffer a2(m * k * 2), snapshot(m / 2 * n * 2);
      const auto h2 = oh.host_a(6, m);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m);
      Stream st;
      WEAVE_CHECK_CUDA(cudaMemsetAsync(op->output(m).data, 0xFF, snapshot.bytes(), st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
      WEAVE_CHECK_CUDA(
          cudaMemcpyAsync(snapshot.get(), op->output(m).data, snapshot.bytes(), cudaMemcpyDeviceToDevice, st.s));
      if (two_calls) {
        op->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
        g.barrier();
      }
      comm::sync_stream_bounded(st.s, 30, "the controlled calls");
      std::vector<uint16_t> out(m / 2 * n);
      snapshot.download(out.data(), snapshot.bytes());
      if (g.rank() == 0) wrong0 = band_wrong(oh, out, 5, 2, m, 0);
      if (two_calls && ctl == kEndWaitNone)  // call 2 is right too
        EXPECT_EQ(band_wrong(oh, download(op->output(m)), 6, 2, m, g.rank()), 0) << "rank " << g.rank() << " call 2";
      g.barrier();
    });
    if (ctl == kNone || ctl == kEndWaitNone) EXPECT_EQ(wrong0, 0) << names[ctl];
    else EXPECT_GT(wrong0, 0) << names[ctl] << " must corrupt rank 0's band";
    std::printf("  %s: rank 0 saw %lld wrong elements of %lld\n", names[ctl], static_cast<long long>(wrong0),
                static_cast<long long>(m / 2 * n));
  }
}

// Back-to-back calls of changing m (fused's and split-only ones), a different rank 2 ms late before
// each, W = 4, without host syncs: each call's band snapshot after it (stream-ordered) is right.
TEST(EmulatedGemmReduceScatter, BackToBackCallsOfChangingMWithALateRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 4;
  const int64_t n = 512, k = 256, m_max = 4096;
  for (Mode mode : {Mode::kFused, Mode::kSplitLsa, Mode::kAuto}) {
    const std::vector<int64_t> ms = mode == Mode::kFused ? std::vector<int64_t>{4096, 512, 1024, 3584, 512, 2048}
                                                         : std::vector<int64_t>{4096, 4, 1000, 512, 36, 2048, 1028};
    bench::EmulatedWorld ew(world, 0, 20);
    SCOPED_TRACE(mode_name(mode));
    ew.run([&](comm::Group& g) {
      auto op = make(g, rs_config(ArTraits::kQuants[0], mode, n, k, m_max));
      test::ArOneHot oh(m_max, n, k, g.rank());
      Stream st;
      std::vector<bench::DeviceBuffer> as, snaps;
      for (size_t c = 0; c < ms.size(); ++c) {
        const auto h = oh.host_a(100 + c, ms[c]);
        as.emplace_back(m_max * k * 2);
        as.back().upload(h.data(), h.size() * 2);
        snaps.emplace_back(ms[c] / world * n * 2);
      }
      g.barrier();
      for (size_t c = 0; c < ms.size(); ++c) {
        if (g.rank() == static_cast<int>(c % world)) bench::spin_delay(2'000'000, st.s);  // a late rank
        op->run(ms[c], TensorView::matrix(as[c].get(), DType::kBF16, ms[c], k, g.device()), oh.b_view(g.device()), {},
                st.s);
        g.barrier();  // lockstep enqueue
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snaps[c].get(), op->output(ms[c]).data, snaps[c].bytes(),
                                         cudaMemcpyDeviceToDevice, st.s));
      }
      comm::sync_stream_bounded(st.s, 20, "back-to-back calls");
      op->check();
      for (size_t c = 0; c < ms.size(); ++c) {
        std::vector<uint16_t> h(snaps[c].bytes() / 2);
        snaps[c].download(h.data(), snaps[c].bytes());
        EXPECT_EQ(band_wrong(oh, h, 100 + c, world, ms[c], g.rank()), 0)
            << "rank " << g.rank() << " call " << c << " (m " << ms[c] << ")";
      }
      g.barrier();
    });
  }
}

// Graph replays: each rank captures, per variant, [A variant copy -> output NaN poison -> run ->
// device count of wrong band elements] for two M on one op, then replays them 600 times in an
// interleaved order from 40 calls before the 2^32 epoch wrap; 0 wrong, every replay counted.
TEST(EmulatedGemmReduceScatter, GraphReplaysAcrossTheEpochWrap) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  const int64_t n = 256, k = 256, m_max = 1024;
  const int64_t ms[2] = {1024, 256};
  for (Mode mode : {Mode::kFused, Mode::kSplitLsa}) {
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      fused::GemmAllReduceHooks hooks;
      hooks.initial_epoch = 0xFFFFFFFFu - 40;
      auto op = make(g, rs_config(ArTraits::kQuants[0], mode, n, k, m_max), hooks);
      test::ArOneHot oh(m_max, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer wrong(8);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      std::vector<bench::DeviceBuffer> variants;
      std::vector<std::unique_ptr<test::ArDeviceExpect>> want;
      for (int v = 0; v < 2; ++v) {
        const auto h = oh.host_a(40 + v, ms[v]);
        variants.emplace_back(m_max * k * 2);
        variants.back().upload(h.data(), h.size() * 2);
        want.push_back(std::make_unique<test::ArDeviceExpect>(oh, 40 + v, world, ms[v], false));
      }
      // Set-up, captures and instantiations apart (each ended by a barrier): a peer's allocation or
      // synchronous copy during this rank's capture can invalidate it (the typed graph test says more).
      g.barrier();
      std::vector<cudaGraph_t> graphs;
      for (int v = 0; v < 2; ++v) {
        const int64_t m = ms[v], rows = m / world;
        const TensorView out = op->output(m);
        cudaGraph_t graph;
        WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(oh.a.get(), variants[v].get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(out.data, 0xFF, rows * n * 2, st.s));
        op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
        test::ar_count_diff(out.data, static_cast<const char*>(want[v]->want.get()) + g.rank() * rows * n * 2,
                            rows * n, wrong.as<unsigned long long>(), 64, st.s);
        WEAVE_CHECK_CUDA(cudaStreamEndCapture(st.s, &graph));
        graphs.push_back(graph);
      }
      g.barrier();
      const std::vector<int> launched = test::replay_graphs_in_lockstep(g, graphs, 600, 7, st.s);
      EXPECT_GT(launched[0], 0);
      EXPECT_GT(launched[1], 0);
      op->check();
      unsigned long long bad = 0;
      wrong.download(&bad, 8);
      EXPECT_EQ(bad, 0u) << mode_name(mode) << ", rank " << g.rank();
      if (g.rank() == 0)
        std::printf("  %s: 600 replays (%d and %d of the two M), %llu wrong\n", mode_name(mode).c_str(), launched[0],
                    launched[1], bad);
      g.barrier();
    });
  }
}

// A peer that never arrives: rank 0's call times out (1 s) naming rank, peer, flag, expected and
// seen, and the op refuses further calls. Ranks that call with m = 1024 and 2048: kMismatch on
// every rank naming both m (the fused kernel's call key), not misplaced rows.
TEST(EmulatedGemmReduceScatter, APeerThatNeverArrivesAndRanksThatDisagreeOnM) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 256, m_max = 2048;
  for (Mode mode : {Mode::kFused, Mode::kSplitLsa}) {
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(2, 0, 1.0);
    ew.run([&](comm::Group& g) {
      auto op = make(g, rs_config(ArTraits::kQuants[0], mode, n, k, m_max));
      test::ArOneHot oh(m_max, n, k, g.rank());
      oh.set_a(1, m_max);
      g.barrier();
      if (g.rank() == 0) {
        Stream st;
        op->run(m_max, oh.a_view(m_max, g.device()), oh.b_view(g.device()), {}, st.s);
        comm::sync_stream_bounded(st.s, 10, "the call whose peer never arrives");
        const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
        test::expect_first_call_timeout_names_everything(msg, 0, 1);
        std::printf("  %s: %s\n", mode_name(mode).c_str(), msg.c_str());
        EXPECT_FALSE(test::error_of([&] { op->run(m_max, oh.a_view(m_max, g.device()), oh.b_view(g.device()), {}, st.s); },
                                    Status::kTimeout)
                         .empty());
      }
    });
  }
  bench::EmulatedWorld ew(2, 0, 2.0);
  ew.run([&](comm::Group& g) {
    auto op = make(g, rs_config(ArTraits::kQuants[0], Mode::kFused, n, k, m_max));
    const int64_t m = 1024 * (1 + g.rank());
    test::ArOneHot oh(m_max, n, k, g.rank());
    oh.set_a(3, m);
    Stream st;
    g.barrier();
    op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    g.barrier();
    comm::sync_stream_bounded(st.s, 20, "the call of disagreeing m");
    const std::string msg = test::error_of([&] { op->check(); }, Status::kMismatch);
    EXPECT_NE(msg.find("m = 1024"), std::string::npos) << msg;
    EXPECT_NE(msg.find("m = 2048"), std::string::npos) << msg;
    if (g.rank() == 0) std::printf("  fused, m 1024 vs 2048: %s\n", msg.c_str());
    g.barrier();
  });
}

// A randomised soak at a model layer's width (N 7168, K_r 2048, TP of a 7168-wide model): 10,000
// calls at W = 2 over fused, split-lsa and auto ops picked at random per call (the same sequence
// on every rank), M random from 16 variants (multiples of W, some of W x 128), a late rank now and
// then; each band NaN-poisoned before its call and counted on the device after it.
TEST(EmulatedGemmReduceScatter, RandomisedSoak) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  const int64_t n = 7168, k = 2048, m_max = 1024;
  const int calls = 10000;
  bench::EmulatedWorld ew(world, 0, 20);
  unsigned long long total_wrong = 0;
  long long made = 0;
  ew.run([&](comm::Group& g) {
    std::vector<std::unique_ptr<GemmReduceScatter>> ops;
    for (Mode mode : {Mode::kFused, Mode::kSplitLsa, Mode::kAuto})
      ops.push_back(make(g, rs_config(ArTraits::kQuants[0], mode, n, k, m_max)));
    test::ArOneHot oh(m_max, n, k, g.rank());
    Stream st;
    bench::DeviceBuffer wrong(8);
    WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
    constexpr int kVariants = 16;
    std::mt19937_64 shared(2026);
    std::vector<int64_t> var_m;
    std::vector<bench::DeviceBuffer> a_var;
    std::vector<std::unique_ptr<test::ArDeviceExpect>> want;
    for (int v = 0; v < kVariants; ++v) {
      const int64_t m = v % 2 == 0 ? int64_t(256) * (1 + shared() % 4) : 2 * (1 + static_cast<int64_t>(shared() % 512));
      var_m.push_back(m);
      const auto h = oh.host_a(500 + v, m);
      a_var.emplace_back(m_max * k * 2);
      a_var.back().upload(h.data(), h.size() * 2);
      want.push_back(std::make_unique<test::ArDeviceExpect>(oh, 500 + v, world, m, false));
    }
    long long mine = 0;
    g.barrier();  // every rank set up (its synchronous uploads done) before any call waits for it
    for (int c = 0; c < calls; ++c) {
      const int v = static_cast<int>(shared() % kVariants);
      int o = static_cast<int>(shared() % ops.size());
      const int64_t m = var_m[v], rows = m / world;
      if (o == 0 && !fused::grs_fused_fits(m, world)) o = 1;  // explicit fused runs whole-tile bands only
      if (shared() % 64 == 0 && g.rank() == static_cast<int>(shared() % world)) bench::spin_delay(500'000, st.s);
      GemmReduceScatter& op = *ops[static_cast<size_t>(o)];
      const TensorView out = op.output(m);
      WEAVE_CHECK_CUDA(cudaMemsetAsync(out.data, 0xFF, rows * n * 2, st.s));
      op.run(m, TensorView::matrix(a_var[v].get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue
      test::ar_count_diff(out.data, static_cast<const char*>(want[v]->want.get()) + g.rank() * rows * n * 2, rows * n,
                          wrong.as<unsigned long long>(), 64, st.s);
      ++mine;
      if (c % 500 == 499) comm::sync_stream_bounded(st.s, 60, "soak batch");
    }
    comm::sync_stream_bounded(st.s, 60, "the soak");
    for (auto& op : ops) op->check();
    unsigned long long bad = 0;
    wrong.download(&bad, 8);
    EXPECT_EQ(bad, 0u) << "rank " << g.rank();
    if (g.rank() == 0) {
      total_wrong = bad;
      made = mine;
    }
    g.barrier();
  });
  std::printf("  soak: %lld calls per rank at N %lld, K_r %lld, %llu wrong elements\n", made,
              static_cast<long long>(n), static_cast<long long>(k), total_wrong);
}

// Bad inputs are clear errors before any GPU work: m not a multiple of the world, fused at an m
// whose bands are not whole tiles, a caller's out of the all-reduce's shape, a config below the
// world's rules; and the caller's out, when right, is the window's view copied.
TEST(EmulatedGemmReduceScatter, BadInputsAreClearErrorsAndTheCallersOutIsTheView) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 1024;
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    const int dev = g.device();
    auto op = make(g, rs_config(ArTraits::kQuants[0], Mode::kFused, n, k, m_max));
    auto lsa = make(g, rs_config(ArTraits::kQuants[0], Mode::kSplitLsa, n, k, m_max));
    test::ArOneHot oh(m_max, n, k, g.rank());
    Stream st;
    std::string msg = test::error_of([&] { lsa->run(7, oh.a_view(7, dev), oh.b_view(dev), {}, st.s); },
                                     Status::kInvalidArgument);
    EXPECT_NE(msg.find("multiple of the world (2)"), std::string::npos) << msg;
    msg = test::error_of([&] { op->run(200, oh.a_view(200, dev), oh.b_view(dev), {}, st.s); }, Status::kInvalidArgument);
    EXPECT_NE(msg.find("multiple of world x 128 = 256"), std::string::npos) << msg;
    test::CallerOut wrong_shape(DType::kBF16, 256, n, n, dev);  // the all-reduce's rows, not the band's
    msg = test::error_of([&] { lsa->run(256, oh.a_view(256, dev), oh.b_view(dev), {}, wrong_shape.view, st.s); },
                         Status::kInvalidArgument);
    EXPECT_NE(msg.find("out"), std::string::npos) << msg;
    auto small = rs_config(ArTraits::kQuants[0], Mode::kFused, n, k, 200);
    EXPECT_NE(GemmReduceScatter::validate(small, 2).find("m_max >= world x 128"), std::string::npos);
    msg = test::error_of([&] { make(g, small); }, Status::kInvalidArgument);
    EXPECT_NE(msg.find("m_max"), std::string::npos) << msg;
    // The right out: the band, copied after the call (a column slice of a wider buffer).
    for (GemmReduceScatter* o : {op.get(), lsa.get()}) {
      test::CallerOut out(DType::kBF16, 512, n, n + 64, dev);
      out.poison(st.s);
      oh.set_a(9, 1024);
      g.barrier();
      o->run(1024, oh.a_view(1024, dev), oh.b_view(dev), {}, out.view, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "the call with out");
      o->check();
      test::expect_out_is_the_window_view(*o, 1024, out, mode_name(o->config().mode));
      const std::vector<uint8_t> rows = out.rows();
      std::vector<uint16_t> band(rows.size() / 2);
      std::memcpy(band.data(), rows.data(), rows.size());
      EXPECT_EQ(band_wrong(oh, band, 9, 2, 1024, g.rank()), 0) << mode_name(o->config().mode);
      g.barrier();
    }
  });
}
