// What the fused operators' emulated-world tests share (the typed suite test_fused_ops_typed*.cu and
// each operator's own tests, test_gemm_all_gather.cu and test_gemm_all_reduce*.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "comm/device_error.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "support/expect_error.hpp"
#include "support/graph_replay.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"

namespace weave::test {

// Storage of scales rearranged for a layout other than raw (kept alive while a call uses them).
struct LayoutScales {
  bench::MnMajorScales mn;               // blockscale mn-major: A's scales M-contiguous
  bench::DeviceBuffer a_packed, b_packed;  // mxfp8 packed: the words of ref::pack_mxfp8_scales
};

// The scales of `a` and `b` (raw, as bench::upload_operand made them) in `layout`: the same for
// raw; for blockscale mn-major A's scales copied M-contiguous; for mxfp8 packed both operands'
// ue8m0 bytes (random per block, not 127) packed on the host by weave::ref::pack_mxfp8_scales and
// uploaded. `held` keeps the copies. References keep reading the raw originals, so a wrong
// rearrangement shows.
inline GemmScales scales_in_layout(ScaleLayout layout, const bench::DeviceOperand& a, const bench::DeviceOperand& b,
                                   LayoutScales& held) {
  if (layout == ScaleLayout::kPacked) {
    auto pack = [](const bench::DeviceOperand& o, bench::DeviceBuffer& buf) {
      const int64_t rows = o.scale_view.rows(), groups = o.scale_view.cols(), k_words = (groups + 3) / 4;
      std::vector<uint8_t> raw(static_cast<std::size_t>(rows * groups));
      o.scales.download(raw.data(), raw.size());
      const std::vector<uint32_t> words = ref::pack_mxfp8_scales(raw.data(), rows, groups);
      buf = bench::DeviceBuffer(words.size() * 4);
      buf.upload(words.data(), words.size() * 4);
      return TensorView::matrix(buf.get(), DType::kUE8M0, k_words, 4 * rows, o.scale_view.device);
    };
    return GemmScales{pack(a, held.a_packed), pack(b, held.b_packed)};
  }
  if (layout != ScaleLayout::kMnMajor) return GemmScales{a.scale_view, b.scale_view};
  ref::QuantMatrix q;
  q.mode = ScaleMode::kBlockscale;
  q.scale_rows = a.scale_view.rows();
  q.scale_cols = a.scale_view.cols();
  q.scales.resize(static_cast<std::size_t>(q.scale_rows * q.scale_cols));
  a.scales.download(q.scales.data(), q.scales.size() * sizeof(float));
  held.mn = bench::upload_mn_major_scales(q, a.scale_view.device);
  return GemmScales{held.mn.view, b.scale_view};
}

template <class Mode>
std::string mode_name(Mode m) {
  return std::string(to_string(m));
}

// Whether a mode runs copy streams beside the caller's (split-ce; GemmAllGather's fused-ce).
template <class Mode>
bool uses_copy_streams(Mode mode) {
  if constexpr (requires { Mode::kFusedCe; })
    if (mode == Mode::kFusedCe) return true;
  return mode == Mode::kSplitCe;
}

// What the emulated world can run: the copy-engine modes need a copy stream per peer on every
// rank (EmulatedWorld::copy_engine_unsupported_reason); every other mode a stream per rank and its
// self-test's.
template <class Mode>
bool fits_queues(Mode mode, int world) {
  if (uses_copy_streams(mode)) return bench::EmulatedWorld::copy_engine_unsupported_reason(world).empty();
  return bench::EmulatedWorld::queue_budget_ok(2 * world);
}

// Why `mode` cannot run in an emulated world of `world` ranks ("" when it can): the copy-engine
// modes' limit (EmulatedWorld::copy_engine_unsupported_reason: W = 2 only), or too few hardware
// queues for a stream per rank and its self-test's.
template <class Mode>
std::string not_run_reason(Mode mode, int world) {
  if (uses_copy_streams(mode)) return bench::EmulatedWorld::copy_engine_unsupported_reason(world);
  if (!bench::EmulatedWorld::queue_budget_ok(2 * world))
    return std::to_string(2 * world) + " streams > " + std::to_string(bench::EmulatedWorld::hardware_queues()) +
           " hardware queues (CUDA_DEVICE_MAX_CONNECTIONS)";
  return "";
}

// A combination a test loop leaves out, said with its reason (not a silent `continue`; GTEST_SKIP
// would end the whole test at the first one): "  not run: <what> at W<world>: <why>".
inline void print_not_run(const std::string& what, int world, const std::string& why) {
  std::printf("  not run: %s at W%d: %s\n", what.c_str(), world, why.c_str());
}

// The worlds beyond 2, 4 and 8 the typed suite also runs (fewer cases there: the trait's first
// quant): odd worlds and 6 leave a remainder wherever rows, bands or chunks are cut by W.
inline constexpr int kOtherWorlds[] = {3, 5, 6, 7};

// The relative-L2 bound of a fused op's whole output against its reference, the same at every
// world size (the per-element bounds loosen with W: a term lost in every element would still show
// here). bf16 outputs measured 0.0017-0.0024 (rounding), fp32 about 1e-4.
inline constexpr double kFusedRelL2Bound = 1e-2;

// A rank's stream for the length of a test step (non-blocking, destroyed at the end).
using Stream = OwnedStream;

// Every source rank's A_s [m, k] (seed seed_base + 17 s + m), quantised as `quant`: each rank
// regenerates all of them, for the references (per source, or summed).
inline std::vector<bench::DeviceOperand> upload_every_a(int world, uint64_t seed_base, int64_t m, int64_t k,
                                                        ScaleMode quant, int dev) {
  std::vector<bench::DeviceOperand> as;
  for (int s = 0; s < world; ++s)
    as.push_back(bench::upload_operand(
        bench::quantize_parallel(bench::random_operand(seed_base + 17 * s + m, m, k), m, k, quant, ref::Operand::kA),
        dev));
  return as;
}

// Every source rank's mxfp8 A_s [m, k] (seed seed_base + 17 s + m); rank `odd`'s (-1: none) with
// every 97th scale byte set to 5, outside the range the bf16 route carries exactly.
inline std::vector<bench::DeviceOperand> mx_a_with_odd_rank(int world, int odd, int64_t m, int64_t k,
                                                            uint64_t seed_base, int dev) {
  std::vector<bench::DeviceOperand> as;
  for (int s = 0; s < world; ++s) {
    ref::QuantMatrix q = bench::quantize_parallel(bench::random_operand(seed_base + 17 * s + m, m, k), m, k,
                                                  ScaleMode::kMxfp8, ref::Operand::kA);
    if (s == odd)
      for (size_t i = 0; i < q.ue8m0.size(); i += 97) q.ue8m0[i] = 5;
    as.push_back(bench::upload_operand(q, dev));
  }
  return as;
}

// One call of `op` with every rank in step (barriers around it): its output NaN-poisoned first,
// the call, a bounded sync, check(); returns the output's first `bytes` bytes. The host bound is
// longer than the op's own waits, so a stuck wait is reported by the device record (who waited for
// what). Nothing is enqueued after the call before the sync (emulated_world.hpp "Queues").
template <class Op>
std::vector<uint8_t> poisoned_call(comm::Group& g, Op& op, int64_t m, const TensorView& a, const TensorView& b,
                                   const GemmScales& sc, size_t bytes, cudaStream_t st) {
  g.barrier();
  WEAVE_CHECK_CUDA(cudaMemsetAsync(op.output(m).data, 0xFF, bytes, st));
  op.run(m, a, b, sc, st);
  comm::sync_stream_bounded(st, 2 * g.timeout_s() + 5, "a poisoned call of " + op.describe());
  op.check();
  std::vector<uint8_t> out(bytes);
  WEAVE_CHECK_CUDA(cudaMemcpy(out.data(), op.output(m).data, bytes, cudaMemcpyDeviceToHost));
  g.barrier();
  return out;
}

// Instantiates `graphs` (each rank its own, captured apart), then replays them `replays` times in
// an order drawn from `seed` (the same on every rank: every rank makes the same calls), one barrier
// after each launch (lockstep enqueue: a replay ends in a check that waits for the call,
// testing/emulated_world.hpp "Queues"), waits (bounded) and destroys the executables. Returns how
// often each graph was replayed (support/graph_replay.hpp, shared with the multi-GPU tests).
inline std::vector<int> replay_graphs_in_lockstep(comm::Group& g, const std::vector<cudaGraph_t>& graphs, int replays,
                                                  uint32_t seed, cudaStream_t st) {
  const auto barrier = [&g] { g.barrier(); };
  return replay_graphs(graphs, replays, seed, st, barrier, barrier);
}

// A caller's `out` for run(..., out, stream): [rows, cols] of `dtype` with row stride `ld` (> cols:
// a column slice of a wider buffer) in a buffer of its own.
struct CallerOut {
  bench::DeviceBuffer buf;
  TensorView view;
  CallerOut(DType dtype, int64_t rows, int64_t cols, int64_t ld, int dev)
      : buf(static_cast<size_t>(rows * ld) * dtype_bytes(dtype)),
        view(TensorView::matrix(buf.get(), dtype, rows, cols, ld, dev)) {}
  // NaN (0xFF bytes) everywhere, out's rows and the columns beside them, stream-ordered.
  void poison(cudaStream_t st) const { WEAVE_CHECK_CUDA(cudaMemsetAsync(buf.get(), 0xFF, buf.bytes(), st)); }
  size_t row_bytes() const { return static_cast<size_t>(view.cols()) * dtype_bytes(view.dtype); }
  // out's rows, densely, on the host.
  std::vector<uint8_t> rows() const {
    std::vector<uint8_t> h(static_cast<size_t>(view.rows()) * row_bytes());
    WEAVE_CHECK_CUDA(cudaMemcpy2D(h.data(), row_bytes(), view.data, static_cast<size_t>(view.ld()) * dtype_bytes(view.dtype),
                                  row_bytes(), static_cast<size_t>(view.rows()), cudaMemcpyDeviceToHost));
    return h;
  }
  // Bytes of the buffer outside out's columns that are no longer poison.
  int64_t written_beside() const {
    std::vector<uint8_t> h(buf.bytes());
    buf.download(h.data(), h.size());
    const size_t pitch = static_cast<size_t>(view.ld()) * dtype_bytes(view.dtype);
    int64_t bad = 0;
    for (size_t i = 0; i < h.size(); ++i) bad += (i % pitch) >= row_bytes() && h[i] != 0xFF;
    return bad;
  }
};

// After a call with `out` (synchronised): out's rows are the window's view (op.output(m)) bitwise,
// and nothing beside them was written.
template <class Op>
void expect_out_is_the_window_view(const Op& op, int64_t m, const CallerOut& out, const std::string& what) {
  const TensorView w = op.output(m);
  ASSERT_EQ(w.rows(), out.view.rows()) << what;
  std::vector<uint8_t> hw(static_cast<size_t>(w.rows()) * out.row_bytes());
  WEAVE_CHECK_CUDA(cudaMemcpy(hw.data(), w.data, hw.size(), cudaMemcpyDeviceToHost));
  const std::vector<uint8_t> ho = out.rows();
  int64_t differ = 0;
  for (int64_t i = 0; i < w.rows(); ++i)
    differ += std::memcmp(ho.data() + i * out.row_bytes(), hw.data() + i * out.row_bytes(), out.row_bytes()) != 0;
  EXPECT_EQ(differ, 0) << what << ": rows of out that differ from the window's view, of " << w.rows();
  EXPECT_EQ(out.written_beside(), 0) << what << ": bytes written beside out's columns";
}

// Bad `out`s, one per rule of fused/caller_output.hpp, each refused by run() with kInvalidArgument
// naming 'out' and the rule before any GPU work: the window's output (poisoned here first; every
// rank must be between calls) keeps its poison and the stream stays idle. `good` is a valid out for
// m rows; `peer_window` a peer's window as mapped here.
template <class Op>
void expect_bad_outs_refused_before_gpu_work(Op& op, int64_t m, const TensorView& a, const TensorView& b,
                                             const GemmScales& sc, const CallerOut& good, const char* peer_window,
                                             int peer, cudaStream_t st) {
  const TensorView win = op.output(m);
  const size_t win_bytes = static_cast<size_t>(win.rows()) * good.row_bytes();
  WEAVE_CHECK_CUDA(cudaMemsetAsync(win.data, 0xFF, win_bytes, st));
  comm::sync_stream_bounded(st, 20, "poisoning the window's output before the refused calls");
  const TensorView& v = good.view;
  const int64_t rows = v.rows(), cols = v.cols(), ld = v.ld();
  const DType other = v.dtype == DType::kF32 ? DType::kBF16 : DType::kF32;
  char* base = static_cast<char*>(v.data);
  TensorView col_strided = v;
  col_strided.strides = {2 * ld, 2, 0, 0};
  struct Case {
    TensorView out;
    std::string needle;
  };
  std::vector<Case> cases = {
      {TensorView::matrix(base, other, rows, cols, ld, v.device), "argument 'out': dtype must be " + std::string(to_string(v.dtype))},
      {TensorView::matrix(base, v.dtype, rows - 1, cols, ld, v.device),
       "argument 'out': shape must be [" + std::to_string(rows) + ", " + std::to_string(cols) + "]"},
      {TensorView::matrix(base, v.dtype, rows, cols - 8, ld, v.device), "argument 'out': shape must be"},
      {TensorView::matrix(base, v.dtype, rows, cols, ld, v.device + 1), "argument 'out': must live in cuda:"},
      {col_strided, "argument 'out': last dimension must be contiguous"},
      {TensorView::matrix(base + 2, v.dtype, rows, cols, ld, v.device), "argument 'out': base address must be 16-byte aligned"},
      {win, "argument 'out': overlaps the op's window"},
      {TensorView::matrix(const_cast<char*>(peer_window), v.dtype, rows, cols, ld, v.device),
       "argument 'out': overlaps the op's window (rank " + std::to_string(peer) + "'s"},
  };
  if (rows > 1) cases.push_back({TensorView::matrix(base, v.dtype, rows, cols, cols - 8, v.device), "rows would overlap"});
  for (const Case& c : cases) {
    std::string msg;
    try {
      op.run(m, a, b, sc, c.out, st);
      ADD_FAILURE() << "out " << c.out.describe() << " was taken; wanted '" << c.needle << "'";
    } catch (const Error& e) {
      msg = e.message();
      EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    }
    EXPECT_NE(msg.find(c.needle), std::string::npos) << "wanted '" << c.needle << "' in: " << msg;
  }
  EXPECT_EQ(cudaStreamQuery(st), cudaSuccess) << "a refused call left work on the stream";
  std::vector<uint8_t> h(win_bytes);
  WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), win.data, win_bytes, cudaMemcpyDeviceToHost));
  int64_t written = 0;
  for (uint8_t byte : h) written += byte != 0xFF;
  EXPECT_EQ(written, 0) << "a refused call wrote the window's output";
}

// A or B 2 bytes off a 16-byte boundary (the TMA maps need 16): run() names the operand and the
// rule. `a_base` / `b_base` are the bases of bf16 A [256, 256] and B [256, 256] (views good_a,
// good_b) on their device; m = 255 with the misaligned A, 256 with the misaligned B.
template <class Op>
void expect_misaligned_a_b_named(Op& op, void* a_base, void* b_base, const TensorView& good_a, const TensorView& good_b,
                                 cudaStream_t st) {
  char* a_off = static_cast<char*>(a_base) + 2;
  char* b_off = static_cast<char*>(b_base) + 2;
  const int dev = good_a.device;
  std::string msg =
      error_of([&] { op.run(255, TensorView::matrix(a_off, DType::kBF16, 255, 256, dev), good_b, {}, st); });
  EXPECT_NE(msg.find("argument 'A': base address must be 16-byte aligned"), std::string::npos) << msg;
  msg = error_of([&] { op.run(256, good_a, TensorView::matrix(b_off, DType::kBF16, 256, 256, dev), {}, st); });
  EXPECT_NE(msg.find("argument 'B': base address must be 16-byte aligned"), std::string::npos) << msg;
}

// Graphs of a call with `out`: one per A variant v (0, 1), each capturing [A variant -> the live A,
// op.run(m, live A, b, {}, out)], replayed in turn six times with out poisoned before each replay;
// after each, check_out(out, 700 + v, m, "replay i"). host_a(seed) is this rank's bf16 A (m_max x k
// elements) for that seed. Every rank calls it (the replays are in lockstep).
template <class Op, class HostA, class CheckOut>
void expect_out_graph_replays(comm::Group& g, Op& op, int64_t m, int64_t k, int64_t m_max, const TensorView& b,
                              const CallerOut& out, HostA host_a, CheckOut check_out, int dev, cudaStream_t st,
                              double bound) {
  bench::DeviceBuffer a_live(m_max * k * 2);
  std::vector<bench::DeviceBuffer> a_var;
  std::vector<cudaGraphExec_t> execs;
  for (int v = 0; v < 2; ++v) {
    const std::vector<uint16_t> h = host_a(700 + v);
    a_var.emplace_back(m_max * k * 2);
    a_var.back().upload(h.data(), h.size() * 2);
    cudaGraph_t graph;
    WEAVE_CHECK_CUDA(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(a_live.get(), a_var.back().get(), m * k * 2, cudaMemcpyDeviceToDevice, st));
    op.run(m, TensorView::matrix(a_live.get(), DType::kBF16, m, k, dev), b, {}, out.view, st);
    WEAVE_CHECK_CUDA(cudaStreamEndCapture(st, &graph));
    cudaGraphExec_t exec;
    WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
    execs.push_back(exec);
  }
  for (int i = 0; i < 6; ++i) {
    out.poison(st);
    g.barrier();
    WEAVE_CHECK_CUDA(cudaGraphLaunch(execs[i % 2], st));
    g.barrier();  // lockstep enqueue (testing/emulated_world.hpp "Queues")
    comm::sync_stream_bounded(st, bound, "a replayed call with out");
    op.check();
    check_out(out, 700 + i % 2, m, "replay " + std::to_string(i));
  }
  for (cudaGraphExec_t e : execs) WEAVE_CHECK_CUDA(cudaGraphExecDestroy(e));
}

// Bad outs (expect_bad_outs_refused_before_gpu_work), then a good call with A = `a` (set from
// `seed` by the caller) whose out passes check_out(out, seed, m, ...): every rank is still in step.
template <class Op, class CheckOut>
void expect_refused_outs_then_a_good_call(comm::Group& g, Op& op, int64_t m, const TensorView& a, const TensorView& b,
                                          const CallerOut& out, const char* peer_window, int peer, uint64_t seed,
                                          CheckOut check_out, cudaStream_t st, double bound) {
  expect_bad_outs_refused_before_gpu_work(op, m, a, b, {}, out, peer_window, peer, st);
  g.barrier();
  out.poison(st);
  op.run(m, a, b, {}, out.view, st);
  comm::sync_stream_bounded(st, bound, "the call after the refused ones");
  op.check();
  check_out(out, seed, m, "after the refused calls");
  g.barrier();
}

// The timeout error of rank `rank`'s first call, whose peer `peer` never made it (comm/device_error.cpp
// describe(): "rank R timed out after T s waiting for peer P's <flag> (...) at window offset O:
// expected epoch >= E, seen S (...)", or "expected line flag E, seen S" for a low-latency line):
// it names the rank, the peer, a flag, and the values. Every word starts at the initial epoch 0
// and the peer wrote none, so seen is 0; a first call waits for epoch 1 (ll_flag(1) = 1 too).
inline void expect_first_call_timeout_names_everything(const std::string& msg, int rank, int peer) {
  EXPECT_NE(msg.find("rank " + std::to_string(rank) + " timed out"), std::string::npos) << msg;
  const std::string waiting = "waiting for peer " + std::to_string(peer) + "'s ";
  const size_t at = msg.find(waiting);
  ASSERT_NE(at, std::string::npos) << "no '" << waiting << "' in: " << msg;
  bool named = false;
  for (comm::FlagKind kind : {comm::FlagKind::kCredit, comm::FlagKind::kArrival, comm::FlagKind::kDone,
                              comm::FlagKind::kReady, comm::FlagKind::kLine})
    named |= msg.compare(at + waiting.size(), std::string(comm::to_string(kind)).size(), comm::to_string(kind)) == 0;
  EXPECT_TRUE(named) << "no flag named after '" << waiting << "' in: " << msg;
  const size_t ex = msg.find(": expected ", at);
  ASSERT_NE(ex, std::string::npos) << "no expected value in: " << msg;
  size_t num = ex + std::string(": expected ").size();
  for (const char* form : {"epoch >= ", "line flag "})
    if (msg.compare(num, std::string(form).size(), form) == 0) num += std::string(form).size();
  char* end = nullptr;
  const unsigned long long expected = std::strtoull(msg.c_str() + num, &end, 10);
  ASSERT_NE(end, msg.c_str() + num) << "no expected value in: " << msg;
  const size_t sn = msg.find(", seen ", static_cast<size_t>(end - msg.c_str()));
  ASSERT_EQ(sn, static_cast<size_t>(end - msg.c_str())) << "no seen value right after the expected one in: " << msg;
  const char* seen_at = msg.c_str() + sn + std::string(", seen ").size();
  const unsigned long long seen = std::strtoull(seen_at, &end, 10);
  ASSERT_NE(end, seen_at) << "no seen value in: " << msg;
  EXPECT_EQ(expected, 1ull) << "a first call waits for epoch 1: " << msg;
  EXPECT_EQ(seen, 0ull) << "a peer that never called wrote nothing: " << msg;
}

// ptpc one-hot operands for the fused ops' tests (their soaks mix ptpc with bf16): the caller's
// B values (small integers, exact in e4m3) as e4m3 [n, k], A's one-hot 1.0 as e4m3 (host_a, from
// the bf16 one-hot A), scale_b = 1 and scale_a[i] = ptpc_row_scale(rank, i), a power of two, so a
// ptpc output is the bf16 one times that factor exactly.
inline float ptpc_row_scale(int s, int64_t i) { return static_cast<float>(0.5 * (1 << ((s + i) % 3))); }

struct PtpcOneHot {
  bench::DeviceBuffer b, scale_a, scale_b;  // e4m3 [n, k]; fp32 [m_max] (this rank's); fp32 [n] ones
  int64_t n, k;
  // b_val(row, col): this rank's B value.
  template <class BValue>
  PtpcOneHot(int rank, int64_t m_max, int64_t n_, int64_t k_, BValue b_val)
      : b(n_ * k_), scale_a(m_max * 4), scale_b(n_ * 4), n(n_), k(k_) {
    std::vector<uint8_t> hb(n * k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) hb[r * k + c] = ref::float_to_e4m3(b_val(r, c));
    b.upload(hb.data(), hb.size());
    std::vector<float> sa(m_max), sb(n, 1.0f);
    for (int64_t i = 0; i < m_max; ++i) sa[i] = ptpc_row_scale(rank, i);
    scale_a.upload(sa.data(), sa.size() * 4);
    scale_b.upload(sb.data(), sb.size() * 4);
  }
  // A [m_max, k] in e4m3: 1.0 where the bf16 one-hot A has its one.
  static std::vector<uint8_t> host_a(const std::vector<uint16_t>& bf16_a) {
    std::vector<uint8_t> a(bf16_a.size(), 0);
    const uint8_t one = ref::float_to_e4m3(1.0f);
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_a[i] != 0 ? one : 0;
    return a;
  }
  TensorView b_view(int dev) const { return TensorView::matrix(b.get(), DType::kE4M3, n, k, dev); }
  GemmScales scales(int64_t m, int dev) const {
    return GemmScales{TensorView::vector(scale_a.get(), DType::kF32, m, dev),
                      TensorView::vector(scale_b.get(), DType::kF32, n, dev)};
  }
};

}  // namespace weave::test
