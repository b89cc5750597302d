// A peer that never makes the call, for every fused operator and each of the given modes (W >= 2):
// rank 0 runs one call alone over the short-timeout communicators (comm_support.hpp); its waits end
// after the timeout, check() raises kTimeout naming a peer, and the op refuses a further call
// (expect_rank0_alone_times_out, fused_support.hpp). split-nccl has no such bound (NCCL's own waits
// are unbounded): it is never in the list.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "comm_support.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "fused_support.hpp"

namespace weave::test {

template <class T>
void a_peer_that_never_arrives_times_out_naming_it(const std::vector<typename T::Mode>& modes, int64_t n, int64_t k,
                                                   int64_t m) {
  const int w = local_world();
  for (typename T::Mode mode : modes) {
    SCOPED_TRACE(std::string(T::kName) + " " + std::string(to_string(mode)));
    std::atomic<bool> rank0_done{false};
    std::string reason;
    for_each_rank_short_timeout([&](Communicator& c) {
      std::string why;
      auto op = try_make<T>(c, T::config(mode, n, k, m), {}, why);
      if (!op) {
        if (c.rank() == 0) reason = why;
        return;
      }
      const bench::DeviceOperand a = operand(5 + c.rank(), m, k, ScaleMode::kBF16, ref::Operand::kA, c.device());
      const bench::DeviceOperand b = b_operand<T>(c, 9, n, k);
      expect_rank0_alone_times_out(c, *op, rank0_done, std::string(T::kShort) + " " + std::string(to_string(mode)),
                                   [&](cudaStream_t s) { op->run(m, a.view, b.view, {}, s); });
    });
    if (!reason.empty()) print_not_run(T::kShort, ScaleMode::kBF16, mode, w, reason);
  }
}

}  // namespace weave::test
