// What the fused operators' multi-GPU tests share (test_fused_*.cu, test_ag_gemm.cu): building
// an op or learning why its mode cannot run at this world, the "not run" line, random operands,
// one NaN-poisoned call, and rank 0 alone timing out. (The tests that treat every operator alike
// build on fused_op_world.hpp and fused_calls.hpp.)
#pragma once
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "comm_support.hpp"
#include "support/expect_error.hpp"
#include "support/fused_config.hpp"  // fused_op_config
#include "testing/gemm_operands.hpp"
#include "testing/poison_nan.hpp"
#include "weave/communicator.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"

namespace weave::test {


// Builds an op, or returns null with the reason when its mode cannot run at this world (every rank
// alike: the constructor's resolution is collective).
template <class Op, class Config>
std::unique_ptr<Op> make_or_reason(Communicator& c, const Config& cfg, std::string& reason) {
  try {
    return std::make_unique<Op>(c, cfg);
  } catch (const Error& e) {
    if (e.status() != Status::kUnavailable && e.status() != Status::kUnsupported) throw;
    reason = e.message();
    return nullptr;
  }
}

// "  gemm-ar ptpc fused-ce at W1: not run (<reason>)": a mode this world cannot run, said, not hidden.
template <class Mode>
void print_not_run(const char* op, ScaleMode q, Mode mode, int w, const std::string& reason) {
  std::printf("  %s %s %s at W%d: not run (%s)\n", op, std::string(to_string(q)).c_str(),
              std::string(to_string(mode)).c_str(), w, reason.c_str());
}

// One rank's random operand of `rows` x `k` in `quant` on its device (raw scale layout).
inline bench::DeviceOperand operand(uint64_t seed, int64_t rows, int64_t k, ScaleMode quant, ref::Operand which, int dev) {
  return bench::upload_operand(bench::quantize_parallel(bench::random_operand(seed, rows, k), rows, k, quant, which), dev);
}

// Poisons the op's output, runs one call, waits (bounded), raises a recorded error, returns the bytes.
template <class Op>
std::vector<uint8_t> poisoned_call(Communicator& c, Op& op, int64_t m, size_t bytes, const bench::DeviceOperand& a,
                                   const bench::DeviceOperand& b, cudaStream_t st) {
  c.barrier();
  bench::poison_nan(op.output(m).data, bytes, DType::kBF16, st);
  op.run(m, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, st);
  comm::sync_stream_bounded(st, 2 * c.timeout_s() + 5, "a poisoned call of " + op.describe());
  op.check();
  std::vector<uint8_t> h(bytes);
  WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), op.output(m).data, bytes, cudaMemcpyDeviceToHost));
  c.barrier();
  return h;
}

// A peer that never makes the call (W >= 2): rank 0 enqueues `call(stream)` alone; its waits end
// after the communicator's timeout, check() raises kTimeout naming a peer, and the op refuses a
// further call (printed as "  <what>: <message>"). The other ranks wait for rank 0 on `rank0_done`
// (a barrier would time out first; bounded at 120 s), then every rank destroys its op (window
// deregistration is collective).
template <class Op>
void expect_rank0_alone_times_out(Communicator& c, Op& op, std::atomic<bool>& rank0_done, const std::string& what,
                                  const std::function<void(cudaStream_t)>& call) {
  c.barrier();
  if (c.rank() == 0) {
    StreamHolder st;
    call(st.s);
    comm::sync_stream_bounded(st.s, 2 * c.timeout_s() + 5, "the call whose peer never arrives");
    const std::string msg = error_of([&] { op.check(); }, Status::kTimeout);
    EXPECT_NE(msg.find("peer"), std::string::npos) << msg;
    EXPECT_FALSE(error_of([&] { call(st.s); }, Status::kTimeout).empty());
    std::printf("  %s: %s\n", what.c_str(), msg.c_str());
    rank0_done.store(true);
  } else {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (!rank0_done.load() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(rank0_done.load()) << "rank 0's call did not end within 120 s";
  }
}

}  // namespace weave::test
