// Back-to-back calls of one fused op over real NCCL communicators (no host sync between them), one
// rank delayed before each call, each call's output read right after run() on the same stream:
// by a copy, or by a kernel launched with programmatic dependent launch (PDL) that waits
// (griddepcontrol.wait, what cudaGridDependencySynchronize() compiles to) before reading, as the
// ops' headers ask of such a consumer. Every read is held to the call's quiet output
// (fused_calls.hpp): a delayed rank, back-to-back calls of changing M or an early consumer must not
// change a bit.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/timeout.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"
#include "fused_calls.hpp"
#include "testing/pdl_copy.hpp"
#include "testing/reduce_reference.hpp"

namespace weave::test {

// How each call's output is read right after run() on its stream.
enum class ReadAfterRun {
  kCopy,        // cudaMemcpyAsync (stream-ordered: after the call's last operation completed)
  kPdlConsumer  // a kernel launched with programmatic stream serialization that waits first
};

// `rounds` rounds over `calls` (M changing from call to call), no host sync in between: before
// call i, rank i % W spins `late_ns` (a delayed rank; at W = 1 the only rank, which delays
// nothing but itself); the output is NaN-poisoned around every call (poison_before_call /
// poison_after_call) and read into a snapshot of its own right after run(). Returns, per call of
// the sequence, the snapshot's elements that differ from the call's quiet output.
template <class T>
std::vector<int64_t> back_to_back_differing(Communicator& c, typename T::Op& op, const std::vector<QuietCall>& calls,
                                            const bench::DeviceOperand& b, int64_t n, int rounds, uint64_t late_ns,
                                            ReadAfterRun read, cudaStream_t st) {
  const int w = c.world_size(), r = c.rank();
  const size_t total = calls.size() * static_cast<size_t>(rounds);
  std::vector<bench::DeviceBuffer> snaps;
  for (size_t i = 0; i < total; ++i) snaps.emplace_back(out_bytes<T>(w, calls[i % calls.size()].m, n));
  poison_whole_output<T>(c, op, n, st);  // the barriers in it: every rank set up
  for (size_t i = 0; i < total; ++i) {
    const QuietCall& call = calls[i % calls.size()];
    const size_t bytes = snaps[i].bytes();
    poison_before_call<T>(op, w, r, call.m, n, st);
    if (static_cast<int>(i % static_cast<size_t>(w)) == r) spin_delay(late_ns, st);
    op.run(call.m, call.a.view, b.view, {}, st);
    if (read == ReadAfterRun::kPdlConsumer)
      bench::launch_pdl_copy(op.output(call.m).data, snaps[i].get(), bytes, /*wait=*/true, st);
    else
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(snaps[i].get(), op.output(call.m).data, bytes, cudaMemcpyDeviceToDevice, st));
    poison_after_call<T>(op, w, r, call.m, n, st);
  }
  comm::sync_stream_bounded(st, static_cast<double>(total) * (2 * c.timeout_s() + 1),
                            "back-to-back calls of " + op.describe());
  op.check();
  std::vector<int64_t> differing;
  for (size_t i = 0; i < total; ++i)
    differing.push_back(bench::gpu_count_differing(snaps[i].get(), calls[i % calls.size()].want.get(),
                                                   snaps[i].bytes() / 2, DType::kBF16, st));
  c.barrier();
  return differing;
}

// For each mode of T at this world: an op (allow_pdl on where the op has it, for the PDL consumer:
// the decode GEMV then launches with PDL too), its calls of `ms` (those the mode runs) made quiet,
// then back_to_back_differing; every call must give its quiet bits. A mode that cannot run here is
// printed with its reason, never silently passed.
template <class T>
void every_mode_back_to_back_with_a_delayed_rank(int64_t n, int64_t k, const std::vector<int64_t>& ms,
                                                 uint64_t late_ns, ReadAfterRun read) {
  const int w = local_world();
  int64_t m_max = 0;
  for (int64_t m : ms) m_max = std::max(m_max, m);
  for (typename T::Mode mode : T::modes()) {
    std::vector<int64_t> here;
    for (int64_t m : ms)
      if (T::runs(mode, w, m)) here.push_back(m);
    if (here.empty()) {
      print_not_run(T::kShort, ScaleMode::kBF16, mode, w, "none of the test's M fits the mode");
      continue;
    }
    SCOPED_TRACE(std::string(T::kName) + " " + std::string(to_string(mode)) + " W" + std::to_string(w));
    std::string reason;
    std::vector<int64_t> calls_checked(w, 0), differing_total(w, 0);
    for_each_rank([&](Communicator& c) {
      typename T::Config cfg = T::config(mode, n, k, m_max);
      if constexpr (requires { cfg.allow_pdl; }) cfg.allow_pdl = read == ReadAfterRun::kPdlConsumer;
      std::string why;
      auto op = try_make<T>(c, cfg, {}, why);
      if (!op) {
        if (c.rank() == 0) reason = why;
        return;
      }
      auto split = T::make(c, T::config(T::kSplitLsa, n, k, m_max));
      StreamHolder st;
      const bench::DeviceOperand b = b_operand<T>(c, 61, n, k);
      const std::string what = std::string(T::kName) + " " + std::string(to_string(mode));
      const std::vector<QuietCall> calls = quiet_calls<T>(c, *op, *split, here, n, k, b, 7100, st.s, what);
      const std::vector<int64_t> differing = back_to_back_differing<T>(c, *op, calls, b, n, 3, late_ns, read, st.s);
      for (size_t i = 0; i < differing.size(); ++i)
        EXPECT_EQ(differing[i], 0) << what << ", rank " << c.rank() << ", call " << i << " (m "
                                   << calls[i % calls.size()].m << ", rank " << i % w << " late): elements that "
                                   << "differ from the quiet call";
      calls_checked[c.rank()] = static_cast<int64_t>(differing.size());
      for (int64_t d : differing) differing_total[c.rank()] += d;
    });
    if (!reason.empty()) {
      print_not_run(T::kShort, ScaleMode::kBF16, mode, w, reason);
      continue;
    }
    std::printf("  %s %s W%d: %lld back-to-back calls, one rank %.1f ms late each, read by %s: %lld elements "
                "differ from the quiet calls (rank 0)\n",
                T::kShort, std::string(to_string(mode)).c_str(), w, static_cast<long long>(calls_checked[0]),
                static_cast<double>(late_ns) / 1e6,
                read == ReadAfterRun::kPdlConsumer ? "a waiting PDL consumer" : "a copy",
                static_cast<long long>(differing_total[0]));
  }
}

}  // namespace weave::test
