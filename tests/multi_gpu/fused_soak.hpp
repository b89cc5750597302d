// The randomised soak of a fused operator over real NCCL communicators (one rank per GPU; world 1 on
// a one-GPU machine), the same for every operator (a trait of fused_op_world.hpp): 10,000 calls (a
// call = every rank's run() of one op), each of one of 8 variants (a random M from the test's draw,
// a fresh random A per rank) and one of the test's modes, the same pick on every rank from a shared
// seed; one rank now and then 20 us late. Each output is NaN-poisoned around its call and compared
// bit for bit with that op's quiet output of the variant (fused_calls.hpp: split-lsa's bits, each
// split-lsa output held to the NCCL-made reference, or the reference's bound where the mode sums in
// another order). The host waits for every call's comparison before the next call.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm_support.hpp"
#include "fused_calls.hpp"
#include "fused_op_world.hpp"
#include "testing/reduce_reference.hpp"

namespace weave::test {

// The soak's M of variant v (0..7) at world w, drawn from the shared sequence.
using SoakDraw = std::function<int64_t(std::mt19937_64& shared, int v, int w)>;

template <class T>
void randomised_soak_against_split(const std::vector<typename T::Mode>& modes, int64_t n, int64_t k, int64_t m_max,
                                   const SoakDraw& draw) {
  const int w = local_world();
  constexpr int kCalls = 10000, kVariants = 8;
  std::vector<long long> differing(w, 0), calls_made(w, 0);
  std::map<std::string, long long> modes_taken;  // rank 0's calls by the mode each op says it ran
  std::vector<std::string> reasons(modes.size());
  for_each_rank([&](Communicator& c) {
    const int r = c.rank();
    StreamHolder st;
    auto split = T::make(c, T::config(T::kSplitLsa, n, k, m_max));
    std::vector<std::unique_ptr<typename T::Op>> ops;
    for (size_t i = 0; i < modes.size(); ++i) {
      std::string why;
      auto op = try_make<T>(c, T::config(modes[i], n, k, m_max), {}, why);
      if (op) ops.push_back(std::move(op));
      else if (r == 0) reasons[i] = why;
    }
    ASSERT_FALSE(ops.empty());
    const bench::DeviceOperand b = b_operand<T>(c, 91, n, k);
    const std::string what = std::string(T::kName) + " soak";
    std::mt19937_64 shared(20261205);  // the same sequence on every rank
    std::vector<int64_t> ms;
    std::vector<bench::DeviceOperand> as;
    std::vector<std::vector<bench::DeviceBuffer>> want(ops.size());  // [op][variant]; empty where it cannot run
    for (int v = 0; v < kVariants; ++v) {
      const int64_t m = draw(shared, v, w);
      bool some_op_runs_it = false;
      for (const auto& op : ops) some_op_runs_it |= T::runs(op->config().mode, w, m);
      ASSERT_TRUE(some_op_runs_it) << what << ": no mode of the soak runs m " << m;
      ms.push_back(m);
      as.push_back(operand(5000 + 97 * v + r, m, k, ScaleMode::kBF16, ref::Operand::kA, c.device()));
      const std::vector<uint8_t> split_bits = split_output<T>(c, *split, m, n, k, as.back(), b, st.s, what);
      for (size_t o = 0; o < ops.size(); ++o)
        want[o].push_back(T::runs(ops[o]->config().mode, w, m)
                              ? quiet_output<T>(c, *ops[o], *split, m, n, k, as.back(), b, split_bits, st.s, what)
                              : bench::DeviceBuffer());
    }
    for (auto& op : ops) poison_whole_output<T>(c, *op, n, st.s);
    std::vector<long long> per_op(ops.size(), 0);
    for (int i = 0; i < kCalls; ++i) {
      const int v = static_cast<int>(shared() % kVariants);
      size_t o = shared() % ops.size();
      const int64_t m = ms[v];
      while (!T::runs(ops[o]->config().mode, w, m)) o = (o + 1) % ops.size();  // the same on every rank
      typename T::Op& op = *ops[o];
      const bool late = static_cast<int>(shared() % w) == r && i % 7 == 0;
      poison_before_call<T>(op, w, r, m, n, st.s);
      if (late) spin_delay(20'000, st.s);
      op.run(m, as[v].view, b.view, {}, st.s);
      ++calls_made[r];
      ++per_op[o];
      if (r == 0) ++modes_taken[std::string(to_string(op.last_mode()))];
      // Synchronises: every output is compared before the next call of this op overwrites it.
      differing[r] += bench::gpu_count_differing(op.output(m).data, want[o][v].get(), want[o][v].bytes() / 2,
                                                 DType::kBF16, st.s);
      op.check();
      poison_after_call<T>(op, w, r, m, n, st.s);
    }
    for (size_t o = 0; o < ops.size(); ++o)
      EXPECT_GT(per_op[o], 0) << what << ", rank " << r << ": " << ops[o]->describe() << " never called";
    comm::sync_stream_bounded(st.s, 20, "the soak's last poison");
    c.barrier();
  });
  for (size_t i = 0; i < modes.size(); ++i)
    if (!reasons[i].empty()) print_not_run(T::kShort, ScaleMode::kBF16, modes[i], w, reasons[i]);
  for (int r = 0; r < w; ++r) {
    EXPECT_EQ(calls_made[r], kCalls) << "rank " << r;
    EXPECT_EQ(differing[r], 0) << "rank " << r << ": elements that differ from the quiet calls";
  }
  std::string taken;
  for (const auto& [mode, count] : modes_taken) taken += " " + mode + " " + std::to_string(count);
  std::printf("  %s soak: %d calls at W%d, every output compared: %lld differing; by mode ran:%s\n", T::kShort, kCalls,
              w, differing[0], taken.c_str());
}

}  // namespace weave::test
