// fused-ce with every stream of the process on one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1,
// as Megatron-style overlap sets it), for the fused operators that have fused-ce (GemmAllReduce,
// GemmAllGather), at W >= 3: 50 calls of changing M, each bitwise equal to split-lsa's output of
// the same inputs. A copy stream's wait for a peer's chunk enqueued ahead of work that chunk needs
// would deadlock there until the timeout. The variable must be set before CUDA starts, so
// scripts/gpu_all.sh (multi) runs these tests in a process of their own with it; elsewhere they skip.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm_support.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "fused_support.hpp"

namespace weave::test {

// "" when this process runs every stream on one hardware queue, else why the test skips.
inline std::string one_hardware_queue_skip_reason() {
  const char* conn = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (conn == nullptr || std::string(conn) != "1")
    return "needs CUDA_DEVICE_MAX_CONNECTIONS=1 set before the process starts (scripts/gpu_all.sh multi runs it so)";
  return "";
}

template <class T>
void fused_ce_on_one_hardware_queue(typename T::Mode fused_ce, int64_t n, int64_t k, int64_t m_max) {
  const int w = local_world();
  std::string reason;
  int calls_checked = 0;
  for_each_rank([&](Communicator& c) {
    const int r = c.rank(), dev = c.device();
    StreamHolder st;
    std::string why;
    auto ce = try_make<T>(c, T::config(fused_ce, n, k, m_max), {}, why);
    if (!ce) {
      if (r == 0) reason = why;
      return;
    }
    typename T::Hooks on_the_tile;  // split runs fused-ce's tile at every m (never weave::Gemm's GEMV)
    if constexpr (requires { on_the_tile.split_leg; }) on_the_tile.split_leg = false;
    auto split = T::make(c, T::config(T::kSplitLsa, n, k, m_max), on_the_tile);
    const bench::DeviceOperand b = b_operand<T>(c, 501, n, k);
    std::mt19937_64 rng(2024);  // the same M sequence on every rank
    for (int call = 0; call < 50; ++call) {
      const int64_t m = 1 + static_cast<int64_t>(rng() % m_max);
      const bench::DeviceOperand a = operand(9000 + 31 * call + r, m, k, ScaleMode::kBF16, ref::Operand::kA, dev);
      const size_t bytes = out_bytes<T>(w, m, n);
      const std::vector<uint8_t> want = poisoned_call(c, *split, m, bytes, a, b, st.s);
      const std::vector<uint8_t> got = poisoned_call(c, *ce, m, bytes, a, b, st.s);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0) << T::kName << " call " << call << " m " << m;
      if (r == 0) ++calls_checked;
    }
  });
  if (!reason.empty()) {
    print_not_run(T::kShort, ScaleMode::kBF16, fused_ce, w, reason);
    return;
  }
  EXPECT_EQ(calls_checked, 50);
  std::printf("  %s fused-ce W%d, one hardware queue: %d calls finished, each equal to split-lsa\n", T::kShort, w,
              calls_checked);
}

}  // namespace weave::test
