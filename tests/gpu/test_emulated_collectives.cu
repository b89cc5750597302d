// weave's collectives in the emulated world (testing/emulated_world.hpp): W = 2, 4, 8 ranks as
// threads on one GPU, the same Collective code and kernels as over NCCL, every transport except
// nccl (the emulated world has no NCCL communicator) through self_test(): known per-rank values,
// checked per source rank, caller buffers and window buffers. The same cases run over NCCL
// windows on 2+ GPUs in tests/multi_gpu/test_comm_collectives.cu.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/collective_impl.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"

using namespace weave;

namespace {

struct Combo {
  CollectiveOp op;
  Transport transport;
  Algorithm algorithm;
};

const Combo kCombos[] = {
    {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush},
    {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPull},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kLowLatency},
    {CollectiveOp::kReduceScatter, Transport::kCe, Algorithm::kPush},
    {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush},
    {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kLowLatency},
    {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kOneShot},
    {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kOneShot},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kAuto},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency},
};

std::string name_of(const Combo& c, DType d, int world) {
  std::string s = std::string(to_string(c.op)) + "/" + std::string(to_string(c.transport)) + "/" +
                  std::string(to_string(c.algorithm)) + "/W" + std::to_string(world);
  if (c.op != CollectiveOp::kAllGather) s += "/" + std::string(to_string(d));
  return s;
}

CollectiveConfig config_of(const Combo& c, DType d, size_t max_count) {
  CollectiveConfig cfg;
  cfg.op = c.op;
  cfg.transport = c.transport;
  cfg.algorithm = c.algorithm;
  cfg.dtype = d;
  cfg.max_count = max_count;
  return cfg;
}

}  // namespace

TEST(EmulatedCollectives, SelfTestEveryTransportAlgorithmAndWorld) {
  WEAVE_REQUIRE_GPUS(1);
  const std::vector<size_t> counts = {1, 7, 4099, 65536 + 13, (size_t(1) << 20) + 5};
  for (int world : {2, 4, 8}) {
    bench::EmulatedWorld ew(world, 0, 20);
    for (const Combo& combo : kCombos) {
      // Streams of all ranks: one per rank and its self-test stream (ce: the emulated world says).
      const std::string why = combo.transport == Transport::kCe
                                  ? bench::EmulatedWorld::copy_engine_unsupported_reason(world)
                                  : (bench::EmulatedWorld::queue_budget_ok(2 * world) ? "" : "too few hardware queues");
      if (!why.empty()) {
        std::printf("  %s at W = %d: %s\n", std::string(to_string(combo.transport)).c_str(), world, why.c_str());
        continue;
      }
      const std::vector<DType> dtypes = combo.op == CollectiveOp::kAllGather ? std::vector<DType>{DType::kBF16}
                                                                              : std::vector<DType>{DType::kBF16, DType::kF32};
      for (DType d : dtypes) {
        SCOPED_TRACE(name_of(combo, d, world));
        ew.run([&](comm::Group& g) {
          auto op = Collective::Impl::create(g, config_of(combo, d, counts.back()));
          for (size_t n : counts) {
            const SelfTestReport rep = op->self_test(n);
            EXPECT_TRUE(rep.ok) << name_of(combo, d, world) << " count " << n << ": " << rep.detail;
            if (!rep.ok) break;
          }
        });
      }
    }
  }
}

// The nccl transport needs an NCCL communicator: refused with the reason, on every rank.
TEST(EmulatedCollectives, NcclTransportIsUnavailableWithTheReason) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    CollectiveConfig cfg = config_of({CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault},
                                     DType::kBF16, 1024);
    const std::string msg = test::error_of([&] { Collective::Impl::create(g, cfg); }, Status::kUnavailable);
    EXPECT_NE(msg.find("nccl"), std::string::npos) << msg;
  });
}

// A rank that never arrives at a host rendezvous: the others raise kTimeout naming it.
TEST(EmulatedCollectives, RendezvousTimesOutNamingTheMissingRank) {
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(3, 0, 0.5);
  ew.run([&](comm::Group& g) {
    if (g.rank() == 2) return;  // never arrives
    const std::string msg = test::error_of([&] { g.barrier(); }, Status::kTimeout);
    EXPECT_NE(msg.find("rank(s) 2"), std::string::npos) << msg;
  });
}

// Issue 16 item 1: flag and credit slots that were last written 2^31 + 5 calls ago (as after one
// two-shot call and 2^31 LL-sized calls, which write no flags) must not pass this call's waits.
// The old comparison read them as 5 calls ahead, so the first two-shot call reduced whatever its
// staging held; now every wait holds until this call's write arrives. auto mixes LL and two-shot.
TEST(EmulatedCollectives, SlotsLastWrittenTwoToThe31CallsAgoDoNotPassWaits) {
  WEAVE_REQUIRE_GPUS(1);
  const size_t two_shot = (size_t(8) << 20) + 17;  // bf16 elements: 16 MB, past auto's one-shot limit
  for (int world : {2, 4}) {
    bench::EmulatedWorld ew(world, 0, 20);
    ew.run([&](comm::Group& g) {
      CollectiveConfig cfg = config_of({CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kAuto}, DType::kBF16, two_shot);
      comm::CollectiveHooks hooks;
      hooks.stale_slot_lag = 0x80000000u + 5u;
      auto op = Collective::Impl::create(g, cfg, hooks);
      for (size_t n : {two_shot, size_t(1000), size_t(7), two_shot, size_t(300000), two_shot}) {
        const SelfTestReport rep = op->self_test(n);
        EXPECT_TRUE(rep.ok) << "W" << world << " count " << n << ": " << rep.detail;
      }
    });
  }
}
