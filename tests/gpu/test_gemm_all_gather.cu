// GemmAllGather in the emulated world (testing/emulated_world.hpp: W ranks as threads on one
// GPU, the same op code and kernels as over NCCL), what only this operator has: self_test naming a
// rank whose B differs, mxfp8's bf16 route decided per rank before any tile leaves (and its
// guards' negative control), and the negative controls of the arrival wait and the credit. What
// every fused op has (self-tests, fused bitwise equal to split and the reference per source rank,
// a slow rank, back-to-back calls of changing M, graph replays across the epoch wrap, a peer that
// never arrives, disagreeing m, the soak, calibration, the caller's out, bad inputs) is the typed
// suite's, EmulatedFusedOp/GemmAllGather.* (test_fused_ops_typed*.cu). The same op runs over NCCL
// windows on 2+ GPUs in the runs-on-2-GPUs issue.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/all_gather/plan.hpp"
#include "fused_op_traits_all_gather.hpp"
#include "fused_test_support.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/spin_delay.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"

using namespace weave;
using test::fits_queues;
using test::mode_name;
using test::Stream;
using Traits = test::AllGatherTraits;

// B must be identical on every rank, and nothing in the protocol notices a rank whose B differs:
// self_test(m, b, scale_b) fingerprints every rank's B (and scales) and fails on every rank,
// naming the rank outside the majority (W = 4), or reporting every fingerprint (W = 2: no
// majority). Control: the same B everywhere passes. One flipped bit of B (bf16) and one changed
// scale byte of scale_b (blockscale, values identical) are each caught.
TEST(EmulatedGemmAllGather, SelfTestNamesARankWhoseBDiffers) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 256;
  const test::QuantCase* cases[] = {&Traits::kQuants[0], &Traits::kQuants[3]};
  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 10);
    for (const test::QuantCase* q : cases)
      for (int odd : {-1, world - 1}) {  // -1: every rank the same B (the control)
        SCOPED_TRACE(std::string(q->name) + " W" + std::to_string(world) + " odd rank " + std::to_string(odd));
        ew.run([&](comm::Group& g) {
          auto op = GemmAllGather::Impl::create(g, Traits::config(*q, GemmAllGatherMode::kAuto, n, k, m_max));
          const bench::DeviceOperand b = bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(77, n, k), n, k, q->quant, ref::Operand::kB), g.device());
          if (g.rank() == odd) {
            // bf16: flip one bit of one value of B; blockscale: change one byte of one scale.
            const bool bf16 = q->quant == ScaleMode::kBF16;
            char* p = static_cast<char*>(bf16 ? b.view.data : b.scale_view.data) + (bf16 ? 37 : 5);
            char byte = 0;
            WEAVE_CHECK_CUDA(cudaMemcpy(&byte, p, 1, cudaMemcpyDeviceToHost));
            byte ^= 0x01;
            WEAVE_CHECK_CUDA(cudaMemcpy(p, &byte, 1, cudaMemcpyHostToDevice));
          }
          const SelfTestReport rep = op->self_test(100, b.view, b.scale_view);
          if (odd < 0) {
            EXPECT_TRUE(rep.ok) << rep.detail;
            EXPECT_NE(rep.detail.find("identical on every rank"), std::string::npos) << rep.detail;
            return;
          }
          EXPECT_FALSE(rep.ok) << rep.detail;
          const std::string want = world > 2 ? "rank(s) " + std::to_string(odd) + " differ" : "no majority";
          EXPECT_NE(rep.detail.find(want), std::string::npos) << rep.detail;
          if (g.rank() == 0) std::printf("  %s W%d: %s\n", q->name, world, rep.detail.substr(0, 160).c_str());
        });
      }
  }
}

// mxfp8's bf16 route in the fused operator (fused/mx_route.hpp): every rank converts and runs the
// bf16 kernel, except a rank whose A holds scales the conversion cannot carry exactly (bytes 5 on
// non-zero elements): its conversion sets the flag and its native kernel runs instead, decided on
// the GPU before any tile leaves. Per source: the rows of the odd rank are bitwise the native op's
// and the others' bitwise the route op's; fused equals split bitwise; every rank's output
// identical; every source within the GEMM tolerance of the reference.
TEST(EmulatedGemmAllGather, Mxfp8RouteIsEitherOrPerRankBeforeAnyTileLeaves) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1000;
  const test::QuantCase& q = Traits::kQuants[4];  // mxfp8 raw
  for (int world : {2, 4})
    for (int odd : {-1, world - 1}) {  // -1: every rank on the route
      SCOPED_TRACE("W" + std::to_string(world) + " odd rank " + std::to_string(odd));
      bench::EmulatedWorld ew(world, 0, 20);
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto with = [&](GemmAllGatherMode mode, MxRoute route) {
          auto c = Traits::config(q, mode, n, k, m_max);
          c.mx_route = route;
          return GemmAllGather::Impl::create(g, c);
        };
        auto fused = with(GemmAllGatherMode::kFusedLsa, MxRoute::kBf16);
        auto split = with(GemmAllGatherMode::kSplitLsa, MxRoute::kBf16);
        auto native = with(GemmAllGatherMode::kFusedLsa, MxRoute::kNative);
        const bench::DeviceOperand b = bench::upload_operand(
            bench::quantize_parallel(bench::random_operand(78, n, k), n, k, q.quant, ref::Operand::kB), dev);
        Stream st;
        for (int64_t m : {7, 1000}) {
          const auto as = test::mx_a_with_odd_rank(world, odd, m, k, 3000, dev);
          const GemmScales sc{as[r].scale_view, b.scale_view};
          const size_t row_bytes = static_cast<size_t>(m * n) * 2, bytes = world * row_bytes;
          std::vector<std::vector<uint8_t>> outs;
          for (GemmAllGather* op : {fused.get(), split.get(), native.get()})
            outs.push_back(test::poisoned_call(g, *op, m, as[r].view, b.view, sc, bytes, st.s));
          EXPECT_TRUE(GemmAllGather::Impl::of(*fused).last_mx_bf16_route);
          EXPECT_FALSE(GemmAllGather::Impl::of(*native).last_mx_bf16_route);
          EXPECT_EQ(outs[0], outs[1]) << "m " << m << ": fused differs from split on the same route";
          // Which kernel computed each source's rows: the odd rank's are the native op's bits.
          bench::DeviceBuffer refbuf(static_cast<size_t>(m * n) * 4), rows_buf(row_bytes);
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
          int differing_sources = 0;
          for (int s = 0; s < world; ++s) {
            const uint8_t* fr = outs[0].data() + s * row_bytes;
            const uint8_t* nr = outs[2].data() + s * row_bytes;
            const bool same_as_native = std::memcmp(fr, nr, row_bytes) == 0;
            if (s == odd) EXPECT_TRUE(same_as_native) << "m " << m << ": the odd rank's rows are not the native kernel's";
            else differing_sources += same_as_native ? 0 : 1;
            rows_buf.upload(fr, row_bytes);
            bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view},
                                      refbuf.as<float>(), st.s);
            const ref::Comparison cmp = bench::gpu_compare(TensorView::matrix(rows_buf.get(), q.out, m, n, dev),
                                                           refbuf.as<float>(), bench::gemm_tolerance(q.quant, q.out), st.s);
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " source " << s << ": " << cmp.wrong << " wrong, rel_l2 " << cmp.rel_l2;
            EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m << " source " << s;  // issue 36 item 12
          }
          // The route's rows differ from the native kernel's somewhere (else the check above says nothing).
          if (m == 1000) EXPECT_GT(differing_sources, 0) << "the route and the native kernel gave the same bits";
          const auto hashes = g.all_gather(fnv1a64(outs[0].data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
        }
      });
    }
}

// The guard's negative control: rank 1 runs both kernels of the either/or (mx_route_unguarded), so
// it makes two protocol calls where its peer makes one: its second kernel's credit wait must time
// out, naming the peer, and the op report it. Guarded (the control), the same calls are clean.
TEST(EmulatedGemmAllGather, Mxfp8RouteWithoutItsGuardsIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m = 300;
  for (bool unguarded : {false, true}) {
    bench::EmulatedWorld ew(2, 0, 1.0);
    std::vector<std::string> errors(2);
    ew.run([&](comm::Group& g) {
      auto c = Traits::config(Traits::kQuants[4], GemmAllGatherMode::kFusedLsa, n, k, m);
      c.mx_route = MxRoute::kBf16;
      fused::GemmAllGatherHooks hooks;
      hooks.mx_route_unguarded = unguarded && g.rank() == 1;
      auto op = GemmAllGather::Impl::create(g, c, hooks);
      const auto as = test::mx_a_with_odd_rank(2, -1, m, k, 3000, g.device());
      const bench::DeviceOperand b = bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(78, n, k), n, k, ScaleMode::kMxfp8, ref::Operand::kB), g.device());
      Stream st;
      g.barrier();
      op->run(m, as[g.rank()].view, b.view, GemmScales{as[g.rank()].scale_view, b.scale_view}, st.s);
      comm::sync_stream_bounded(st.s, 10, "an mxfp8 call");
      try {
        op->check();
      } catch (const Error& e) {
        errors[g.rank()] = e.what();
        EXPECT_EQ(e.status(), Status::kTimeout) << e.what();
      }
    });
    if (!unguarded) {
      EXPECT_EQ(errors[0] + errors[1], "") << "guarded: every rank runs exactly one kernel";
    } else {
      EXPECT_NE(errors[1].find("peer 0"), std::string::npos) << "unguarded: rank 1's second kernel must time out: '"
                                                              << errors[1] << "'";
      std::printf("  route guards OFF on rank 1: %s\n", errors[1].substr(0, 200).c_str());
    }
  }
}

// Negative control of the arrival wait: rank 1 is slow (each tile's stores 20 ms late); rank 0
// reads its output as soon as its own kernel ends. With the wait: 0 wrong. Without it
// (skip_arrival_wait): rank 1's rows are still poison on rank 0.
// fused-ce: skipping the wait stores every pull trigger at once, so the copies read the slow rank's
// rows before its tiles are there.
TEST(EmulatedGemmAllGather, SkippingTheArrivalWaitIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m = 256;
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe})
  for (bool skip : {false, true}) {
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(2, 0, 20);
    std::vector<int64_t> wrong_peer(2, 0);
    ew.run([&](comm::Group& g) {
      auto cfg = Traits::config(Traits::kQuants[0], mode, n, k, m);
      fused::GemmAllGatherHooks hooks;
      hooks.skip_arrival_wait = skip;
      if (g.rank() == 1) hooks.delay_stores_ns = 20'000'000;
      auto op = GemmAllGather::Impl::create(g, cfg, hooks);
      test::AgOneHot oh(m, n, k, g.rank());
      oh.set_a(5, m);
      Stream st;
      WEAVE_CHECK_CUDA(cudaMemsetAsync(op->output(m).data, 0xFF, 2 * m * n * 2, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      g.barrier();
      // Snapshot the output on the device right after this rank's kernel (stream order, no host
      // timing involved), then look at it.
      bench::DeviceBuffer snapshot(2 * m * n * 2);
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, snapshot.bytes(), cudaMemcpyDeviceToDevice, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      std::vector<uint16_t> out(2 * m * n);
      snapshot.download(out.data(), snapshot.bytes());
      wrong_peer[g.rank()] = oh.wrong(out, 5, 2, m)[1 - g.rank()];
      g.barrier();
    });
    if (skip) EXPECT_GT(wrong_peer[0], 0) << "skipping the arrival wait must leave the slow peer's rows missing";
    else EXPECT_EQ(wrong_peer[0] + wrong_peer[1], 0) << "with the arrival wait every row is there";
    std::printf("  %s, arrival wait %s: rank 0 saw %lld wrong elements of the slow rank's rows\n",
                mode_name(mode).c_str(), skip ? "SKIPPED" : "on", static_cast<long long>(wrong_peer[0]));
  }
}

// Negative control of the credit, per fused mode. fused-lsa: rank 0 reads call 1's output 30 ms
// after its kernel (a slow consumer) while rank 1 goes straight on to call 2 with other values;
// with credits rank 1's call 2 waits for rank 0 to start call 2, without (flow_control = false)
// call 2's rows overwrite what rank 0 has not read yet. fused-ce: the credit protects the SENDER's
// own rows, which its peers pull during their call: rank 0 pulls slowly (each chunk's trigger 30 ms
// late); with credits rank 1's call 2 waits until rank 0's call 2 starts, i.e. until its call-1
// pulls ended; without, rank 1 overwrites its rows before rank 0 pulled them.
TEST(EmulatedGemmAllGather, DisablingTheCreditIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m = 256;
  ASSERT_TRUE(fits_queues(GemmAllGatherMode::kFusedCe, 2)) << bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  for (GemmAllGatherMode mode : {GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe})
  for (bool credits : {true, false}) {
    SCOPED_TRACE(mode_name(mode));
    const bool pull = mode == GemmAllGatherMode::kFusedCe;
    bench::EmulatedWorld ew(2, 0, 20);
    int64_t wrong = 0;
    ew.run([&](comm::Group& g) {
      auto cfg = Traits::config(Traits::kQuants[0], mode, n, k, m);
      fused::GemmAllGatherHooks hooks;
      hooks.flow_control = credits;
      if (pull && g.rank() == 0) hooks.delay_pull_ns = 30'000'000;
      auto op = GemmAllGather::Impl::create(g, cfg, hooks);
      test::AgOneHot oh(m, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer a2(m * k * 2), snapshot(2 * m * n * 2);
      const auto h2 = oh.host_a(6, m);
      a2.upload(h2.data(), h2.size() * 2);
      oh.set_a(5, m);
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues"); the GPU is not synchronised
      if (g.rank() == 0) {
        if (!pull) bench::spin_delay(30'000'000, st.s);
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snapshot.get(), op->output(m).data, 2 * m * n * 2, cudaMemcpyDeviceToDevice, st.s));
      }
      op->run(m, TensorView::matrix(a2.get(), DType::kBF16, m, k, g.device()), oh.b_view(g.device()), {}, st.s);
      comm::sync_stream_bounded(st.s, 20, "two calls");
      op->check();
      if (g.rank() == 0) {
        std::vector<uint16_t> h(2 * m * n);
        snapshot.download(h.data(), h.size() * 2);
        wrong = oh.wrong(h, 5, 2, m)[1];
      }
      g.barrier();
    });
    if (credits) EXPECT_EQ(wrong, 0) << "with credits the slow reader sees call 1's rows";
    else EXPECT_GT(wrong, 0) << "without credits the next call must overwrite rows not yet read";
    std::printf("  %s, credits %s: the slow %s saw %lld wrong elements\n", mode_name(mode).c_str(), credits ? "on" : "OFF",
                pull ? "puller" : "reader", static_cast<long long>(wrong));
  }
}

// The split modes' GEMM where weave::Gemm would not run one pass of whole tiles (fused/
// split_gemm_leg.hpp): small m, long K. At W = 2 and 4 (ranks share the GPU: no GEMV) the K split;
// at world 1 (gemm-only) the decode GEMV too. Each case is one the planner takes on the op's CTAs
// (SMs / W - 1; 132 at world 1), asserted through plan(m). Every source rank's rows are bitwise
// weave::Gemm's at the leg's tile, split and route (its own workspace and reduction: not the op's
// code) and within the reference; calls at m, a smaller m and m again back to back (the partials
// move with m), each output NaN-poisoned. Control: the same op with the leg off runs its tile
// (plan(m) says so), and its bits differ from the leg's in most cases (else the bitwise check
// above could not tell the two paths apart).
TEST(EmulatedGemmAllGather, SplitModesRunWeaveGemmsKSplitOrGemvBitwise) {
  WEAVE_REQUIRE_GPUS(1);
  struct Case {
    int quant;  // index into Traits::kQuants: 1 bf16->fp32, 2 ptpc, 3 blockscale, 6 blockscale-mn
    int64_t n, m;
  };
  const std::vector<std::pair<int, std::vector<Case>>> worlds = {
      {1, {{1, 2048, 1}, {3, 576, 4}, {2, 2048, 8}, {3, 576, 256}, {1, 2048, 256}}},
      {2, {{3, 576, 32}, {3, 576, 256}, {1, 2048, 64}, {2, 2048, 64}, {1, 2048, 256}, {6, 576, 32}}},
      {4, {{3, 576, 32}, {2, 2048, 64}}}};
  const int64_t k = 7168, m_max = 512;
  for (const auto& [world, cases] : worlds) {
    bench::EmulatedWorld ew(world, 0, 20);
    const GemmAllGatherMode mode = world == 1 ? GemmAllGatherMode::kGemmOnly : GemmAllGatherMode::kSplitLsa;
    int differing = 0;
    for (const Case& c : cases) {
      const test::QuantCase& q = Traits::kQuants[c.quant];
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world) + " N " + std::to_string(c.n) + " m " +
                   std::to_string(c.m));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        const GemmAllGatherConfig cfg = Traits::config(q, mode, c.n, k, m_max);
        auto op = GemmAllGather::Impl::create(g, cfg);
        fused::GemmAllGatherHooks off;
        off.split_leg = false;
        auto tile_op = GemmAllGather::Impl::create(g, cfg, off);
        const bench::DeviceOperand b = bench::upload_operand(
            bench::quantize_parallel(bench::random_operand(91, c.n, k), c.n, k, q.quant, ref::Operand::kB), dev);
        Stream st;
        const size_t ob = dtype_bytes(q.out);
        for (int64_t m : {c.m, c.m / 2 + 1, c.m}) {
          const GemmAllGatherPlan plan = op->plan(m);
          const fused::SplitGemmLeg leg =
              fused::gag_split_leg(cfg, m, GemmAllGather::Impl::of(*op).grid_cap, world == 1);
          if (m == c.m) {
            EXPECT_TRUE(plan.gemm_split_k > 1 || plan.gemm_gemv) << "the case no longer takes the leg: " << plan.reason;
            EXPECT_EQ(plan.gemm_gemv, leg.kind == fused::SplitLegKind::kGemv) << plan.reason;
          }
          if (leg.kind == fused::SplitLegKind::kSplitK) EXPECT_EQ(plan.gemm_split_k, leg.plan.split_k) << plan.reason;
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 4000, m, k, q.quant, dev);
          std::vector<test::LayoutScales> held(world);
          std::vector<GemmScales> scales;
          for (int s = 0; s < world; ++s) scales.push_back(test::scales_in_layout(q.layout, as[s], b, held[s]));
          const size_t row_bytes = static_cast<size_t>(m * c.n) * ob, bytes = world * row_bytes;
          const std::vector<uint8_t> out = test::poisoned_call(g, *op, m, as[r].view, b.view, scales[r], bytes, st.s);
          const std::vector<uint8_t> tiles =
              m == c.m ? test::poisoned_call(g, *tile_op, m, as[r].view, b.view, scales[r], bytes, st.s)
                       : std::vector<uint8_t>{};
          if (m == c.m) {
            const GemmAllGatherPlan tp = tile_op->plan(m);
            EXPECT_TRUE(tp.gemm_split_k == 1 && !tp.gemm_gemv) << "the leg is off, yet: " << tp.reason;
            if (r == 0 && tiles != out) ++differing;
          }
          const GemmProblem p{.m = m, .n = c.n, .k = k, .mode = q.quant, .scale_layout = q.layout, .out_dtype = q.out};
          GemmPlanOverrides ov;
          if (leg.kind == fused::SplitLegKind::kGemv) {
            ov.decode_route = DecodeRoute::kGemv;
          } else if (leg.kind == fused::SplitLegKind::kSplitK) {
            ov.block_m = leg.plan.block_m;
            ov.block_n = leg.plan.block_n;
            ov.split_k = leg.plan.split_k;
            ov.decode_route = DecodeRoute::kTiles;
            if (q.quant == ScaleMode::kBlockscale && q.layout == ScaleLayout::kRaw) ov.scale_a_route = ScaleARoute::kAsGiven;
          }
          bench::DeviceBuffer cbuf(row_bytes), refbuf(static_cast<size_t>(m * c.n) * 4), rows_buf(row_bytes);
          for (int s = 0; s < world; ++s) {
            const uint8_t* got = out.data() + s * row_bytes;
            if (leg.kind != fused::SplitLegKind::kTiles) {
              Gemm gemm(p, as[s].view, b.view, scales[s], TensorView::matrix(cbuf.get(), q.out, m, c.n, dev), ov);
              bench::DeviceBuffer ws(std::max<size_t>(gemm.workspace_bytes(), 16));
              gemm.set_workspace(gemm.workspace_bytes() ? ws.get() : nullptr, gemm.workspace_bytes());
              WEAVE_CHECK_CUDA(cudaMemsetAsync(cbuf.get(), 0xFF, row_bytes, st.s));
              gemm.run(st.s);
              WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
              std::vector<uint8_t> want(row_bytes);
              cbuf.download(want.data(), row_bytes);
              EXPECT_EQ(std::memcmp(got, want.data(), row_bytes), 0)
                  << "m " << m << " source " << s << ": not weave::Gemm's bits (" << gemm.plan().reason << ")";
            }
            rows_buf.upload(got, row_bytes);
            GemmProblem raw = p;  // the reference reads the scales as made (row-major)
            raw.scale_layout = ScaleLayout::kRaw;
            bench::gpu_reference_gemm(raw, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view},
                                      refbuf.as<float>(), st.s);
            const ref::Comparison cmp = bench::gpu_compare(TensorView::matrix(rows_buf.get(), q.out, m, c.n, dev),
                                                           refbuf.as<float>(), bench::gemm_tolerance(q.quant, q.out), st.s);
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " source " << s << ": " << cmp.wrong << " wrong, rel_l2 " << cmp.rel_l2;
            EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m << " source " << s;
          }
          g.barrier();
        }
      });
    }
    EXPECT_GT(2 * differing, static_cast<int>(cases.size()))
        << "W" << world << ": the leg's bits equal the tile's in most cases, so the check cannot tell them apart";
    std::printf("  W%d: %zu cases x 3 calls bitwise weave::Gemm's; the tile's bits differ in %d\n", world, cases.size(),
                differing);
  }
}

// A randomised soak of the split leg at DeepSeek's wkv_a (blockscale N 576, K 7168) and wkv_gate
// (bf16 -> fp32, N 2048): W = 2, split-lsa, 150 calls each at m drawn from 1..512 (1..256 at N 2048;
// the same sequence on every rank: small m, where weave::Gemm splits K, and larger, where the tile
// runs; the planner splits about three quarters of them at 65 CTAs a rank), A fresh per
// call, the output NaN-poisoned before it; every source's rows against the CUDA-core reference. The
// calls that took the K split are counted (most of them must have, else the soak is not about it).
TEST(EmulatedGemmAllGather, SplitLegSoakAtModelShapes) {
  WEAVE_REQUIRE_GPUS(1);
  struct Shape {
    int quant;  // index into Traits::kQuants
    int64_t n, m_hi;
  };
  const int64_t k = 7168, m_max = 512;
  const int kCalls = 150;
  bench::EmulatedWorld ew(2, 0, 20);
  for (const Shape sh : {Shape{3, 576, 512}, Shape{1, 2048, 256}}) {
    const test::QuantCase& q = Traits::kQuants[sh.quant];
    SCOPED_TRACE(std::string(q.name) + " N " + std::to_string(sh.n));
    int split_calls = 0;
    ew.run([&](comm::Group& g) {
      const int dev = g.device(), r = g.rank();
      auto op = GemmAllGather::Impl::create(g, Traits::config(q, GemmAllGatherMode::kSplitLsa, sh.n, k, m_max));
      const bench::DeviceOperand b = bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(93, sh.n, k), sh.n, k, q.quant, ref::Operand::kB), dev);
      std::mt19937_64 shared(20261208);  // the same m sequence on every rank
      Stream st;
      const size_t ob = dtype_bytes(q.out);
      bench::DeviceBuffer refbuf(static_cast<size_t>(m_max * sh.n) * 4), rows_buf(static_cast<size_t>(m_max * sh.n) * ob);
      for (int call = 0; call < kCalls; ++call) {
        const int64_t m = 1 + static_cast<int64_t>(shared() % sh.m_hi);
        const std::vector<bench::DeviceOperand> as = test::upload_every_a(g.world_size(), 6000 + call, m, k, q.quant, dev);
        const size_t row_bytes = static_cast<size_t>(m * sh.n) * ob;
        const std::vector<uint8_t> out =
            test::poisoned_call(g, *op, m, as[r].view, b.view, GemmScales{as[r].scale_view, b.scale_view},
                                2 * row_bytes, st.s);
        if (r == 0 && op->plan(m).gemm_split_k > 1) ++split_calls;
        const GemmProblem p{.m = m, .n = sh.n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
        for (int s = 0; s < 2; ++s) {
          rows_buf.upload(out.data() + s * row_bytes, row_bytes);
          bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view},
                                    refbuf.as<float>(), st.s);
          const ref::Comparison cmp = bench::gpu_compare(TensorView::matrix(rows_buf.get(), q.out, m, sh.n, dev),
                                                         refbuf.as<float>(), bench::gemm_tolerance(q.quant, q.out), st.s);
          EXPECT_EQ(cmp.wrong, 0) << "call " << call << " m " << m << " source " << s << ": " << cmp.wrong
                                  << " wrong, rel_l2 " << cmp.rel_l2 << " (" << op->plan(m).reason << ")";
          EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "call " << call << " m " << m << " source " << s;
        }
      }
    });
    EXPECT_GT(split_calls, kCalls / 3) << "too few calls took the K split";
    std::printf("  %s N %lld W2: %d calls, %d of them split K, every source's rows within the reference\n", q.name,
                static_cast<long long>(sh.n), kCalls, split_calls);
  }
}
