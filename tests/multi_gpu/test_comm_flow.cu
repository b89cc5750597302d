// Flow control and bounded waits: back-to-back calls with no host sync and a deliberately slow
// rank stay correct; with credits disabled (negative control) the same run MUST corrupt; epochs
// started just below 2^32 wrap without a hiccup; a rank that never makes a call turns into
// Error(kTimeout) naming rank, peer, flag, expected and seen on the waiting rank.
#include <atomic>
#include <chrono>
#include <memory>
#include <cstring>
#include <thread>

#include "comm/collective_impl.hpp"
#include "comm_support.hpp"
#include "common/check.hpp"

using namespace weave;
using namespace weave::test;

namespace {

struct Sequence {
  CollectiveOp op = CollectiveOp::kAllGather;
  Transport transport = Transport::kLsa;
  Algorithm algorithm = Algorithm::kAuto;
  DType dtype = DType::kBF16;
  size_t count = 0;
  int calls = 30;
  bool flow_control = true;
  uint32_t initial_epoch = 0;
  uint64_t slow_consumer_ns = 0;  // the last rank consumes each output this much later
  uint64_t slow_caller_ns = 0;    // the last rank enters each call this much later
  uint64_t receive_delay_ns = 0;  // ll: the last rank waits this long between sending and receiving
  bool window_out = true;         // outputs in the op's window (zero-copy: peers write there)
  bool poison_before_call = false;  // every rank overwrites its output right before each call
  double ce_sm_share = 0;
};

// Runs s.calls calls back to back (no host sync), each followed by a copy of the output into a
// history buffer (the "consumer"); returns the wrong output elements seen by each rank.
std::vector<int64_t> run_sequence(const Sequence& s) {
  const int world = local_world();
  std::vector<int64_t> wrong(world, 0);
  for_each_rank([&](Communicator& c) {
    const int w = c.world_size(), r = c.rank();
    CollectiveConfig cfg = collective_config(s.op, s.transport, s.algorithm, s.dtype, s.count);
    cfg.ce_sm_share = s.ce_sm_share;
    comm::CollectiveHooks hooks;
    hooks.flow_control = s.flow_control;
    hooks.initial_epoch = s.initial_epoch;
    hooks.receive_delay_ns = s.receive_delay_ns;
    const std::unique_ptr<Collective> made = Collective::Impl::create(c, cfg, hooks);
    Collective& op = *made;
    const CallSizes sz = call_sizes(s.op, s.dtype, w, s.count);
    const size_t esz = sz.esz, in_elems = sz.in_elems, out_elems = sz.out_elems;
    const size_t in_bytes = sz.in_bytes(), out_bytes = sz.out_bytes();
    DevBuf inputs(in_bytes * s.calls), history(out_bytes * s.calls), user_out(out_bytes);
    std::vector<uint8_t> host(in_bytes * s.calls), one;
    for (int k = 0; k < s.calls; ++k) {
      encode_input(one, s.op, s.dtype, r, in_elems, k);
      std::memcpy(host.data() + k * in_bytes, one.data(), in_bytes);
    }
    WEAVE_CHECK_CUDA(cudaMemcpy(inputs.p, host.data(), host.size(), cudaMemcpyHostToDevice));
    StreamHolder st;
    void* out = s.window_out ? op.window_output() : user_out.p;
    const bool slow = r == w - 1;
    c.barrier();
    for (int k = 0; k < s.calls; ++k) {
      if (slow && s.slow_caller_ns) spin_delay(s.slow_caller_ns, st.s);
      if (s.poison_before_call) WEAVE_CHECK_CUDA(cudaMemsetAsync(out, 0xFF, out_bytes, st.s));
      op.run(inputs.as<char>() + k * in_bytes, out, s.count, st.s);
      if (slow && s.slow_consumer_ns) spin_delay(s.slow_consumer_ns, st.s);
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(history.as<char>() + k * out_bytes, out, out_bytes, cudaMemcpyDeviceToDevice, st.s));
    }
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
    op.check();
    std::vector<uint8_t> got(out_bytes * s.calls);
    WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), history.p, got.size(), cudaMemcpyDeviceToHost));
    int64_t bad = 0;
    for (int k = 0; k < s.calls; ++k) {  // wrong output elements of call k
      const uint8_t* g = got.data() + k * out_bytes;
      const std::vector<uint8_t> want = expected_output(s.op, s.dtype, r, w, s.count, k);
      for (size_t i = 0; i < out_elems; ++i) bad += std::memcmp(g + i * esz, want.data() + i * esz, esz) != 0;
    }
    wrong[r] = bad;
    c.barrier();
  });
  return wrong;
}

int64_t total(const std::vector<int64_t>& v) {
  int64_t t = 0;
  for (auto x : v) t += x;
  return t;
}

}  // namespace

TEST(FlowControl, SlowConsumerNeverSeesTheNextCallAndTheNegativeControlDoes) {
  WEAVE_REQUIRE_GPUS(2);
  for (auto [t, share] : {std::pair{Transport::kLsa, 0.0}, std::pair{Transport::kCe, 0.0}, std::pair{Transport::kCe, 0.3}}) {
    Sequence s;
    s.op = CollectiveOp::kAllGather;
    s.transport = t;
    s.algorithm = Algorithm::kPush;
    s.ce_sm_share = share;
    s.count = (1 << 20) + 48;
    s.calls = 24;
    s.slow_consumer_ns = 300000;
    const auto with = run_sequence(s);
    EXPECT_EQ(total(with), 0) << to_string(t) << ": credits on, slow consumer";
    s.flow_control = false;
    const auto without = run_sequence(s);
    EXPECT_GT(without.back(), 0) << to_string(t)
                                 << ": negative control: with credits disabled the fast rank must overwrite the "
                                    "slow rank's output before it is consumed";
  }
}

TEST(FlowControl, DelayedRankBackToBackReductionsStayCorrect) {
  WEAVE_REQUIRE_GPUS(2);
  struct Case {
    CollectiveOp op;
    Transport t;
    Algorithm a;
    DType d;
    bool window_out;
  };
  const Case cases[] = {
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kOneShot, DType::kBF16, false},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot, DType::kBF16, true},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot, DType::kF32, false},
      {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kOneShot, DType::kF32, false},
      {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot, DType::kBF16, true},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush, DType::kF32, false},
      {CollectiveOp::kReduceScatter, Transport::kCe, Algorithm::kPush, DType::kBF16, true},
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPull, DType::kBF16, false},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull, DType::kBF16, false},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull, DType::kBF16, true},
      {CollectiveOp::kAllReduce, Transport::kNccl, Algorithm::kNcclDefault, DType::kBF16, false},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency, DType::kBF16, false},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency, DType::kF32, true},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kLowLatency, DType::kBF16, false},
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kLowLatency, DType::kBF16, true},
  };
  for (const Case& cs : cases) {
    for (bool slow_consumer : {false, true}) {
      Sequence s;
      s.op = cs.op;
      s.transport = cs.t;
      s.algorithm = cs.a;
      s.dtype = cs.d;
      s.count = 40000 + 3;
      s.calls = 30;
      s.window_out = cs.window_out;
      (slow_consumer ? s.slow_consumer_ns : s.slow_caller_ns) = 150000;
      EXPECT_EQ(total(run_sequence(s)), 0) << to_string(cs.op) << " " << to_string(cs.t) << " " << to_string(cs.a)
                                           << (slow_consumer ? " slow consumer" : " slow caller");
    }
  }
}

// ll: lines rotate through two copies per source with no credit (docs/memory_ordering.md
// "ll-reuse"). A rank that dawdles between sending and receiving must still read every line of
// its call; with one copy (negative control) the fast rank overwrites lines before they are read,
// which the flag-in-data check turns into a timeout naming the overwritten line (never into wrong
// data), or into wrong outputs if the check itself were broken: either way the run must fail.
TEST(FlowControl, LowLatencyLinesAreNotOverwrittenBeforeTheyAreReadAndTheNegativeControlIs) {
  WEAVE_REQUIRE_GPUS(2);
  for (auto op : {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter}) {
    Sequence s;
    s.op = op;
    s.transport = Transport::kLsa;
    s.algorithm = Algorithm::kLowLatency;
    s.count = 20000 + 3;
    s.calls = 16;
    s.receive_delay_ns = 200000;
    EXPECT_EQ(total(run_sequence(s)), 0) << to_string(op) << ": two copies, slow receiver";
  }
  // Negative control on its own communicators with a 1 s timeout (a timed-out op is unusable).
  std::vector<int> devices = {0, 1};
  CommOptions o;
  o.timeout_s = 1.0;
  auto comms = Communicator::create_local(devices, o);
  // Inputs are hashed per (rank, element, call) (comm_support: encode_input), so a line of call
  // k + 1 read in call k gives a wrong sum: with all-zero inputs (as this control had) every call
  // summed to zero, and data read from the wrong call could not show.
  constexpr size_t kCount = 20000;
  constexpr int kCalls = 8;
  std::atomic<int> caught{0}, wrong{0};
  run_per_rank(comms, [&](Communicator& c) {
    const CollectiveOp ar = CollectiveOp::kAllReduce;
    CollectiveConfig cfg = collective_config(ar, Transport::kLsa, Algorithm::kLowLatency, DType::kBF16, kCount);
    comm::CollectiveHooks hooks;
    hooks.flow_control = false;  // one copy per source
    hooks.receive_delay_ns = 200000;
    const std::unique_ptr<Collective> made = Collective::Impl::create(c, cfg, hooks);
    Collective& op = *made;
    const size_t bytes = kCount * 2;
    DevBuf in(bytes * kCalls), out(bytes * kCalls);
    std::vector<uint8_t> host_in(bytes * kCalls), one;
    for (int k = 0; k < kCalls; ++k) {
      encode_input(one, ar, DType::kBF16, c.rank(), kCount, k);
      std::memcpy(host_in.data() + k * bytes, one.data(), bytes);
    }
    WEAVE_CHECK_CUDA(cudaMemcpy(in.p, host_in.data(), host_in.size(), cudaMemcpyHostToDevice));
    WEAVE_CHECK_CUDA(cudaMemset(out.p, 0xFF, out.bytes));  // bf16 NaN: an unwritten element is wrong
    StreamHolder st;
    c.barrier();
    for (int k = 0; k < kCalls; ++k) op.run(in.as<char>() + k * bytes, out.as<char>() + k * bytes, kCount, st.s);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
    try {
      op.check();
      std::vector<uint8_t> got(out.bytes);
      WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), out.p, out.bytes, cudaMemcpyDeviceToHost));
      for (int k = 0; k < kCalls; ++k) {
        const std::vector<uint8_t> want = expected_output(ar, DType::kBF16, c.rank(), c.world_size(), kCount, k);
        for (size_t i = 0; i < kCount; ++i) wrong += std::memcmp(&got[k * bytes + i * 2], &want[i * 2], 2) != 0;
      }
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kTimeout) << e.what();
      if (c.rank() == c.world_size() - 1)
        EXPECT_NE(e.message().find("overwritten before it was read"), std::string::npos) << e.message();
      ++caught;
    }
    c.barrier();
  });
  EXPECT_GT(caught.load() + wrong.load(), 0)
      << "negative control: with one LL copy per source and a slow receiver the run must fail";
  std::printf("[ INFO     ] ll negative control: %d rank(s) timed out, %d wrong elements\n", caught.load(), wrong.load());
}

// ce pull: a copy engine reads a peer's block only after the peer said it is written (its ready
// flag, waited on by the kernel that triggers the copy). With that wait skipped (negative
// control) a slow caller's block is read before it is staged, and the outputs must be wrong.
TEST(FlowControl, CePullReadsABlockOnlyAfterItsOwnerSaysReadyAndTheNegativeControlDoesNot) {
  WEAVE_REQUIRE_GPUS(2);
  Sequence s;
  s.op = CollectiveOp::kAllGather;
  s.transport = Transport::kCe;
  s.algorithm = Algorithm::kPull;
  s.count = (1 << 20) + 48;
  s.calls = 16;
  s.window_out = false;  // caller buffers: every block is staged into its owner's window per call
  s.slow_caller_ns = 300000;
  EXPECT_EQ(total(run_sequence(s)), 0) << "ce pull, ready flags on, slow caller";
  s.flow_control = false;
  const auto without = run_sequence(s);
  EXPECT_GT(without.front(), 0) << "negative control: without the ready wait the fast rank must read the slow "
                                   "rank's block before it is staged";
  std::printf("[ INFO     ] ce pull negative control (ready wait skipped): %lld wrong bytes on rank 0\n",
              static_cast<long long>(without.front()));
}

TEST(FlowControl, EpochsWrapAroundTwoToThe32) {
  WEAVE_REQUIRE_GPUS(2);
  struct Case {
    CollectiveOp op;
    Transport t;
    Algorithm a;
  };
  const Case cases[] = {
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush},   {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPull},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush},    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kOneShot},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot}, {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush},
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kLowLatency}, {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kLowLatency},
  };
  for (const Case& cs : cases) {
    Sequence s;
    s.op = cs.op;
    s.transport = cs.t;
    s.algorithm = cs.a;
    s.count = 8192 + 5;
    s.calls = 40;
    s.initial_epoch = 0xFFFFFFFFu - 17;  // the 18th call is epoch 0
    s.slow_caller_ns = 20000;
    EXPECT_EQ(total(run_sequence(s)), 0) << to_string(cs.op) << " " << to_string(cs.t) << " " << to_string(cs.a);
  }
}

TEST(FlowControl, AMissingRankTimesOutNamingRankPeerFlagAndEpochs) {
  WEAVE_REQUIRE_GPUS(2);
  std::vector<int> devices = {0, 1};
  CommOptions o;
  o.timeout_s = 1.0;
  auto comms = Communicator::create_local(devices, o);
  for (auto [t, a, flag, expected] :
       {std::tuple{Transport::kLsa, Algorithm::kPush, "credit", "expected epoch >= 1"},
        std::tuple{Transport::kLsa, Algorithm::kPull, "data-ready flag", "expected epoch >= 1"},
        std::tuple{Transport::kLsa, Algorithm::kLowLatency, "ll data line", "expected line flag 1"},
        std::tuple{Transport::kCe, Algorithm::kPush, "credit", "expected epoch >= 1"},
        std::tuple{Transport::kCe, Algorithm::kPull, "data-ready flag", "expected epoch >= 1"}}) {
    std::atomic<int> timeouts{0};
    std::atomic<bool> rank0_done{false};
    run_per_rank(comms, [&](Communicator& c) {
      Collective op(c, collective_config(CollectiveOp::kAllGather, t, a, DType::kBF16, 4096));
      if (c.rank() == 0) {
        struct Release {  // rank 1 is released however this block ends (also by an exception)
          std::atomic<bool>& flag;
          ~Release() { flag = true; }
        } release{rank0_done};
        DevBuf in(4096), out(2 * 4096);
        const auto start = std::chrono::steady_clock::now();
        for (int k = 0; k < 4; ++k) op.run(in.p, out.p, 4096, nullptr);  // rank 1 never calls
        WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_LT(waited, 3.0) << "after the first timeout the queued calls must not each wait again";
        try {
          op.check();
          ADD_FAILURE() << to_string(t) << ": no timeout recorded";
        } catch (const Error& e) {
          EXPECT_EQ(e.status(), Status::kTimeout);
          for (const char* part : {"rank 0", "peer 1", flag, expected, "seen 0"})
            EXPECT_NE(e.message().find(part), std::string::npos) << part << " missing from: " << e.message();
          ++timeouts;
        }
        EXPECT_THROW(op.run(in.p, out.p, 16, nullptr), Error) << "run() after a timeout must raise";
      } else {
        // The missing rank: it makes no call, and waits on the host (not in a 1 s barrier) until
        // rank 0 has seen its timeout.
        while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      c.barrier();
    });
    EXPECT_EQ(timeouts.load(), 1) << to_string(t) << " " << to_string(a);
  }
}

// A rank's own stream work before a call (here: overwriting its output, late, on the slow rank)
// must be ordered before the peers' writes of that call. weave's credits guarantee it; NCCL's
// kernels are measured alongside (logged, not asserted: a baseline property, docs/comm.md).
TEST(FlowControl, EarlierWritesToTheOutputAreOrderedBeforePeersWrites) {
  WEAVE_REQUIRE_GPUS(2);
  struct Case {
    CollectiveOp op;
    Transport t;
    Algorithm a;
    bool window_out;
  };
  const Case cases[] = {
      {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush, true},
      {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush, true},
      {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot, true},
      {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot, true},
      {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush, true},
      {CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault, true},
      {CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault, false},
      {CollectiveOp::kReduceScatter, Transport::kNccl, Algorithm::kNcclDefault, true},
      {CollectiveOp::kAllReduce, Transport::kNccl, Algorithm::kNcclDefault, true},
  };
  for (const Case& cs : cases)
    for (size_t count : {size_t(7), size_t(4096), size_t(1) << 20}) {
      Sequence s;
      s.op = cs.op;
      s.transport = cs.t;
      s.algorithm = cs.a;
      s.count = count;
      s.calls = 12;
      s.window_out = cs.window_out;
      s.poison_before_call = true;
      s.slow_caller_ns = 100000;
      const int64_t wrong = total(run_sequence(s));
      const std::string what = std::string(to_string(cs.op)) + " " + std::string(to_string(cs.t)) + " " +
                               std::string(to_string(cs.a)) + (cs.window_out ? " window out" : " plain out") +
                               " count " + std::to_string(count);
      if (cs.t == Transport::kNccl)
        std::printf("[ INFO     ] NCCL baseline, late poison on the slow rank: %s -> %lld wrong elements\n", what.c_str(),
                    static_cast<long long>(wrong));
      else
        EXPECT_EQ(wrong, 0) << what;
    }
}
