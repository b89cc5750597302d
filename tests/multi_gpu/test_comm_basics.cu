// Communicator and SymmetricWindow on real GPUs: creation (one process, one thread per GPU; and
// from a unique id in threads), configuration mismatches raising on every rank, the zeroed window,
// its peer table (copy-engine puts land where the peer reads them), NCCL's LSA barrier on the
// window's device communicator, and argument validation of collectives.
#include <nccl_device.h>

#include <atomic>
#include <thread>

#include "comm_support.hpp"
#include "common/check.hpp"

using namespace weave;
using namespace weave::test;

static_assert(std::is_trivially_copyable_v<WindowHandle>);

TEST(CommBasics, CreateLocalSeesOneNvlinkDomain) {
  WEAVE_REQUIRE_GPUS(2);
  const int world = local_world();
  for_each_rank([&](Communicator& c) {
    EXPECT_EQ(c.world_size(), world);
    EXPECT_EQ(c.lsa_team_size(), world) << "rank " << c.rank();
    for (const auto& t : c.transports()) EXPECT_TRUE(t.available) << to_string(t.transport) << ": " << t.reason;
    EXPECT_NO_THROW(c.require(Transport::kLsa));
  });
}

TEST(CommBasics, MismatchedOptionsRaiseOnEveryRankFromAUniqueId) {
  WEAVE_REQUIRE_GPUS(2);
  const int world = 2;
  const ncclUniqueId id = Communicator::new_unique_id();
  std::atomic<int> mismatches{0}, other{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(r);
        CommOptions o;
        o.tag = r == 0 ? "model-a" : "model-b";
        auto c = Communicator::create(id, r, world, r, o);
        ADD_FAILURE() << "rank " << r << " created a communicator despite the mismatch";
      } catch (const Error& e) {
        if (e.status() == Status::kMismatch) ++mismatches;
        else ++other;
        EXPECT_NE(e.message().find("disagree"), std::string::npos) << e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), world);
  EXPECT_EQ(other.load(), 0);
}

TEST(CommBasics, WindowIsZeroedAndCopyEnginePutsLandAtThePeer) {
  WEAVE_REQUIRE_GPUS(2);
  const size_t kSlot = 4096;
  for_each_rank([&](Communicator& c) {
    const int w = c.world_size(), r = c.rank();
    WindowLayout layout;
    layout.add("ctrl", RegionKind::kControl, 256);
    layout.add("data", RegionKind::kData, kSlot * w);
    SymmetricWindow win(c, layout);
    std::vector<uint8_t> host(win.bytes(), 0xAB);
    WEAVE_CHECK_CUDA(cudaMemcpy(host.data(), win.local(), win.bytes(), cudaMemcpyDeviceToHost));
    size_t nonzero = 0;
    for (auto b : host) nonzero += b != 0;
    EXPECT_EQ(nonzero, 0u) << "rank " << r << ": the window must be zeroed at creation";
    for (int p = 0; p < w; ++p) EXPECT_NE(win.peer(p), nullptr);
    EXPECT_EQ(win.peer(r), win.local());
    // Put my pattern into the next rank's slot [r] through the copy engine.
    std::vector<uint8_t> mine(kSlot);
    for (size_t i = 0; i < kSlot; ++i) mine[i] = byte_value(r, i, 77);
    DevBuf src(kSlot);
    WEAVE_CHECK_CUDA(cudaMemcpy(src.p, mine.data(), kSlot, cudaMemcpyHostToDevice));
    const int next = (r + 1) % w, prev = (r - 1 + w) % w;
    WEAVE_CHECK_CUDA(cudaMemcpy(win.peer(next) + win.layout().at("data").offset + r * kSlot, src.p, kSlot,
                                cudaMemcpyDeviceToDevice));
    WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
    c.barrier();
    std::vector<uint8_t> got(kSlot);
    WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), win.region("data") + prev * kSlot, kSlot, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < kSlot; ++i) wrong += got[i] != byte_value(prev, i, 77);
    EXPECT_EQ(wrong, 0u) << "rank " << r << ": bytes from rank " << prev;
    c.barrier();
  });
}

TEST(CommBasics, WindowLayoutMismatchRaisesOnEveryRankAndLeavesTheCommunicatorUsable) {
  WEAVE_REQUIRE_GPUS(2);
  std::atomic<int> mismatches{0};
  for_each_rank([&](Communicator& c) {
    WindowLayout bad;
    bad.add("data", RegionKind::kData, c.rank() == 0 ? 8192 : 16384);
    try {
      SymmetricWindow win(c, bad);
      ADD_FAILURE() << "rank " << c.rank() << " created a window despite the mismatch";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kMismatch) << e.what();
      if (e.status() == Status::kMismatch) ++mismatches;
    }
    WindowLayout good;
    good.add("data", RegionKind::kData, 8192);
    EXPECT_NO_THROW(SymmetricWindow(c, good));
  });
  EXPECT_EQ(mismatches.load(), local_world());
}

namespace {
// Each rank writes 1000 + rank into the next rank's window, NCCL's LSA barrier, then reads what
// the previous rank wrote. Proves the window's ncclDevComm carries working LSA barriers.
__global__ void lsa_barrier_probe(ncclDevComm dc, ncclWindow_t win, int* out) {
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamTagLsa(), 0);
  const int next = (dc.lsaRank + 1) % dc.lsaSize, prev = (dc.lsaRank - 1 + dc.lsaSize) % dc.lsaSize;
  if (threadIdx.x == 0) static_cast<int*>(ncclGetLsaPointer(win, 0, next))[dc.lsaRank] = 1000 + dc.rank;
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  if (threadIdx.x == 0) *out = static_cast<int*>(ncclGetLocalPointer(win, 0))[prev];
}
}  // namespace

TEST(CommBasics, DevCommLsaBarrierOrdersPeerStores) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    WindowLayout layout;
    layout.add("data", RegionKind::kData, 4096);
    SymmetricWindow win(c, layout);
    DevBuf out(sizeof(int));
    lsa_barrier_probe<<<1, 64>>>(win.dev_comm(), win.nccl_window(), out.as<int>());
    WEAVE_CHECK_LAUNCH();
    WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
    int got = 0;
    WEAVE_CHECK_CUDA(cudaMemcpy(&got, out.p, sizeof(int), cudaMemcpyDeviceToHost));
    const int w = c.world_size();
    EXPECT_EQ(got, 1000 + (c.rank() - 1 + w) % w) << "rank " << c.rank();
    c.barrier();
  });
}

TEST(CommBasics, CollectiveArgumentsAreValidated) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    CollectiveConfig bad;
    bad.op = CollectiveOp::kAllReduce;
    bad.dtype = DType::kE4M3;
    bad.max_count = 16;
    try {
      Collective op(c, bad);
      ADD_FAILURE() << "e4m3 all-reduce accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(e.message().find("dtype"), std::string::npos) << e.what();
    }
    bad.dtype = DType::kBF16;
    bad.max_count = 0;
    EXPECT_THROW(Collective(c, bad), Error);
    CollectiveConfig cfg;
    cfg.op = CollectiveOp::kAllGather;
    cfg.transport = Transport::kLsa;
    cfg.max_count = 1024;
    Collective ag(c, cfg);
    DevBuf buf(1 << 16);
    auto expect_invalid = [&](const void* in, void* out, size_t n, const char* what) {
      try {
        ag.run(in, out, n, nullptr);
        ADD_FAILURE() << what << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.status(), Status::kInvalidArgument) << what << ": " << e.what();
      }
    };
    expect_invalid(buf.p, buf.as<char>() + 8192, 1025, "count above max_count");
    expect_invalid(buf.p, buf.as<char>() + 8192, 0, "count 0");
    expect_invalid(buf.as<char>() + 1, buf.p, 1024, "in overlapping out");
    expect_invalid(nullptr, buf.p, 16, "null input");
  });
}
