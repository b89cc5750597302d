// Issue 16 item 4 (docs/memory_ordering.md "zero-copy-offsets"): buffers in the op's window are
// addressed in peers' windows at THIS rank's offset, so they must sit at the same offset on every
// rank. Each call checks it on the device with its lag-0 handshake: emulated world, W = 2, rank 1
// passes its output one buffer further into the window than rank 0. Expected on both ranks:
// Error(kMismatch) naming the peer and both offsets, and no byte stored into a peer (the window's
// output region keeps its sentinel outside the rank's own block). Positive control: both ranks at
// the same shifted offset get the right result (no false mismatch).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/collective_impl.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"

using namespace weave;

namespace {

constexpr unsigned char kSentinel = 0x5A;
constexpr size_t kCount = 4096;  // all-gather: bytes per rank; all-reduce: bf16 elements
constexpr uint16_t kBf16One = 0x3F80, kBf16Two = 0x4000;

struct Combo {
  CollectiveOp op;
  Transport transport;
  Algorithm algorithm;
};

// Every call shape that addresses a peer's window at a user buffer's offset: all-gather push
// (landing area) and pull (the senders' blocks), two-shot all-reduce (the gather leg's landing).
const Combo kCombos[] = {
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPull},
    {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush},
    {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot},
    {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot},
};

std::string name_of(const Combo& c) {
  return std::string(to_string(c.op)) + "/" + std::string(to_string(c.transport)) + "/" +
         std::string(to_string(c.algorithm));
}

struct RankResult {
  Status status = Status::kOk;
  std::string error;
  size_t peer_bytes_changed = 0;  // output-region bytes outside the rank's own block that lost the sentinel
  size_t wrong = 0;               // positive control: result bytes / elements that are wrong
};

// One call on both ranks; rank r's output at window_output() + shift[r] bytes.
std::vector<RankResult> run_call(const Combo& combo, const size_t shift[2]) {
  constexpr int kWorld = 2;
  const bool ag = combo.op == CollectiveOp::kAllGather;
  const size_t count = kCount;
  const size_t esz = ag ? 1 : 2;
  const size_t region = ag ? kWorld * 2 * count : 2 * count * esz;  // window output region (max_count = 2 count)
  std::vector<RankResult> res(kWorld);
  bench::EmulatedWorld ew(kWorld, 0, 5);
  ew.run([&](comm::Group& g) {
    CollectiveConfig cfg;
    cfg.op = combo.op;
    cfg.transport = combo.transport;
    cfg.algorithm = combo.algorithm;
    cfg.dtype = DType::kBF16;
    cfg.max_count = 2 * count;
    auto op = Collective::Impl::create(g, cfg);
    const int r = g.rank();
    RankResult& rr = res[r];
    const OwnedStream st;
    char* region_base = static_cast<char*>(op->window_output());
    char* out = region_base + shift[r];
    WEAVE_CHECK_CUDA(cudaMemsetAsync(region_base, kSentinel, region, st.s));
    // all-gather in place (in = out + r * count: zero-copy on both the push and the pull side);
    // all-reduce from a caller buffer of bf16 ones (sum 2 on every element).
    const OwnedDeviceMemory caller_in(count * esz);
    const void* in = nullptr;
    size_t own_begin = 0, own_end = 0;  // this rank's own block inside the region (all-gather)
    if (ag) {
      own_begin = shift[r] + r * count;
      own_end = own_begin + count;
      WEAVE_CHECK_CUDA(cudaMemsetAsync(region_base + own_begin, 0x10 + r, count, st.s));
      in = out + r * count;
    } else {
      const std::vector<uint16_t> ones(count, kBf16One);
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(caller_in.p, ones.data(), count * esz, cudaMemcpyHostToDevice, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      in = caller_in.p;
    }
    g.barrier();  // every rank's sentinel is in place before any peer may store
    op->run(in, out, count, st.s);
    g.barrier();  // lockstep enqueue (emulated_world.hpp)
    comm::sync_stream_bounded(st.s, 20, "the call");
    g.barrier();  // every rank's call is complete before the windows are read
    try {
      op->check();
    } catch (const Error& e) {
      rr.status = e.status();
      rr.error = e.message();
    }
    std::vector<unsigned char> got(region);
    WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), region_base, region, cudaMemcpyDeviceToHost));
    if (rr.status == Status::kOk) {
      if (ag) {
        for (int q = 0; q < kWorld; ++q)
          for (size_t i = 0; i < count; ++i) rr.wrong += got[shift[r] + q * count + i] != 0x10 + q;
      } else {
        for (size_t i = 0; i < count; ++i) {
          uint16_t v;
          std::memcpy(&v, got.data() + shift[r] + i * esz, esz);
          rr.wrong += v != kBf16Two;
        }
      }
    } else {
      // The pull reads peers and stores only into its own output: nothing to check in peers'
      // windows beyond what the push shapes check; its own output is declared invalid.
      const bool pull = combo.algorithm == Algorithm::kPull;
      for (size_t i = 0; i < region && !pull; ++i)
        if (i < own_begin || i >= own_end) rr.peer_bytes_changed += got[i] != kSentinel;
    }
  });
  return res;
}

}  // namespace

TEST(ZeroCopyOffsets, ARankWhoseBufferSitsElsewhereInTheWindowIsAMismatchOnEveryRankAndNothingLandsInAPeer) {
  WEAVE_REQUIRE_GPUS(1);
  for (const Combo& combo : kCombos) {
    SCOPED_TRACE(name_of(combo));
    if (combo.transport == Transport::kCe) {
      const std::string why = bench::EmulatedWorld::copy_engine_unsupported_reason(2);
      if (!why.empty()) {
        std::printf("  %s: %s\n", name_of(combo).c_str(), why.c_str());
        continue;
      }
    }
    const bool ag = combo.op == CollectiveOp::kAllGather;
    const size_t one = ag ? 2 * kCount : kCount * 2;  // one output's bytes: all-gather world x count, bf16 count x 2

    // Positive control: the same shifted offset on both ranks is zero-copy and right.
    const size_t same[2] = {one, one};
    for (const RankResult& rr : run_call(combo, same)) {
      EXPECT_EQ(rr.status, Status::kOk) << rr.error;
      EXPECT_EQ(rr.wrong, 0u);
    }

    // Rank 1 one output further into the window than rank 0.
    const size_t differ[2] = {0, one};
    const std::vector<RankResult> res = run_call(combo, differ);
    for (int r = 0; r < 2; ++r) {
      const RankResult& rr = res[r];
      EXPECT_EQ(rr.status, Status::kMismatch) << "rank " << r << ": " << rr.error;
      const std::string peer = "peer " + std::to_string(1 - r);
      for (const std::string part : {std::string("rank ") + std::to_string(r), peer, std::string("window offset"),
                                     std::string("same offset on every rank")})
        EXPECT_NE(rr.error.find(part), std::string::npos) << "rank " << r << ": '" << part << "' missing from: " << rr.error;
      EXPECT_EQ(rr.peer_bytes_changed, 0u) << "rank " << r << ": a peer stored into this rank's window";
    }
  }
}
