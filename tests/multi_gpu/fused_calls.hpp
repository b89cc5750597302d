// Inputs and expected outputs of the multi-GPU fused tests that stress a call (graph replays, a
// delayed rank, a PDL consumer, the soak), over a trait of fused_op_world.hpp: each call's fresh
// random A, split-lsa's output of it held to the NCCL-made reference, and the op's own output of
// the same call made with every rank quiet (barriers around it, the stream synchronised), held to
// split-lsa's bits or, where the mode it ran sums in another order, to the reference's bound. A
// stressed call must then give its quiet output's bits. Also: building an op or learning why its
// mode cannot run here, and the NaN poison between calls.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm_support.hpp"
#include "fused_op_world.hpp"
#include "fused_support.hpp"
#include "support/fused_output_rows.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/error.hpp"
#include "weave/reference.hpp"

namespace weave::test {

// T::make, or null with the reason when the mode cannot run at this world (every rank alike: the
// constructor's resolution is collective).
template <class T>
std::unique_ptr<typename T::Op> try_make(Communicator& c, const typename T::Config& cfg, const typename T::Hooks& hooks,
                                         std::string& reason) {
  try {
    return T::make(c, cfg, hooks);
  } catch (const Error& e) {
    if (e.status() != Status::kUnavailable && e.status() != Status::kUnsupported) throw;
    reason = e.message();
    return nullptr;
  }
}

// Bytes of this rank's output of a call of m rows (bf16).
template <class T>
size_t out_bytes(int w, int64_t m, int64_t n) {
  return static_cast<size_t>(T::out_rows(w, m) * n) * 2;
}

// This rank's B: its own shard (the reducing ops) or the one B of every rank.
template <class T>
bench::DeviceOperand b_operand(const Communicator& c, uint64_t seed, int64_t n, int64_t k) {
  return operand(seed + (T::kBPerRank ? c.rank() : 0), n, k, ScaleMode::kBF16, ref::Operand::kB, c.device());
}

// split-lsa's output of the call (poisoned first, every rank quiet), held to the reference; host bytes.
template <class T>
std::vector<uint8_t> split_output(Communicator& c, typename T::Op& split, int64_t m, int64_t n, int64_t k,
                                  const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st,
                                  const std::string& what) {
  std::vector<uint8_t> bits = poisoned_call(c, split, m, out_bytes<T>(c.world_size(), m, n), a, b, st);
  const GemmProblem p{.m = m, .n = n, .k = k, .mode = ScaleMode::kBF16, .out_dtype = DType::kBF16};
  const ref::Comparison cmp = T::reference(c, split.output(m), p, a, b, st);
  EXPECT_EQ(cmp.wrong, 0) << what << ", m " << m << ": split-lsa has " << cmp.wrong << " of " << cmp.count
                          << " elements beyond the reference's bound (never written " << cmp.never_written
                          << "), rel_l2 " << cmp.rel_l2;
  return bits;
}

// Whether `ran` gives split-lsa's bits at m: T::bitwise_to_split, and where the trait says the
// split GEMM at m may differ from the mode's (T::split_gemm_differs), not then.
template <class T>
bool gives_split_bits(typename T::Op& split, typename T::Mode ran, int world, int64_t m) {
  if constexpr (requires { T::split_gemm_differs(split, ran, m); })
    if (T::split_gemm_differs(split, ran, m)) return false;
  return T::bitwise_to_split(ran, world);
}

// `op`'s output of the same call with every rank quiet: split-lsa's bits (`split_bits`) where the
// mode it ran gives them, else within the reference's bound. On the device, for the stressed calls.
template <class T>
bench::DeviceBuffer quiet_output(Communicator& c, typename T::Op& op, typename T::Op& split, int64_t m, int64_t n,
                                 int64_t k, const bench::DeviceOperand& a, const bench::DeviceOperand& b,
                                 const std::vector<uint8_t>& split_bits, cudaStream_t st, const std::string& what) {
  const size_t bytes = out_bytes<T>(c.world_size(), m, n);
  const std::vector<uint8_t> bits = poisoned_call(c, op, m, bytes, a, b, st);
  const typename T::Mode ran = op.last_mode();  // the same on every rank: the plan is
  if (gives_split_bits<T>(split, ran, c.world_size(), m)) {
    EXPECT_EQ(std::memcmp(bits.data(), split_bits.data(), bytes), 0)
        << what << ", m " << m << ": " << op.describe() << " (ran " << to_string(ran) << ") differs from split-lsa";
  } else {
    const GemmProblem p{.m = m, .n = n, .k = k, .mode = ScaleMode::kBF16, .out_dtype = DType::kBF16};
    const ref::Comparison cmp = T::reference(c, op.output(m), p, a, b, st);
    EXPECT_EQ(cmp.wrong, 0) << what << ", m " << m << ": " << to_string(ran) << " has " << cmp.wrong << " of "
                            << cmp.count << " elements beyond the reference's bound, rel_l2 " << cmp.rel_l2;
  }
  bench::DeviceBuffer want(bytes);
  want.upload(bits.data(), bytes);
  return want;
}

// One call of a stressed sequence: its M, this rank's fresh A and what the call must give.
struct QuietCall {
  int64_t m = 0;
  bench::DeviceOperand a;
  bench::DeviceBuffer want;  // bf16 [out_rows, n]: the op's quiet output
};

// A call per entry of `ms` (A seeded from `seed`, the entry and the rank), with its quiet output
// made by `op` and held to `split`'s (quiet_output).
template <class T>
std::vector<QuietCall> quiet_calls(Communicator& c, typename T::Op& op, typename T::Op& split,
                                   const std::vector<int64_t>& ms, int64_t n, int64_t k, const bench::DeviceOperand& b,
                                   uint64_t seed, cudaStream_t st, const std::string& what) {
  std::vector<QuietCall> calls;
  for (size_t i = 0; i < ms.size(); ++i) {
    QuietCall call;
    call.m = ms[i];
    call.a = operand(seed + 97 * i + c.rank(), call.m, k, ScaleMode::kBF16, ref::Operand::kA, c.device());
    const std::vector<uint8_t> split_bits = split_output<T>(c, split, call.m, n, k, call.a, b, st, what);
    call.want = quiet_output<T>(c, op, split, call.m, n, k, call.a, b, split_bits, st, what);
    calls.push_back(std::move(call));
  }
  return calls;
}

// NaN (0xFF bytes) into the output rows of `op`'s call of m rows, on `st`, around the call: before
// it, or, where peers may still read rows after this rank's call ended (fused-ce), after it and
// every row but those (support/fused_output_rows.hpp). Call both: each does its half.
template <class T>
void poison_before_call(typename T::Op& op, int w, int rank, int64_t m, int64_t n, cudaStream_t st) {
  const RowRange keep = T::rows_peers_read(op.config().mode, w, m, rank);
  if (keep.empty()) poison_rows_except(op.output(m).data, static_cast<size_t>(n) * 2, T::out_rows(w, m), keep, st);
}
template <class T>
void poison_after_call(typename T::Op& op, int w, int rank, int64_t m, int64_t n, cudaStream_t st) {
  const RowRange keep = T::rows_peers_read(op.config().mode, w, m, rank);
  if (!keep.empty()) poison_rows_except(op.output(m).data, static_cast<size_t>(n) * 2, T::out_rows(w, m), keep, st);
}

// Every row of the op's output at capacity NaN, with every rank between calls (a barrier after
// each rank's last call ended: no peer reads any row any more).
template <class T>
void poison_whole_output(Communicator& c, typename T::Op& op, int64_t n, cudaStream_t st) {
  c.barrier();
  const int64_t m_max = op.config().m_max;
  WEAVE_CHECK_CUDA(cudaMemsetAsync(op.output(m_max).data, 0xFF, out_bytes<T>(c.world_size(), m_max, n), st));
  comm::sync_stream_bounded(st, 20, "poisoning the whole output");
  c.barrier();
}

}  // namespace weave::test
