// AllGatherGemm in the emulated world (testing/emulated_world.hpp: W ranks as threads on one GPU,
// the same op code and kernels as over NCCL). Its output is GemmAllGather's, [A_0; ...; A_{W-1}]
// B^T with one B, so the one-hot operands, closed forms and references are GemmAllGather's
// (fused_op_traits_all_gather.hpp). Here: self-tests in every mode, quant and world (gemm-only and
// a skipped scale gather failing them); the split modes bitwise equal to each other and to
// weave::Gemm over the ranks' A stacked, the gathered A bitwise the ranks' A, within the reference;
// the caller's out and the zero-copy input; back-to-back calls of changing m with a late rank;
// graph replays across the epoch wrap; a peer that never arrives; ranks that disagree on m; a
// randomised soak; auto with a calibration table (fused-ce and split-lsa call by call); bad inputs. Over NCCL on 2+ GPUs: tests/multi_gpu/test_ag_gemm.cu.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/stream_mem_ops.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/ag_gemm/impl.hpp"
#include "fused/ag_gemm/plan.hpp"
#include "fused_op_traits_all_gather.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/scoped_file.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/spin_delay.hpp"

using namespace weave;
using test::fits_queues;
using test::mode_name;
using test::Stream;
using AgTraits = test::AllGatherTraits;  // quants, one-hot operands and references of the all-gather
using Mode = AllGatherGemmMode;

namespace {

// The quants AllGatherGemm runs: GemmAllGather's with raw scale layouts (A's scales travel with
// their rows).
std::vector<test::QuantCase> agm_quants() {
  std::vector<test::QuantCase> qs;
  for (const test::QuantCase& q : AgTraits::kQuants)
    if (q.layout == ScaleLayout::kRaw) qs.push_back(q);
  return qs;
}

AllGatherGemmConfig agm_config(const test::QuantCase& q, Mode mode, int64_t n, int64_t k, int64_t m_max) {
  return test::fused_config<AllGatherGemmConfig, Mode>(q, mode, n, k, m_max);
}

std::unique_ptr<AllGatherGemm> make(comm::Group& g, const AllGatherGemmConfig& c,
                                    const fused::AllGatherGemmHooks& h = {}) {
  return AllGatherGemm::Impl::create(g, c, h);
}

template <class T>
std::vector<T> download(const void* p, size_t count) {
  std::vector<T> h(count);
  WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), p, count * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// A's operand of every rank, and this rank's scales, for the op (B's from `b`).
GemmScales scales_of(const bench::DeviceOperand& a, const bench::DeviceOperand& b) {
  return GemmScales{a.scale_view, b.scale_view};
}

// weave::Gemm over every rank's A stacked ([world m, K] and its scales, copied here) with the plan
// the op makes for its share of the SMs: the op's output, bitwise, if the gathers move the right
// bytes to the right rows.
// fused-ce (its own kernel at its tile, fused::agm_tile_plan: never a K split): weave::Gemm forced to
// that tile, on the tiled kernels at any m.
std::vector<uint8_t> stacked_gemm(AllGatherGemm& op, const std::vector<bench::DeviceOperand>& as,
                                  const bench::DeviceOperand& b, int64_t m, cudaStream_t st) {
  const AllGatherGemmConfig& c = op.config();
  const int world = static_cast<int>(as.size()), dev = b.view.device;
  fused::AgmGemm g = fused::agm_gemm(c, world, m, AllGatherGemm::Impl::of(op).grid_cap);
  const AllGatherGemmPlan p = op.plan(m);  // the call's mode (auto: its table's choice at m)
  if (p.mode == Mode::kFusedCe) {  // its own tile (no K split), which the split modes' GEMM need not run
    const auto& im = AllGatherGemm::Impl::of(op);
    const GemmPlan t = fused::agm_tile_plan(c, world, m, im.grid_cap, im.tiles, im.hooks.tile);
    g.overrides = GemmPlanOverrides{};
    g.overrides.block_m = t.block_m;
    g.overrides.block_n = t.block_n;
    g.overrides.split_k = 1;
    g.overrides.decode_route = DecodeRoute::kTiles;
    if (c.quant == ScaleMode::kBlockscale) g.overrides.scale_a_route = ScaleARoute::kAsGiven;
  }
  const size_t a_bytes = as[0].values.bytes(), s_bytes = as[0].scales.bytes();
  bench::DeviceBuffer a(world * a_bytes), sa(world * s_bytes + 16),
      out(static_cast<size_t>(world * m * c.n) * dtype_bytes(c.out_dtype));
  for (int s = 0; s < world; ++s) {
    WEAVE_CHECK_CUDA(cudaMemcpy(static_cast<char*>(a.get()) + s * a_bytes, as[s].values.get(), a_bytes,
                                cudaMemcpyDeviceToDevice));
    if (s_bytes)
      WEAVE_CHECK_CUDA(cudaMemcpy(static_cast<char*>(sa.get()) + s * s_bytes, as[s].scales.get(), s_bytes,
                                  cudaMemcpyDeviceToDevice));
  }
  TensorView sa_view = as[0].scale_view;  // the same layout, world x the rows
  sa_view.data = sa.get();
  sa_view.shape[0] *= world;
  const TensorView a_view = TensorView::matrix(a.get(), as[0].view.dtype, world * m, c.k, dev);
  const TensorView out_view = TensorView::matrix(out.get(), c.out_dtype, world * m, c.n, dev);
  Gemm gemm(g.problem, a_view, b.view,
            GemmScales{c.quant == ScaleMode::kBF16 ? TensorView{} : sa_view, b.scale_view}, out_view, g.overrides);
  bench::DeviceBuffer ws(gemm.workspace_bytes() + 16);
  if (gemm.workspace_bytes() > 0) gemm.set_workspace(ws.get(), gemm.workspace_bytes());
  gemm.run(st);
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(st));
  std::vector<uint8_t> h(out.bytes());
  out.download(h.data(), h.size());
  return h;
}

// The gathered A (and its scales) of `op`'s last call of m rows: every rank's, bitwise.
void expect_gathered_bitwise(const AllGatherGemm& op, const std::vector<bench::DeviceOperand>& as, int64_t m) {
  const AllGatherGemmConfig& c = op.config();
  const int world = static_cast<int>(as.size());
  const size_t row_bytes = static_cast<size_t>(c.k) * (c.quant == ScaleMode::kBF16 ? 2 : 1);
  const auto ga = download<uint8_t>(op.gathered_a(m).data, static_cast<size_t>(world * m) * row_bytes);
  for (int s = 0; s < world; ++s) {
    const auto want = download<uint8_t>(as[s].values.get(), static_cast<size_t>(m) * row_bytes);
    EXPECT_EQ(0, std::memcmp(ga.data() + s * m * row_bytes, want.data(), want.size())) << "m " << m << " A of " << s;
    if (c.quant == ScaleMode::kBF16) continue;
    const size_t sb = as[s].scales.bytes();
    const auto gs = download<uint8_t>(static_cast<const char*>(op.gathered_scale_a(m).data) + s * sb, sb);
    EXPECT_EQ(gs, download<uint8_t>(as[s].scales.get(), sb)) << "m " << m << " scales of " << s;
  }
}

// One NaN-poisoned call of m rows per rank on `op` (W = as.size(), B = bs[0]), checked: `mode` ran,
// the bytes are weave::Gemm's over the stacked rows at that mode's plan, identical on every rank,
// within each source's reference, the gathered A and scales bitwise. Returns the output.
std::vector<uint8_t> expect_call_is_the_stacked_gemm(comm::Group& g, AllGatherGemm& op, const test::QuantCase& q,
                                                     int64_t m, const std::vector<bench::DeviceOperand>& as,
                                                     const std::vector<bench::DeviceOperand>& bs, Mode mode,
                                                     cudaStream_t st) {
  const int r = g.rank(), dev = g.device();
  const int64_t n = op.config().n, k = op.config().k;
  const bench::DeviceOperand& b = bs[0];
  const size_t bytes = static_cast<size_t>(g.world_size() * m * n) * dtype_bytes(q.out);
  const std::vector<uint8_t> got = test::poisoned_call(g, op, m, as[r].view, b.view, scales_of(as[r], b), bytes, st);
  EXPECT_EQ(op.last_mode(), mode) << "m " << m;
  EXPECT_EQ(stacked_gemm(op, as, b, m, st), got) << "m " << m << ": differs from weave::Gemm at " << mode_name(mode)
                                                 << "'s plan";
  const auto hashes = g.all_gather(fnv1a64(got.data(), bytes), "the output hash");
  for (size_t s = 1; s < hashes.size(); ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": the ranks differ";
  const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
  AgTraits::Reference(q, p, as, bs, r, dev, st).expect_close(got, mode_name(mode));
  expect_gathered_bitwise(op, as, m);
  return got;
}

// The zero-copy input (A_r and its scales written into input(m) / input_scales(m)) into the
// caller's out (ld 2N): the same bytes as `want`, the op's output of the same call.
void expect_zero_copy_into_caller_out(comm::Group& g, AllGatherGemm& op, const bench::DeviceOperand& a,
                                      const bench::DeviceOperand& b, int64_t m, const std::vector<uint8_t>& want,
                                      cudaStream_t st) {
  const AllGatherGemmConfig& c = op.config();
  const size_t row_bytes = static_cast<size_t>(c.k) * (c.quant == ScaleMode::kBF16 ? 2 : 1);
  test::CallerOut out(c.out_dtype, g.world_size() * m, c.n, 2 * c.n, g.device());
  const TensorView slot = op.input(m), slot_s = op.input_scales(m);
  WEAVE_CHECK_CUDA(
      cudaMemcpyAsync(slot.data, a.values.get(), static_cast<size_t>(m) * row_bytes, cudaMemcpyDeviceToDevice, st));
  if (c.quant != ScaleMode::kBF16)
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(slot_s.data, a.scales.get(), a.scales.bytes(), cudaMemcpyDeviceToDevice, st));
  out.poison(st);
  g.barrier();
  op.run(m, slot, b.view, GemmScales{slot_s, b.scale_view}, out.view, st);
  comm::sync_stream_bounded(st, 2 * g.timeout_s() + 5, "the zero-copy call into the caller's out");
  op.check();
  EXPECT_EQ(out.rows(), want) << "m " << m << ": the zero-copy call into the caller's out differs";
  g.barrier();
}

// Ends the capture on `st`, replays the graph 5 times (warm-up) and then `replays` times, and
// returns the time per timed replay in us.
double end_capture_and_time_us(cudaStream_t st, int replays, const char* what) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  WEAVE_CHECK_CUDA(cudaStreamEndCapture(st, &graph));
  WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
  for (int i = 0; i < 5; ++i) WEAVE_CHECK_CUDA(cudaGraphLaunch(exec, st));
  cudaEvent_t t0, t1;
  WEAVE_CHECK_CUDA(cudaEventCreate(&t0));
  WEAVE_CHECK_CUDA(cudaEventCreate(&t1));
  WEAVE_CHECK_CUDA(cudaEventRecord(t0, st));
  for (int i = 0; i < replays; ++i) WEAVE_CHECK_CUDA(cudaGraphLaunch(exec, st));
  WEAVE_CHECK_CUDA(cudaEventRecord(t1, st));
  comm::sync_stream_bounded(st, 120, what);
  float ms = 0;
  WEAVE_CHECK_CUDA(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  WEAVE_CHECK_CUDA(cudaGraphExecDestroy(exec));
  return 1000.0 * ms / replays;
}

}  // namespace

// Every mode x quant at W = 2 and 4 (W = 3 and 8: bf16 and ptpc), M of one row, a partial tile, one
// tile and many: every source rank's rows right on every rank. gemm-only (nothing moves) fails with
// only the peers' rows wrong; so does a call whose scale gather is left out (ptpc, the peers' rows
// under stale scales) — the scales' own negative control.
TEST(EmulatedAllGatherGemm, SelfTestEveryModeQuantAndWorld) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1100;
  int passed = 0;
  for (int world : {2, 4, 3, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const test::QuantCase& q : agm_quants()) {
      if ((world == 3 || world == 8) && q.quant != ScaleMode::kBF16 && q.quant != ScaleMode::kPtpc) continue;
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      for (Mode mode : {Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedCe, Mode::kAuto}) {
        if (mode == Mode::kFusedCe && !fused::agm_fused_ce_quant(q.quant, q.out)) continue;  // refused: BadInputs
        if (!fits_queues(mode, world)) {
          test::print_not_run(mode_name(mode) + " " + q.name, world, test::not_run_reason(mode, world));
          continue;
        }
        ew.run([&](comm::Group& g) {
          auto op = make(g, agm_config(q, mode, n, k, m_max));
          for (int64_t m : {1, 7, 128, 1000}) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << mode_name(mode) << " m " << m << ": " << rep.detail;
            EXPECT_EQ(op->last_mode(), mode == Mode::kAuto ? Mode::kSplitLsa : mode);
            if (g.rank() == 0 && rep.ok) ++passed;
          }
        });
      }
      ew.run([&](comm::Group& g) {  // the negative control: nothing moves
        auto op = make(g, agm_config(q, Mode::kGemmOnly, n, k, m_max));
        const SelfTestReport rep = op->self_test(100);
        EXPECT_FALSE(rep.ok) << "gemm-only moves nothing and must fail: " << rep.detail;
        for (int s = 0; s < world; ++s)
          if (s == g.rank()) EXPECT_EQ(rep.wrong_from_rank[s], 0) << "own rows are gathered locally: " << rep.detail;
          else EXPECT_GT(rep.wrong_from_rank[s], 0) << "peer " << s << "'s rows never came: " << rep.detail;
      });
    }
  }
  // The scale gather's control: ptpc's self-test scales every row by its own power of two, so a
  // peer's row under another call's (or no) scale is wrong.
  bench::EmulatedWorld ew(2, 0, 20);
  ew.run([&](comm::Group& g) {
    fused::AllGatherGemmHooks hooks;
    hooks.skip_scale_gather = true;
    auto op = make(g, agm_config(agm_quants()[2], Mode::kSplitLsa, n, k, m_max), hooks);
    ASSERT_EQ(op->config().quant, ScaleMode::kPtpc);
    const SelfTestReport rep = op->self_test(1000);
    EXPECT_FALSE(rep.ok) << "without the scale gather the peers' rows must be wrong: " << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[g.rank()], 0) << rep.detail;
    EXPECT_GT(rep.wrong_from_rank[1 - g.rank()], 0) << rep.detail;
  });
  std::printf("  all-gather-gemm self-tests passed: %d (rank 0 counted)\n", passed);
}

// Random operands, W = 2 and 4, every quant, M from one row (the decode GEMV) to many tiles:
// split-lsa, split-ce (W = 2) and auto give the same bytes, weave::Gemm's over every rank's A
// stacked (this rank's copy, with the plan fused::agm_gemm makes), identical on every rank, within
// the per-source reference (gpu_reference_gemm on CUDA cores) and its relative-L2 bound; the
// gathered A and its scales are bitwise every rank's; the caller's `out` (a column slice of a
// wider buffer) and the zero-copy input give the same bytes.
TEST(EmulatedAllGatherGemm, SplitModesEqualTheGemmOfTheStackedRowsBitwiseAndMatchReference) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 512, k = 1024, m_max = 2048;
  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const test::QuantCase& q : agm_quants()) {
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        std::vector<std::unique_ptr<AllGatherGemm>> ops;
        for (Mode mode : {Mode::kSplitLsa, Mode::kSplitCe, Mode::kAuto})
          if (fits_queues(mode, world)) ops.push_back(make(g, agm_config(q, mode, n, k, m_max)));
        std::vector<bench::DeviceOperand> bs;
        bs.push_back(bench::upload_operand(
            bench::quantize_parallel(bench::random_operand(77, n, k), n, k, q.quant, ref::Operand::kB), dev));
        Stream st;
        const size_t ob = dtype_bytes(q.out);
        for (int64_t m : {int64_t(1), int64_t(77), int64_t(128), int64_t(1000), m_max}) {
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 900, m, k, q.quant, dev);
          const GemmScales sc = scales_of(as[r], bs[0]);
          const size_t bytes = static_cast<size_t>(world * m * n) * ob;
          std::vector<std::vector<uint8_t>> outs;
          for (auto& op : ops) outs.push_back(test::poisoned_call(g, *op, m, as[r].view, bs[0].view, sc, bytes, st.s));
          for (size_t i = 1; i < outs.size(); ++i)
            EXPECT_EQ(outs[i], outs[0]) << "m " << m << ": " << mode_name(ops[i]->config().mode) << " differs from "
                                        << mode_name(ops[0]->config().mode);
          EXPECT_EQ(stacked_gemm(*ops[0], as, bs[0], m, st.s), outs[0])
              << "m " << m << ": differs from weave::Gemm over the stacked rows";
          const auto hashes = g.all_gather(fnv1a64(outs[0].data(), bytes), "the output hash");
          for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
          AgTraits::Reference(q, p, as, bs, r, dev, st.s).expect_close(outs[0], "split-lsa");
          // The gathered A (and scales) of the last op's call: every rank's, bitwise.
          expect_gathered_bitwise(*ops.back(), as, m);
          // The caller's out (ld 2N) and the zero-copy input: the same bytes.
          expect_zero_copy_into_caller_out(g, *ops[0], as[r], bs[0], m, outs[0], st.s);
        }
      });
    }
  }
}

// Back-to-back calls of changing m, a different rank 2 ms late before each, without host syncs:
// each call's output snapshot (stream-ordered after it) is right. W = 4 (split-lsa, auto) and W = 2
// (split-ce, fused-ce, and auto with a calibration table that alternates fused-ce and split-lsa call
// by call: a split call restages the slot a fused-ce call's peers pulled, and a fused-ce call pulls
// rows the previous split call's gathers wrote).
TEST(EmulatedAllGatherGemm, BackToBackCallsOfChangingMWithALateRank) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 512, m_max = 1100;
  const std::vector<int64_t> ms = {1000, 7, 128, 1, 640, 1100, 300};
  // auto's table: split-lsa at 1000 (and 1100, nearest), 128; fused-ce at 7, 1, 640, 300.
  const test::ScopedTextFile table("weave-agm-b2b", "weave-calibration 1\nop ag-gemm\nquant bf16\nout bf16\nn 256\n"
                                                    "k 512\nworld 2\nwhere test\nm 1 fused-ce\nm 7 fused-ce\n"
                                                    "m 128 split-lsa\nm 300 fused-ce\nm 640 fused-ce\nm 1000 split-lsa\n");
  struct Variant {
    Mode mode;
    bool calibrated;
  };
  for (const Variant v : {Variant{Mode::kSplitLsa, false}, Variant{Mode::kAuto, false}, Variant{Mode::kSplitCe, false},
                          Variant{Mode::kFusedCe, false}, Variant{Mode::kAuto, true}}) {
    const Mode mode = v.mode;
    const bool pulls = test::uses_copy_streams(mode) || v.calibrated;
    const int world = pulls ? 2 : 4;
    if (!fits_queues(pulls ? Mode::kFusedCe : mode, world)) {
      test::print_not_run(mode_name(mode), world, test::not_run_reason(pulls ? Mode::kFusedCe : mode, world));
      continue;
    }
    SCOPED_TRACE(std::string(mode_name(mode)) + (v.calibrated ? " with a table" : ""));
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      AllGatherGemmConfig cfg = agm_config(AgTraits::kQuants[0], mode, n, k, m_max);
      if (v.calibrated) cfg.calibration = table.path;
      auto op = make(g, cfg);
      std::vector<Mode> ran;
      test::AgOneHot oh(m_max, n, k, g.rank());
      Stream st;
      std::vector<bench::DeviceBuffer> as, snaps;
      for (size_t c = 0; c < ms.size(); ++c) {
        const auto h = oh.host_a(100 + c, ms[c]);
        as.emplace_back(m_max * k * 2);
        as.back().upload(h.data(), h.size() * 2);
        snaps.emplace_back(world * ms[c] * n * 2);
      }
      g.barrier();
      for (size_t c = 0; c < ms.size(); ++c) {
        if (g.rank() == static_cast<int>(c % world)) bench::spin_delay(2'000'000, st.s);  // a late rank
        op->run(ms[c], TensorView::matrix(as[c].get(), DType::kBF16, ms[c], k, g.device()), oh.b_view(g.device()), {},
                st.s);
        ran.push_back(op->last_mode());
        g.barrier();  // lockstep enqueue
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(snaps[c].get(), op->output(ms[c]).data, snaps[c].bytes(),
                                         cudaMemcpyDeviceToDevice, st.s));
      }
      comm::sync_stream_bounded(st.s, 20, "back-to-back calls");
      op->check();
      for (size_t c = 0; c < ms.size(); ++c) {
        const auto h = download<uint16_t>(snaps[c].get(), snaps[c].bytes() / 2);
        const std::vector<int64_t> wrong = oh.wrong(h, 100 + c, world, ms[c]);
        for (int s = 0; s < world; ++s)
          EXPECT_EQ(wrong[s], 0) << "rank " << g.rank() << " call " << c << " (m " << ms[c] << ", "
                                 << mode_name(ran[c]) << "), source " << s;
      }
      if (v.calibrated) {  // the table's alternation, call by call
        const std::vector<Mode> want = {Mode::kSplitLsa, Mode::kFusedCe, Mode::kSplitLsa, Mode::kFusedCe,
                                        Mode::kFusedCe,  Mode::kSplitLsa, Mode::kFusedCe};
        EXPECT_EQ(ran, want);
      }
      g.barrier();
    });
  }
}

// Graph replays: each rank captures, per variant, [A variant copy -> output NaN poison -> run ->
// device count of wrong elements] for two M on one op (ptpc: the scales travel too), then replays
// them 600 times in an interleaved order from 40 calls before the 2^32 epoch wrap; 0 wrong.
TEST(EmulatedAllGatherGemm, GraphReplaysAcrossTheEpochWrap) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  const int64_t n = 256, k = 256, m_max = 512;
  const int64_t ms[2] = {512, 77};
  for (Mode mode : {Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedCe}) {
    if (!fits_queues(mode, world)) {
      test::print_not_run(mode_name(mode), world, test::not_run_reason(mode, world));
      continue;
    }
    SCOPED_TRACE(mode_name(mode));
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      fused::AllGatherGemmHooks hooks;
      hooks.initial_epoch = 0xFFFFFFFFu - 40;
      auto op = make(g, agm_config(AgTraits::kQuants[0], mode, n, k, m_max), hooks);
      test::AgOneHot oh(m_max, n, k, g.rank());
      Stream st;
      bench::DeviceBuffer wrong(8);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      std::vector<bench::DeviceBuffer> variants;
      std::vector<std::unique_ptr<test::AgDeviceExpect>> want;
      for (int v = 0; v < 2; ++v) {
        const auto h = oh.host_a(40 + v, ms[v]);
        variants.emplace_back(m_max * k * 2);
        variants.back().upload(h.data(), h.size() * 2);
        want.push_back(std::make_unique<test::AgDeviceExpect>(oh, 40 + v, world, ms[v], false));
      }
      g.barrier();  // set-up, captures and instantiations apart (a peer's allocation can invalidate a capture)
      std::vector<cudaGraph_t> graphs;
      for (int v = 0; v < 2; ++v) {
        const int64_t m = ms[v];
        const TensorView out = op->output(m);
        cudaGraph_t graph;
        WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
        WEAVE_CHECK_CUDA(cudaMemcpyAsync(oh.a.get(), variants[v].get(), m * k * 2, cudaMemcpyDeviceToDevice, st.s));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(out.data, 0xFF, world * m * n * 2, st.s));
        op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
        want[v]->count_wrong(out.data, false, wrong.as<unsigned long long>(), 64, st.s);
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
// seen, and the op refuses further calls. Ranks that call with m = 300 and 600: kMismatch on every
// rank, not misplaced rows.
TEST(EmulatedAllGatherGemm, APeerThatNeverArrivesAndRanksThatDisagreeOnM) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 600;
  for (Mode mode : {Mode::kSplitLsa, Mode::kFusedCe}) {
    bench::EmulatedWorld ew(2, 0, 1.0);
    ew.run([&](comm::Group& g) {
      auto op = make(g, agm_config(AgTraits::kQuants[0], mode, n, k, m_max));
      test::AgOneHot oh(m_max, n, k, g.rank());
      oh.set_a(1, m_max);
      g.barrier();
      if (g.rank() == 0) {
        Stream st;
        op->run(m_max, oh.a_view(m_max, g.device()), oh.b_view(g.device()), {}, st.s);
        comm::sync_stream_bounded(st.s, 10, "the call whose peer never arrives");
        const std::string msg = test::error_of([&] { op->check(); }, Status::kTimeout);
        test::expect_first_call_timeout_names_everything(msg, 0, 1);
        std::printf("  %s: %s\n", mode_name(mode).c_str(), msg.c_str());
        EXPECT_FALSE(
            test::error_of([&] { op->run(m_max, oh.a_view(m_max, g.device()), oh.b_view(g.device()), {}, st.s); },
                           Status::kTimeout)
                .empty());
      }
    });
  }
  // Ranks that call with m = 300 and 600: at K 256 (150 and 300 KB per rank) the gathers run the LL
  // protocol, whose lines carry the byte count ("ll-flag-in-data"); at K 4096 (2.4 and 4.8 MB) the
  // push, whose zero-copy key holds the block stride. Either way kMismatch on every rank.
  // fused-ce: its enter kernel compares the slots' stride (the zero-copy key) at both K.
  for (Mode mode : {Mode::kSplitLsa, Mode::kFusedCe})
  for (int64_t kk : {int64_t(256), int64_t(4096)}) {
    bench::EmulatedWorld ew(2, 0, 2.0);
    ew.run([&](comm::Group& g) {
      auto op = make(g, agm_config(AgTraits::kQuants[0], mode, n, kk, m_max));
      const int64_t m = 300 * (1 + g.rank());
      test::AgOneHot oh(m_max, n, kk, g.rank());
      oh.set_a(3, m);
      Stream st;
      g.barrier();
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
      g.barrier();
      comm::sync_stream_bounded(st.s, 20, "the call of disagreeing m");
      const std::string msg = test::error_of([&] { op->check(); }, Status::kMismatch);
      EXPECT_TRUE(msg.find("same count (e.g. the same m)") != std::string::npos ||
                  msg.find("must sit at the same offset on every rank") != std::string::npos)
          << msg;
      if (g.rank() == 0)
        std::printf("  %s, K %lld, m 300 vs 600: %s\n", mode_name(mode).c_str(), static_cast<long long>(kk), msg.c_str());
      g.barrier();
    });
  }
}

// A randomised soak at a model layer's width (N 7168, K 2048): 10,000 calls at W = 2 over split-lsa,
// auto and fused-ce ops (bf16) and ptpc split-lsa and fused-ce ops, and auto ops of both quants whose
// calibration table alternates fused-ce and split-lsa along m, picked at random per call (the same
// sequence on every rank), m random from 16 variants up to 1024 rows per rank, a late rank now and
// then; each output NaN-poisoned before its call and counted on the device after it.
TEST(EmulatedAllGatherGemm, RandomisedSoak) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  const int64_t n = 7168, k = 2048, m_max = 1024;
  const int calls = 10000;
  bench::EmulatedWorld ew(world, 0, 20);
  unsigned long long total_wrong = 0;
  const std::string rows = "where test\nm 4 fused-ce\nm 16 split-lsa\nm 64 fused-ce\nm 256 split-lsa\nm 1024 fused-ce\n";
  const std::string head = "weave-calibration 1\nop ag-gemm\nout bf16\nn 7168\nk 2048\nworld 2\n";
  const test::ScopedTextFile bf16_table("weave-agm-soak-bf16", head + "quant bf16\n" + rows);
  const test::ScopedTextFile ptpc_table("weave-agm-soak-ptpc", head + "quant ptpc\n" + rows);
  ew.run([&](comm::Group& g) {
    const int dev = g.device();
    struct SoakOp {
      std::unique_ptr<AllGatherGemm> op;
      bool ptpc;
    };
    std::vector<SoakOp> ops;
    ops.push_back({make(g, agm_config(AgTraits::kQuants[0], Mode::kSplitLsa, n, k, m_max)), false});
    ops.push_back({make(g, agm_config(AgTraits::kQuants[0], Mode::kAuto, n, k, m_max)), false});
    ops.push_back({make(g, agm_config(agm_quants()[2], Mode::kSplitLsa, n, k, m_max)), true});
    ops.push_back({make(g, agm_config(AgTraits::kQuants[0], Mode::kFusedCe, n, k, m_max)), false});
    ops.push_back({make(g, agm_config(agm_quants()[2], Mode::kFusedCe, n, k, m_max)), true});
    for (const bool ptpc : {false, true}) {  // auto following a table: fused-ce and split-lsa by m
      AllGatherGemmConfig cfg = agm_config(ptpc ? agm_quants()[2] : AgTraits::kQuants[0], Mode::kAuto, n, k, m_max);
      cfg.calibration = ptpc ? ptpc_table.path : bf16_table.path;
      ops.push_back({make(g, cfg), ptpc});
    }
    test::AgOneHot oh(m_max, n, k, g.rank());
    Stream st;
    bench::DeviceBuffer wrong(8);
    WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
    constexpr int kVariants = 16;
    std::mt19937_64 shared(2026);
    std::vector<int64_t> var_m;
    std::vector<bench::DeviceBuffer> a_bf16, a_e4m3;
    std::vector<std::unique_ptr<test::AgDeviceExpect>> want;
    const test::PtpcOneHot pt(g.rank(), m_max, n, k, [&](int64_t r, int64_t c) { return oh.b_value(r, c); });
    for (int v = 0; v < kVariants; ++v) {
      const int64_t m = 1 + static_cast<int64_t>(shared() % m_max);
      var_m.push_back(m);
      const auto h = oh.host_a(500 + v, m);
      a_bf16.emplace_back(m_max * k * 2);
      a_bf16.back().upload(h.data(), h.size() * 2);
      const auto h8 = test::PtpcOneHot::host_a(h);
      a_e4m3.emplace_back(m_max * k);
      a_e4m3.back().upload(h8.data(), h8.size());
      want.push_back(std::make_unique<test::AgDeviceExpect>(oh, 500 + v, world, m, true));
    }
    g.barrier();  // every rank set up before any call waits for it
    for (int c = 0; c < calls; ++c) {
      const int v = static_cast<int>(shared() % kVariants);
      const int o = static_cast<int>(shared() % ops.size());
      const int64_t m = var_m[v];
      if (shared() % 64 == 0 && g.rank() == static_cast<int>(shared() % world)) bench::spin_delay(500'000, st.s);
      SoakOp& so = ops[static_cast<size_t>(o)];
      const TensorView out = so.op->output(m);
      WEAVE_CHECK_CUDA(cudaMemsetAsync(out.data, 0xFF, world * m * n * 2, st.s));
      if (so.ptpc)
        so.op->run(m, TensorView::matrix(a_e4m3[v].get(), DType::kE4M3, m, k, dev), pt.b_view(dev), pt.scales(m, dev),
                   st.s);
      else
        so.op->run(m, TensorView::matrix(a_bf16[v].get(), DType::kBF16, m, k, dev), oh.b_view(dev), {}, st.s);
      g.barrier();  // lockstep enqueue
      want[v]->count_wrong(out.data, so.ptpc, wrong.as<unsigned long long>(), 64, st.s);
      if (c % 500 == 499) comm::sync_stream_bounded(st.s, 60, "soak batch");
    }
    comm::sync_stream_bounded(st.s, 60, "the soak");
    for (auto& so : ops) so.op->check();
    unsigned long long bad = 0;
    wrong.download(&bad, 8);
    EXPECT_EQ(bad, 0u) << "rank " << g.rank();
    if (g.rank() == 0) total_wrong = bad;
    g.barrier();
  });
  std::printf("  soak: %d calls per rank at W = 2, N %lld, K %lld, %llu wrong on rank 0\n", calls,
              static_cast<long long>(n), static_cast<long long>(k), total_wrong);
}

// fused-ce, W = 2, every quant it runs, m from one row to many tiles (partial tiles straddling the
// two ranks' rows included): the same bytes as weave::Gemm at its tile (plan(m)) over the stacked rows,
// identical on both ranks, within the per-source reference; the gathered A and scales bitwise every
// rank's; the caller's `out`, the zero-copy input and A (blockscale: its scales too) at a row stride
// the same bytes.
TEST(EmulatedAllGatherGemm, FusedCeEqualsTheGemmOfTheStackedRowsAtItsTileBitwise) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  if (!fits_queues(Mode::kFusedCe, world)) GTEST_SKIP() << test::not_run_reason(Mode::kFusedCe, world);
  const int64_t n = 512, k = 1024, m_max = 2048;
  bench::EmulatedWorld ew(world, 0, 20);
  for (const test::QuantCase& q : agm_quants()) {
    if (!fused::agm_fused_ce_quant(q.quant, q.out)) continue;
    SCOPED_TRACE(std::string(q.name));
    ew.run([&](comm::Group& g) {
      const int dev = g.device(), r = g.rank();
      auto op = make(g, agm_config(q, Mode::kFusedCe, n, k, m_max));
      std::vector<bench::DeviceOperand> bs;
      bs.push_back(bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(77, n, k), n, k, q.quant, ref::Operand::kB), dev));
      const bench::DeviceOperand& b = bs[0];
      Stream st;
      const size_t ob = dtype_bytes(q.out);
      for (int64_t m : {int64_t(1), int64_t(77), int64_t(128), int64_t(1000), m_max}) {
        const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 900 + m, m, k, q.quant, dev);
        const GemmScales sc = scales_of(as[r], b);
        const size_t bytes = static_cast<size_t>(world * m * n) * ob;
        const std::vector<uint8_t> got = expect_call_is_the_stacked_gemm(g, *op, q, m, as, bs, Mode::kFusedCe, st.s);
        // The zero-copy input into the caller's out (ld 2N): the same bytes.
        expect_zero_copy_into_caller_out(g, *op, as[r], b, m, got, st.s);
        // A in a buffer of row stride 2K and blockscale's scales of row stride K/128 + 1: the staging's
        // pitched copy (16-byte units for A; row by row for the scales' 4-byte pitch): the same bytes.
        const size_t eb = dtype_bytes(as[r].view.dtype), row_bytes = static_cast<size_t>(k) * eb;
        bench::DeviceBuffer wide_a(static_cast<size_t>(m) * 2 * row_bytes);
        WEAVE_CHECK_CUDA(cudaMemcpy2D(wide_a.get(), 2 * row_bytes, as[r].values.get(), row_bytes, row_bytes,
                                      static_cast<size_t>(m), cudaMemcpyDeviceToDevice));
        GemmScales wide_sc = sc;
        bench::DeviceBuffer wide_s(q.quant == ScaleMode::kBlockscale ? static_cast<size_t>(m) * (k / 128 + 1) * 4 : 16);
        if (q.quant == ScaleMode::kBlockscale) {
          const size_t srow = static_cast<size_t>(k / 128) * 4;
          WEAVE_CHECK_CUDA(cudaMemcpy2D(wide_s.get(), srow + 4, as[r].scales.get(), srow, srow, static_cast<size_t>(m),
                                        cudaMemcpyDeviceToDevice));
          wide_sc.a = TensorView::matrix(wide_s.get(), DType::kF32, m, k / 128, k / 128 + 1, dev);
        }
        const TensorView wide = TensorView::matrix(wide_a.get(), as[r].view.dtype, m, k, 2 * k, dev);
        EXPECT_EQ(test::poisoned_call(g, *op, m, wide, b.view, wide_sc, bytes, st.s), got)
            << "m " << m << ": A (and the scales) at a row stride give other bytes";
      }
    });
  }
}

// fused-ce at every tile it is built for (fused/tile_choice.hpp's candidates, forced through the
// testing hook), W = 2, every quant it runs: the same bytes as weave::Gemm at that tile over the
// stacked rows, within the reference, identical on both ranks; plan(m) names the forced tile. N 640
// leaves a partial column tile for the 256- and 160-wide tiles; M of one row, a partial tile
// straddling the ranks' rows, several tiles. The planner reaches only some tiles at the other
// tests' shapes; this holds every built instance.
TEST(EmulatedAllGatherGemm, FusedCeAtEveryBuiltTileEqualsTheGemmOfTheStackedRows) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  if (!fits_queues(Mode::kFusedCe, world)) GTEST_SKIP() << test::not_run_reason(Mode::kFusedCe, world);
  const int64_t n = 640, k = 1024, m_max = 1000;
  bench::EmulatedWorld ew(world, 0, 20);
  int cases = 0;
  for (const test::QuantCase& q : agm_quants()) {
    if (!fused::agm_fused_ce_quant(q.quant, q.out)) continue;
    const auto cands = fused::agm_tile_candidates(agm_config(q, Mode::kFusedCe, n, k, m_max));
    EXPECT_GE(cands.size(), 2u) << q.name << ": the tiles fused-ce is built for";
    for (const auto& t : cands) {
      SCOPED_TRACE(std::string(q.name) + " tile " + std::to_string(t.block_m) + "x" + std::to_string(t.block_n));
      fused::AllGatherGemmHooks hooks;
      hooks.tile = {t.block_m, t.block_n};
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto op = make(g, agm_config(q, Mode::kFusedCe, n, k, m_max), hooks);
        std::vector<bench::DeviceOperand> bs;
        bs.push_back(bench::upload_operand(
            bench::quantize_parallel(bench::random_operand(78, n, k), n, k, q.quant, ref::Operand::kB), dev));
        const bench::DeviceOperand& b = bs[0];
        Stream st;
        for (int64_t m : {int64_t(1), int64_t(77), int64_t(300), m_max}) {
          const AllGatherGemmPlan plan = op->plan(m);
          EXPECT_EQ(plan.block_m, t.block_m) << "m " << m << ": " << plan.reason;
          EXPECT_EQ(plan.block_n, t.block_n) << "m " << m << ": " << plan.reason;
          const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, 700 + m, m, k, q.quant, dev);
          const size_t bytes = static_cast<size_t>(world * m * n) * dtype_bytes(q.out);
          const std::vector<uint8_t> got =
              test::poisoned_call(g, *op, m, as[r].view, b.view, scales_of(as[r], b), bytes, st.s);
          EXPECT_EQ(op->last_mode(), Mode::kFusedCe);
          EXPECT_EQ(stacked_gemm(*op, as, b, m, st.s), got) << "m " << m << ": differs from weave::Gemm at the tile";
          const auto hashes = g.all_gather(fnv1a64(got.data(), bytes), "the output hash");
          EXPECT_EQ(hashes[1], hashes[0]) << "m " << m << ": the ranks differ";
          const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
          AgTraits::Reference(q, p, as, bs, r, dev, st.s).expect_close(got, "fused-ce");
          g.barrier();  // nobody starts the next m while a peer still reads this one's rows
        }
      });
      ++cases;
    }
  }
  EXPECT_GT(cases, 0);
  std::printf("  fused-ce: %d quant x tile cases, 4 M each (the stacked GEMM at the tile, reference)\n", cases);
}

// The landed wait's negative control (W = 2, bf16, one-hot operands): both ranks' copy streams start
// 40 ms late and every call poisons the gathered rows first. With the wait the GEMM reads the
// peer's rows only once they landed (0 wrong); without it (skip_landed_wait) the tiles of the
// peer's rows read the poison (the peer's rows wrong, the own rows right).
TEST(EmulatedAllGatherGemm, FusedCeTilesWaitForThePeersRowsAndTheNegativeControlDoesNot) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  if (!fits_queues(Mode::kFusedCe, world)) GTEST_SKIP() << test::not_run_reason(Mode::kFusedCe, world);
  const int64_t n = 512, k = 512, m = 1000;
  for (bool skip : {false, true}) {
    SCOPED_TRACE(skip ? "landed wait skipped" : "landed wait on");
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      fused::AllGatherGemmHooks hooks;
      hooks.skip_landed_wait = skip;
      hooks.delay_pull_ns = 40'000'000;
      auto op = make(g, agm_config(AgTraits::kQuants[0], Mode::kFusedCe, n, k, m), hooks);
      test::AgOneHot oh(m, n, k, g.rank());
      Stream st;
      for (uint64_t seed : {11u, 12u}) {
        oh.set_a(seed, m);
        const TensorView ga = op->gathered_a(m);
        WEAVE_CHECK_CUDA(cudaMemsetAsync(ga.data, 0xFF, static_cast<size_t>(world * m * k) * 2, st.s));  // NaN rows
        g.barrier();
        op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
        g.barrier();
        comm::sync_stream_bounded(st.s, 20, "the fused-ce call");
        op->check();
        const auto h = download<uint16_t>(op->output(m).data, static_cast<size_t>(world * m * n));
        const std::vector<int64_t> wrong = oh.wrong(h, seed, world, m);
        EXPECT_EQ(wrong[g.rank()], 0) << "the own rows are staged before the kernel";
        if (skip)
          EXPECT_GT(wrong[1 - g.rank()], 0) << "without the wait the peer's rows must be read before they land";
        else
          EXPECT_EQ(wrong[1 - g.rank()], 0) << "rank " << g.rank() << " seed " << seed;
        if (g.rank() == 0)
          std::printf("  fused-ce, landed wait %s: %lld wrong elements from the peer's rows\n", skip ? "SKIPPED" : "on",
                      static_cast<long long>(wrong[1]));
        g.barrier();
      }
    });
  }
}

// fused-ce against the split modes in graphs. A graph per rank cannot time fused-ce in the emulated
// world (its kernel waits for its own copy streams, and per-rank graphs enter the GPU's shared
// queues as the driver schedules them: the bench's first replay stalled until the 30 s timeout),
// so, as GemmAllReduce fused-ce's graph test, both ranks' calls go into ONE graph per mode (rank
// 1's stream joins rank 0's capture through an event). 200 replays per mode, every replay's output
// counted wrong on the device (one-hot operands, bf16), and the time per replay printed: one GPU,
// the ranks on half its SMs each and the "link" local HBM, so a measure of the overlap, not NVLink.
TEST(EmulatedAllGatherGemm, FusedCeInOneGraphAgainstTheSplitModes) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2, replays = 200;
  if (!fits_queues(Mode::kFusedCe, world)) GTEST_SKIP() << test::not_run_reason(Mode::kFusedCe, world);
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape sh : {Shape{2048, 1024, 4096}, Shape{512, 7168, 4096}}) {
    bench::EmulatedWorld ew(world, 0, 20);
    std::vector<cudaStream_t> streams(world, nullptr);
    std::vector<cudaEvent_t> joined(world, nullptr);  // [r]: rank r's part of the capture is enqueued
    ew.run([&](comm::Group& g) {
      const int r = g.rank();
      test::AgOneHot oh(sh.m, sh.n, sh.k, r);
      oh.set_a(31, sh.m);
      const test::AgDeviceExpect want(oh, 31, world, sh.m, false);
      Stream st;
      streams[r] = st.s;
      WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&joined[r], cudaEventDisableTiming));
      bench::DeviceBuffer wrong(8);
      WEAVE_CHECK_CUDA(cudaMemset(wrong.get(), 0, 8));
      std::vector<double> us, eager_us;
      const int chunk_arms[] = {1, 2, 8, 16};
      for (int arm = 0; arm < 9; ++arm) {
        // Arm 4: fused-ce without its landed waits (a diagnostic: the time the waits cost; wrong output,
        // not counted); arms 5..8: fused-ce with at most 1, 2, 8, 16 chunks per peer (the op: kAgmPullChunks).
        const Mode mode = arm < 4 ? std::array{Mode::kGemmOnly, Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedCe}[arm]
                                  : Mode::kFusedCe;
        fused::AllGatherGemmHooks hooks;
        hooks.skip_landed_wait = arm == 4;
        if (arm >= 5) hooks.pull_chunks = chunk_arms[arm - 5];
        auto op = make(g, agm_config(AgTraits::kQuants[0], mode, sh.n, sh.k, sh.m), hooks);
        g.barrier();
        if (r == 0) {
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeRelaxed));
          WEAVE_CHECK_CUDA(cudaEventRecord(joined[0], st.s));
        }
        g.barrier();
        if (r != 0) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, joined[0], 0));  // joins rank 0's capture
        const TensorView out = op->output(sh.m);
        WEAVE_CHECK_CUDA(cudaMemsetAsync(out.data, 0xFF, static_cast<size_t>(world * sh.m * sh.n) * 2, st.s));
        op->run(sh.m, oh.a_view(sh.m, g.device()), oh.b_view(g.device()), {}, st.s);
        if (mode != Mode::kGemmOnly && arm != 4) want.count_wrong(out.data, false, wrong.as<unsigned long long>(), 64, st.s);
        if (r != 0) WEAVE_CHECK_CUDA(cudaEventRecord(joined[r], st.s));
        g.barrier();
        if (r == 0) {
          for (int q = 1; q < world; ++q) WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, joined[q], 0));
          us.push_back(end_capture_and_time_us(st.s, replays, "one-graph replays"));
        }
        g.barrier();  // every replay of both ranks' parts is complete
        // Eager calls, each rank on its own stream (lockstep enqueue): the time per call is the
        // later rank's, events around 20 back-to-back calls after 3 warm-ups.
        cudaEvent_t e0, e1;
        WEAVE_CHECK_CUDA(cudaEventCreate(&e0));
        WEAVE_CHECK_CUDA(cudaEventCreate(&e1));
        for (int i = 0; i < 23; ++i) {
          if (i == 3) WEAVE_CHECK_CUDA(cudaEventRecord(e0, st.s));
          op->run(sh.m, oh.a_view(sh.m, g.device()), oh.b_view(g.device()), {}, st.s);
          g.barrier();
        }
        WEAVE_CHECK_CUDA(cudaEventRecord(e1, st.s));
        comm::sync_stream_bounded(st.s, 60, "eager calls");
        float ms = 0;
        WEAVE_CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        const auto per_rank = g.all_gather(static_cast<uint64_t>(1000.0 * 1000.0 * ms / 20), "eager ns per call");
        eager_us.push_back(*std::max_element(per_rank.begin(), per_rank.end()) / 1000.0);
        op->check();
        g.barrier();
      }
      unsigned long long bad = 0;
      wrong.download(&bad, 8);
      EXPECT_EQ(bad, 0ull) << "rank " << r << ": wrong elements over the split and fused-ce replays";
      if (r == 0)
        std::printf("  eager, each rank its own stream (us per call, the later rank): gemm-only %.1f, split-lsa %.1f, "
                    "split-ce %.1f, fused-ce %.1f (fused-ce / best split %.3f); fused-ce without its landed waits %.1f\n",
                    eager_us[0], eager_us[1], eager_us[2], eager_us[3], eager_us[3] / std::min(eager_us[1], eager_us[2]),
                    eager_us[4]);
      if (r == 0)
        std::printf("  fused-ce by chunks per peer (eager / one graph, us): 1: %.1f / %.1f, 2: %.1f / %.1f, %d (the op's): "
                    "%.1f / %.1f, 8: %.1f / %.1f, 16: %.1f / %.1f\n",
                    eager_us[5], us[5], eager_us[6], us[6], fused::kAgmPullChunks, eager_us[3], us[3], eager_us[7], us[7],
                    eager_us[8], us[8]);

      if (r == 0) {
        // What fused-ce's pulls cost alone here: both ranks' copies of a peer's rows (one copy
        // engine copy each, then the same bytes in fused-ce's chunks), two streams, one graph.
        const size_t bytes = static_cast<size_t>(sh.m * sh.k) * 2;
        const AllGatherGemmConfig ce = agm_config(AgTraits::kQuants[0], Mode::kFusedCe, sh.n, sh.k, sh.m);
        int sms = 0;
        WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g.device()));
        const int block_m =  // the op's tile on its share of the SMs
            fused::agm_tile_plan(ce, g.world_size(), sh.m, sms / g.world_size(), fused::agm_tile_candidates(ce)).block_m;
        const int chunks = fused::agm_chunks(sh.m, block_m).chunks;  // the most the op allows
        bench::DeviceBuffer src(2 * bytes), dst(2 * bytes);
        Stream s1, s2;
        cudaEvent_t fork, j1, j2;
        WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
        WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&j1, cudaEventDisableTiming));
        WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&j2, cudaEventDisableTiming));
        double pull_us[3] = {0, 0, 0};
        const comm::StreamMemOps mem_ops(g.device());
        bench::DeviceBuffer words(4 * 2 * comm::kMaxChunks);
        // 2: the chunks with the op's landed word (a stream write) after each
        for (int chunked = 0; chunked < 3; ++chunked) {
          WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeRelaxed));
          WEAVE_CHECK_CUDA(cudaEventRecord(fork, st.s));
          for (int i = 0; i < 2; ++i) {
            cudaStream_t cs = i == 0 ? s1.s : s2.s;
            WEAVE_CHECK_CUDA(cudaStreamWaitEvent(cs, fork, 0));
            const int pieces = chunked ? chunks : 1;
            for (int c = 0; c < pieces; ++c) {
              const size_t at = i * bytes + c * (bytes / pieces);
              WEAVE_CHECK_CUDA(cudaMemcpyAsync(static_cast<char*>(dst.get()) + at, static_cast<char*>(src.get()) + at,
                                               bytes / pieces, cudaMemcpyDeviceToDevice, cs));
              if (chunked == 2) mem_ops.write(cs, words.as<uint32_t>() + i * comm::kMaxChunks + c, 1u);

            }
            WEAVE_CHECK_CUDA(cudaEventRecord(i == 0 ? j1 : j2, cs));
            WEAVE_CHECK_CUDA(cudaStreamWaitEvent(st.s, i == 0 ? j1 : j2, 0));
          }
          pull_us[chunked] = end_capture_and_time_us(st.s, replays, "copy-engine replays");
        }
        cudaEventDestroy(fork);
        cudaEventDestroy(j1);
        cudaEventDestroy(j2);
        std::printf("  m %lld per rank, N %lld, K %lld, W 2 in one graph on one GPU (us per call of both ranks): "
                    "gemm-only %.1f, split-lsa %.1f, split-ce %.1f, fused-ce %.1f (fused-ce / best split %.3f, "
                    "/ gemm-only %.3f; without its landed waits %.1f); the pulls alone (2 x %.1f MB by copy engines): %.1f us in one copy each, "
                    "%.1f in %d chunks, %.1f with a landed word after each\n",
                    static_cast<long long>(sh.m), static_cast<long long>(sh.n), static_cast<long long>(sh.k), us[0],
                    us[1], us[2], us[3], us[3] / std::min(us[1], us[2]), us[3] / us[0], us[4], bytes / 1e6, pull_us[0],
                    pull_us[1], chunks, pull_us[2]);
      }
      WEAVE_CHECK_CUDA(cudaEventDestroy(joined[r]));
      g.barrier();
    });
  }
}

// auto with a calibration table (AllGatherGemmConfig::calibration), W = 2, every quant fused-ce runs:
// per call the mode the table measured fastest near m (fused-ce at 8 and 300, split-lsa at 64, the
// model at 1024), interleaved on one op; each call's output the same bytes as weave::Gemm over the
// stacked rows at that mode's plan, identical on both ranks, within the reference, the gathered A
// bitwise; plan(m) says "measured fastest" or "the model"; self_test passes through both modes; a
// table with an explicit mode, for another K, or different on the ranks is refused at construction.
TEST(EmulatedAllGatherGemm, AutoFollowsACalibrationTablePerCall) {
  WEAVE_REQUIRE_GPUS(1);
  const int world = 2;
  if (!fits_queues(Mode::kFusedCe, world)) GTEST_SKIP() << test::not_run_reason(Mode::kFusedCe, world);
  const int64_t n = 512, k = 1024, m_max = 1024;
  bench::EmulatedWorld ew(world, 0, 20);
  for (const test::QuantCase& q : agm_quants()) {
    if (!fused::agm_fused_ce_quant(q.quant, q.out)) continue;
    SCOPED_TRACE(std::string(q.name));
    const std::string head = "weave-calibration 1\nop ag-gemm\nquant " + std::string(to_string(q.quant)) +
                             "\nout bf16\nn 512\nworld 2\nwhere test\n";
    const test::ScopedTextFile table("weave-agm-auto", head + "k 1024\nm 8 fused-ce\nm 64 split-lsa\nm 300 fused-ce\n");
    const test::ScopedTextFile other("weave-agm-other", head + "k 1024\nm 8 split-lsa\n");
    const test::ScopedTextFile wrong_k("weave-agm-k", head + "k 2048\nm 8 fused-ce\n");
    ew.run([&](comm::Group& g) {
      const int dev = g.device(), r = g.rank();
      AllGatherGemmConfig cfg = agm_config(q, Mode::kAuto, n, k, m_max);
      cfg.calibration = table.path;
      auto op = make(g, cfg);
      EXPECT_NE(op->describe().find("its fused-ce rows run fused-ce"), std::string::npos) << op->describe();
      std::vector<bench::DeviceOperand> bs;
      bs.push_back(bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(91, n, k), n, k, q.quant, ref::Operand::kB), dev));
      const bench::DeviceOperand& b = bs[0];
      Stream st;
      struct Call {
        int64_t m;
        Mode mode;
        const char* reason;
      };
      const Call calls[] = {{8, Mode::kFusedCe, "measured fastest near m = 8"},
                            {64, Mode::kSplitLsa, "measured fastest near m = 64"},
                            {300, Mode::kFusedCe, "measured fastest near m = 300"},
                            {7, Mode::kFusedCe, "measured fastest near m = 7"},
                            {1024, Mode::kSplitLsa, "has no row within 2x of m = 1024; the model"},
                            {64, Mode::kSplitLsa, "measured fastest near m = 64"},
                            {8, Mode::kFusedCe, "measured fastest near m = 8"}};
      uint64_t seed = 4000;
      for (const Call& c : calls) {
        const AllGatherGemmPlan p = op->plan(c.m);
        EXPECT_EQ(p.mode, c.mode) << "m " << c.m << ": " << p.reason;
        EXPECT_NE(p.reason.find(c.reason), std::string::npos) << p.reason;
        const std::vector<bench::DeviceOperand> as = test::upload_every_a(world, seed += 100, c.m, k, q.quant, dev);
        expect_call_is_the_stacked_gemm(g, *op, q, c.m, as, bs, c.mode, st.s);
      }
      for (const Call& c : {calls[0], calls[1]}) {
        const SelfTestReport rep = op->self_test(c.m);
        EXPECT_TRUE(rep.ok) << rep.detail;
        EXPECT_EQ(op->last_mode(), c.mode) << "self_test at m " << c.m;
      }
      auto refused = [&](const AllGatherGemmConfig& bad, Status status) {
        return test::error_of([&] { make(g, bad); }, status);
      };
      AllGatherGemmConfig bad = cfg;
      bad.mode = Mode::kFusedCe;
      EXPECT_NE(refused(bad, Status::kInvalidArgument).find("only mode auto consults a calibration"), std::string::npos);
      bad = cfg;
      bad.calibration = wrong_k.path;
      EXPECT_NE(refused(bad, Status::kInvalidArgument).find("is for another op shape: k 2048 (this op: 1024)"),
                std::string::npos);
      bad = cfg;
      bad.calibration = r == 0 ? table.path : other.path;
      EXPECT_NE(refused(bad, Status::kMismatch).find("calibration"), std::string::npos);
      g.barrier();
    });
  }
}

// Bad inputs: every argument rule named before any GPU work, the op usable after each.
TEST(EmulatedAllGatherGemm, BadInputsAreClearErrors) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 256, k = 256, m_max = 512;
  bench::EmulatedWorld ew(2, 0, 20);
  ew.run([&](comm::Group& g) {
    const int dev = g.device();
    // What cannot be built: a layout whose scales interleave ranks, split-nccl without NCCL.
    AllGatherGemmConfig mn = agm_config(AgTraits::kQuants[0], Mode::kSplitLsa, n, k, m_max);
    mn.quant = ScaleMode::kBlockscale;
    mn.scale_layout = ScaleLayout::kMnMajor;
    EXPECT_NE(test::error_of([&] { make(g, mn); }).find("scale_layout must be raw"), std::string::npos);
    AllGatherGemmConfig mx = agm_config(AgTraits::kQuants[0], Mode::kFusedCe, n, k, m_max);
    mx.quant = ScaleMode::kMxfp8;
    EXPECT_NE(test::error_of([&] { make(g, mx); }).find("mode fused-ce runs quant bf16, ptpc and blockscale"),
              std::string::npos);
    EXPECT_NE(test::error_of([&] { make(g, agm_config(AgTraits::kQuants[0], Mode::kSplitNccl, n, k, m_max)); },
                             Status::kUnavailable)
                  .find("split-nccl needs an NCCL communicator"),
              std::string::npos);
    auto op = make(g, agm_config(AgTraits::kQuants[0], Mode::kSplitLsa, n, k, m_max));
    test::AgOneHot oh(m_max, n, k, g.rank());
    oh.set_a(9, m_max);
    Stream st;
    const TensorView a = oh.a_view(100, dev), b = oh.b_view(dev);
    struct Bad {
      std::function<void()> call;
      const char* needle;
    };
    bench::DeviceBuffer narrow(2 * 100 * n * 2);
    const std::vector<Bad> bads = {
        {[&] { op->run(0, a, b, {}, st.s); }, "m must be in 1..512"},
        {[&] { op->run(513, a, b, {}, st.s); }, "m must be in 1..512"},
        {[&] { op->run(100, oh.a_view(99, dev), b, {}, st.s); }, "argument 'A'"},
        {[&] { op->run(100, a, TensorView::matrix(oh.b.get(), DType::kBF16, n - 8, k, dev), {}, st.s); }, "argument 'B'"},
        {[&] { op->run(100, a, b, {}, TensorView::matrix(narrow.get(), DType::kBF16, 2 * 100, n - 8, dev), st.s); },
         "argument 'out'"},
        {[&] { op->run(100, a, b, {}, op->output(100), st.s); }, "argument 'out'"},
        {[&] { op->run(100, TensorView::matrix(op->output(100).data, DType::kBF16, 100, k, dev), b, {}, st.s); },
         "argument 'A': lies in the op's window"},
        {[&] {
           const TensorView shifted = TensorView::matrix(static_cast<char*>(op->input(100).data) + k * 2, DType::kBF16,
                                                         100, k, dev);
           op->run(100, shifted, b, {}, st.s);
         },
         "argument 'A': lies in the op's window"},
    };
    for (const Bad& bad : bads) {
      const std::string msg = test::error_of(bad.call);
      EXPECT_NE(msg.find(bad.needle), std::string::npos) << "wanted '" << bad.needle << "' in: " << msg;
    }
    // The op is usable after every refusal (nothing was enqueued).
    const SelfTestReport rep = op->self_test(100);
    EXPECT_TRUE(rep.ok) << rep.detail;
  });
}
