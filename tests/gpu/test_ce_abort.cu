// Issue 16 item 2 (docs/memory_ordering.md "ce-gate"): a ce push call that times out must not
// store into a slow but alive peer. Emulated world, W = 2 (the ce transport runs there only at
// W = 2: EmulatedWorld::copy_engine_unsupported_reason).
//
//   rank 0: call 1 -> call 2 (its credit wait for rank 1 times out after kTimeoutS)
//   rank 1: call 1 -> spin kSpinNs (alive, slow) -> snapshot its output's block 0 -> call 2
//
// Block 0 of rank 1's zero-copy output is where rank 0's pushes land; the snapshot is what a
// consumer kernel of rank 1 reading its call-1 output sees after the spin. Gated (the default):
// call 1's bytes, and rank 0 raises kTimeout naming peer 1's credit. Negative control
// (ce_ungated_peer_copies, the copy-engine copies enqueued whatever the enter kernel decides):
// rank 0's call-2 bytes, landed while rank 1 was still busy with call 1's output.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/collective_impl.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"
#include "testing/spin_delay.hpp"

using namespace weave;

namespace {

constexpr double kTimeoutS = 0.5;
constexpr uint64_t kSpinNs = 1'500'000'000;  // 3x the timeout: rank 0 gave up (and, ungated, copied) long before
constexpr size_t kBytes = size_t(1) << 20;   // per rank
constexpr unsigned char kCall1 = 0xA0, kCall2 = 0xB0;  // + rank: every rank's input of call 1 / call 2

struct SlowPeerOutcome {
  size_t call1_bytes = 0;   // rank 1's snapshot of block 0: bytes still of rank 0's call 1
  size_t call2_bytes = 0;   // ... bytes of rank 0's aborted call 2 (overwritten)
  bool call1_ok = false;    // both ranks' call-1 outputs were right
  Status rank0_status = Status::kOk;
  std::string rank0_error;
};

size_t count_of(const std::vector<unsigned char>& v, unsigned char b) {
  size_t n = 0;
  for (unsigned char x : v) n += x == b;
  return n;
}

SlowPeerOutcome run_slow_peer(bool ungated) {
  SlowPeerOutcome o;
  bench::EmulatedWorld ew(2, 0, kTimeoutS);
  std::vector<int> ok1(2, 0);
  ew.run([&](comm::Group& g) {
    CollectiveConfig cfg;
    cfg.op = CollectiveOp::kAllGather;
    cfg.transport = Transport::kCe;
    cfg.algorithm = Algorithm::kPush;
    cfg.max_count = kBytes;
    comm::CollectiveHooks hooks;
    hooks.ce_ungated_peer_copies = ungated;
    auto op = Collective::Impl::create(g, cfg, hooks);
    const int r = g.rank();
    const OwnedStream st;
    const OwnedDeviceMemory in(kBytes), snap(kBytes);
    char* out = static_cast<char*>(op->window_output());  // zero-copy: peers' pushes land in it

    // Call 1, healthy on both ranks.
    WEAVE_CHECK_CUDA(cudaMemsetAsync(in.p, kCall1 + r, kBytes, st.s));
    op->run(in.p, out, kBytes, st.s);
    g.barrier();  // lockstep enqueue (emulated_world.hpp)
    comm::sync_stream_bounded(st.s, 10 * kTimeoutS, "call 1");
    op->check();
    std::vector<unsigned char> got(2 * kBytes);
    WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
    ok1[r] = count_of(std::vector<unsigned char>(got.begin(), got.begin() + kBytes), kCall1) == kBytes &&
             count_of(std::vector<unsigned char>(got.begin() + kBytes, got.end()), kCall1 + 1) == kBytes;
    g.barrier();

    // Call 2: rank 1 is alive but slow past the timeout.
    WEAVE_CHECK_CUDA(cudaMemsetAsync(in.p, kCall2 + r, kBytes, st.s));
    if (r == 1) {
      bench::spin_delay(kSpinNs, st.s);
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(snap.p, out, kBytes, cudaMemcpyDeviceToDevice, st.s));
    }
    op->run(in.p, out, kBytes, st.s);
    g.barrier();
    // Rank 1's call 2 times out too (rank 0 never arrives): spin + its timeout, with margin.
    comm::sync_stream_bounded(st.s, kSpinNs * 1e-9 + 10 * kTimeoutS, "call 2");
    if (r == 0) {
      try {
        op->check();
      } catch (const Error& e) {
        o.rank0_status = e.status();
        o.rank0_error = e.message();
      }
    } else {
      std::vector<unsigned char> s(kBytes);
      WEAVE_CHECK_CUDA(cudaMemcpy(s.data(), snap.p, kBytes, cudaMemcpyDeviceToHost));
      o.call1_bytes = count_of(s, kCall1);
      o.call2_bytes = count_of(s, kCall2);
    }
  });
  o.call1_ok = ok1[0] && ok1[1];
  return o;
}

}  // namespace

TEST(CeAbort, ATimedOutPushNeverOverwritesASlowPeerAndTheUngatedNegativeControlDoes) {
  WEAVE_REQUIRE_GPUS(1);
  const std::string why = bench::EmulatedWorld::copy_engine_unsupported_reason(2);
  if (!why.empty()) GTEST_SKIP() << "ce at W = 2: " << why;

  const SlowPeerOutcome gated = run_slow_peer(false);
  std::printf("  gated:   rank 1's block 0 after rank 0's timeout: %zu bytes of call 1, %zu of call 2\n",
              gated.call1_bytes, gated.call2_bytes);
  EXPECT_TRUE(gated.call1_ok) << "call 1 (healthy) was wrong: the setup is broken";
  EXPECT_EQ(gated.call2_bytes, 0u) << "the aborted call stored into the slow peer";
  EXPECT_EQ(gated.call1_bytes, kBytes);
  EXPECT_EQ(gated.rank0_status, Status::kTimeout) << gated.rank0_error;
  for (const char* part : {"rank 0", "peer 1", "credit"})
    EXPECT_NE(gated.rank0_error.find(part), std::string::npos) << part << " missing from: " << gated.rank0_error;

  // Negative control: the same run with the copy-engine copies enqueued ungated overwrites.
  const SlowPeerOutcome ungated = run_slow_peer(true);
  std::printf("  ungated: rank 1's block 0 after rank 0's timeout: %zu bytes of call 1, %zu of call 2\n",
              ungated.call1_bytes, ungated.call2_bytes);
  EXPECT_TRUE(ungated.call1_ok);
  EXPECT_EQ(ungated.rank0_status, Status::kTimeout) << ungated.rank0_error;
  EXPECT_EQ(ungated.call2_bytes, kBytes) << "the negative control did not overwrite: the test cannot see the defect";
}
