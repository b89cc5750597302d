// GemmAllReduce in the emulated world (testing/emulated_world.hpp: W ranks as threads on one
// GPU, the same op code and kernels as over NCCL), its routes: mxfp8's bf16 route decided per
// rank before any partial leaves, and the decode route (GEMV, then the low-latency all-reduce). Its
// negative controls and timeouts: test_gemm_all_reduce_controls.cu. What every fused op has
// (self-tests, fused bitwise equal to split and the summed reference, back-to-back calls, graph
// replays, a peer that never arrives, disagreeing m, the soak, calibration, the caller's out, bad
// inputs) is the typed suite's, EmulatedFusedOp/GemmAllReduce.* (test_fused_ops_typed*.cu). The
// same op runs over NCCL windows on 2+ GPUs in the runs-on-2-GPUs issue.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/quant.hpp"

using namespace weave;
using test::mode_name;
using test::Stream;
using Traits = test::AllReduceTraits;

// mxfp8's bf16 route in the fused operator (fused/mx_route.hpp): every rank converts its A_r, B_r
// and runs the bf16 kernel, except a rank whose A holds scales the conversion cannot carry exactly
// (bytes 5 on non-zero elements), which runs its native kernel instead: decided per rank on the
// GPU before any partial leaves. fused, fused-rs and split-lsa on the route: bitwise equal, every
// rank's output identical, within the bound of the summed reference.
TEST(EmulatedGemmAllReduce, Mxfp8RouteIsEitherOrPerRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1000;
  const test::QuantCase* q = nullptr;
  for (const test::QuantCase& c : Traits::kQuants)
    if (c.quant == ScaleMode::kMxfp8 && c.layout == ScaleLayout::kRaw) q = &c;
  ASSERT_NE(q, nullptr);
  for (int world : {2, 4})
    for (int odd : {-1, world - 1}) {  // -1: every rank on the route
      SCOPED_TRACE("W" + std::to_string(world) + " odd rank " + std::to_string(odd));
      bench::EmulatedWorld ew(world, 0, 20);
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto with = [&](GemmAllReduceMode mode) {
          auto c = Traits::config(*q, mode, n, k, m_max);
          c.mx_route = MxRoute::kBf16;
          return GemmAllReduce::Impl::create(g, c);
        };
        auto fused = with(GemmAllReduceMode::kFused);
        auto rs = with(GemmAllReduceMode::kFusedRs);
        auto split = with(GemmAllReduceMode::kSplitLsa);
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(77 + s, n, k), n, k, q->quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {33, 1000}) {
          const std::vector<bench::DeviceOperand> as = test::mx_a_with_odd_rank(world, odd, m, k, 5000, dev);
          const GemmScales sc{as[r].scale_view, bs[r].scale_view};
          const size_t bytes = static_cast<size_t>(m * n) * 2;
          std::vector<std::vector<uint8_t>> outs;
          for (GemmAllReduce* op : {fused.get(), rs.get(), split.get()}) {
            outs.push_back(test::poisoned_call(g, *op, m, as[r].view, bs[r].view, sc, bytes, st.s));
            EXPECT_TRUE(GemmAllReduce::Impl::of(*op).last_mx_bf16_route);
          }
          EXPECT_EQ(outs[0], outs[2]) << "m " << m << ": fused differs from split-lsa on the same route";
          EXPECT_EQ(outs[1], outs[2]) << "m " << m << ": fused-rs differs from split-lsa on the same route";
          const auto hashes = g.all_gather(fnv1a64(outs[0].data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q->quant, .scale_layout = q->layout, .out_dtype = DType::kBF16};
          test::SummedReference want(as, bs, p, st.s);
          bench::DeviceBuffer got(bytes);
          got.upload(outs[0].data(), bytes);
          const ref::Comparison cmp =
              bench::gpu_compare(TensorView::matrix(got.get(), DType::kBF16, m, n, dev), want.sum.as<float>(),
                                 bench::reduced_gemm_tolerance(q->quant, world), st.s, want.mag.as<float>());
          EXPECT_EQ(cmp.wrong, 0) << "m " << m << ": " << cmp.wrong << " of " << cmp.count << " beyond the bound, rel_l2 "
                                  << cmp.rel_l2;
          EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m;  // the same at every W (issue 36 item 12)
        }
      });
    }
}

// The decode route (M <= 32): weave's decode GEMV into the window, then the lsa all-reduce (LL at
// these sizes). self_test at W = 2, 4, 8 in every quant the GEMV implements; random operands
// within the summed-reference bound and identical on every rank; auto takes decode where it was
// measured faster (bf16 and mxfp8, m <= 16: fused/all_reduce/plan.hpp) and not elsewhere; decode refuses m = 33 by name and mxfp8 packed scales (the GEMV reads raw) at
// construction.
TEST(EmulatedGemmAllReduce, DecodeRouteGemvThenLowLatencyAllReduce) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 384, k = 256, m_max = 64;
  int self_tests = 0;
  for (int world : {2, 4, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const test::QuantCase& q : Traits::kQuants) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        if (q.layout == ScaleLayout::kPacked) {
          const std::string msg = test::error_of(
              [&] { GemmAllReduce::Impl::create(g, Traits::config(q, GemmAllReduceMode::kDecode, n, k, m_max)); },
              Status::kUnavailable);
          EXPECT_NE(msg.find("raw scales only"), std::string::npos) << msg;
          return;
        }
        auto op = GemmAllReduce::Impl::create(g, Traits::config(q, GemmAllReduceMode::kDecode, n, k, m_max));
        for (int64_t m : {1, 7, 16, 29, 32}) {
          const SelfTestReport rep = op->self_test(m);
          EXPECT_TRUE(rep.ok) << "m " << m << ": " << rep.detail;
          EXPECT_EQ(op->last_mode(), GemmAllReduceMode::kDecode);
          if (g.rank() == 0 && rep.ok) ++self_tests;
        }
        test::ArOneHot oh(m_max, n, k, g.rank());
        Stream st;
        const std::string msg = test::error_of(
            [&] { op->run(33, oh.a_view(33, g.device()), oh.b_view(g.device()), {}, st.s); }, Status::kInvalidArgument);
        EXPECT_NE(msg.find("mode decode runs m <= 32"), std::string::npos) << msg;
      });
    }
  }
  std::printf("  decode self-tests passed: %d (rank 0 counted)\n", self_tests);

  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 10);
    for (const test::QuantCase& q : Traits::kQuants) {
      if (q.layout == ScaleLayout::kPacked) continue;
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto decode = GemmAllReduce::Impl::create(g, Traits::config(q, GemmAllReduceMode::kDecode, n, k, m_max));
        auto autop = GemmAllReduce::Impl::create(g, Traits::config(q, GemmAllReduceMode::kAuto, n, k, m_max));
        std::vector<bench::DeviceOperand> bs;
        for (int s = 0; s < world; ++s)
          bs.push_back(bench::upload_operand(
              bench::quantize_parallel(bench::random_operand(300 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        for (int64_t m : {1, 13, 32, 33}) {
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 4000, m, k, q.quant, dev);
          test::LayoutScales held;
          const GemmScales sc = test::scales_in_layout(q.layout, as[r], bs[r], held);
          const size_t bytes = static_cast<size_t>(m * n) * 2;
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
          test::SummedReference want(as, bs, p, st.s);
          for (GemmAllReduce* op : {decode.get(), autop.get()}) {
            if (op == decode.get() && m > 32) continue;
            bench::poison_nan(op->output(m).data, bytes, DType::kBF16, st.s);
            comm::sync_stream_bounded(st.s, 30, "inputs and poison");
            g.barrier();
            op->run(m, as[r].view, bs[r].view, sc, st.s);
            comm::sync_stream_bounded(st.s, 30, "the call, m " + std::to_string(m));  // nothing enqueued after it
            op->check();
            const bool want_decode = op == decode.get() || fused::gar_decode_pays(q.quant, m);
            EXPECT_EQ(op->last_mode() == GemmAllReduceMode::kDecode, want_decode)
                << "m " << m << ": took " << to_string(op->last_mode()) << " (" << op->plan(m).reason << ")";
            const ref::Comparison cmp =
                bench::gpu_compare(TensorView::matrix(op->output(m).data, DType::kBF16, m, n, dev), want.sum.as<float>(),
                                   bench::reduced_gemm_tolerance(q.quant, world), st.s, want.mag.as<float>());
            EXPECT_EQ(cmp.wrong, 0) << "m " << m << " " << to_string(op->last_mode()) << ": " << cmp.wrong << " of "
                                    << cmp.count << " beyond the bound (never written " << cmp.never_written
                                    << "), rel_l2 " << cmp.rel_l2;
            EXPECT_LT(cmp.rel_l2, test::kFusedRelL2Bound) << "m " << m << " " << to_string(op->last_mode());
            std::vector<uint8_t> h(bytes);
            WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), op->output(m).data, bytes, cudaMemcpyDeviceToHost));
            const auto hashes = g.all_gather(fnv1a64(h.data(), bytes), "the output hash");
            for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
            if (r == 0 && m == 13)
              std::printf("  %s W%d m 13 %s: rel_l2 %.3g vs the summed reference\n", q.name, world,
                          mode_name(op->last_mode()).c_str(), cmp.rel_l2);
            g.barrier();
          }
        }
      });
    }
  }
}
