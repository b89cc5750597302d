// Window layout math: named regions never overlap, keep their alignment, are refused when
// ambiguous, and every op's regions hold what its kernels address, for world sizes 1..8.
#include <gtest/gtest.h>

#include <algorithm>

#include "comm/kernels.hpp"
#include "comm/op_layout.hpp"
#include "comm/protocol.hpp"
#include "weave/error.hpp"
#include "weave/window_layout.hpp"

using namespace weave;
using namespace weave::comm;

namespace {

template <typename Fn>
std::string invalid_argument_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "expected Error(kInvalidArgument)";
  return "";
}

void expect_disjoint(const WindowLayout& layout) {
  auto regions = layout.regions();
  std::sort(regions.begin(), regions.end(), [](const Region& a, const Region& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < regions.size(); ++i)
    EXPECT_LE(regions[i - 1].end(), regions[i].offset) << regions[i - 1].name << " overlaps " << regions[i].name;
  for (const auto& r : regions) EXPECT_LE(r.end(), layout.total_bytes()) << r.name;
}

}  // namespace

TEST(WindowLayout, RegionsAreAlignedDisjointAndNamed) {
  WindowLayout l;
  const Region& a = l.add("a.flags", RegionKind::kFlags, 20);
  EXPECT_EQ(a.offset, 0u);
  const Region& b = l.add("a.data", RegionKind::kData, 5000);
  EXPECT_EQ(b.offset % 4096, 0u);
  const Region& c = l.add("b.credits", RegionKind::kCredits, 3, 64);
  EXPECT_EQ(c.offset % 64, 0u);
  EXPECT_GE(c.offset, b.end());
  expect_disjoint(l);
  EXPECT_EQ(l.total_bytes() % WindowLayout::kWindowAlign, 0u);
  EXPECT_GE(l.total_bytes(), l.used_bytes());
  EXPECT_EQ(l.at("a.data").offset, b.offset);
  EXPECT_EQ(l.find("nope"), nullptr);
}

TEST(WindowLayout, RefusesAmbiguousOrEmptyRegions) {
  WindowLayout l;
  l.add("x", RegionKind::kData, 16);
  EXPECT_NE(invalid_argument_of([&] { l.add("x", RegionKind::kFlags, 16); }).find("already used"), std::string::npos);
  EXPECT_NE(invalid_argument_of([&] { l.add("", RegionKind::kFlags, 16); }).find("empty"), std::string::npos);
  EXPECT_NE(invalid_argument_of([&] { l.add("y", RegionKind::kFlags, 0); }).find(">= 1"), std::string::npos);
  EXPECT_NE(invalid_argument_of([&] { l.add("z", RegionKind::kFlags, 8, 24); }).find("power of two"), std::string::npos);
  const std::string msg = invalid_argument_of([&] { l.at("missing"); });
  EXPECT_NE(msg.find("missing"), std::string::npos);
  EXPECT_NE(msg.find("x"), std::string::npos) << "should list the regions that exist: " << msg;
}

TEST(WindowLayout, HashSeesEveryDifferenceRanksCouldHave) {
  auto make = [](size_t bytes, const char* name, RegionKind kind) {
    WindowLayout l;
    l.add("ctrl", RegionKind::kControl, 256);
    l.add(name, kind, bytes);
    return l.hash();
  };
  const auto base = make(1000, "data", RegionKind::kData);
  EXPECT_EQ(base, make(1000, "data", RegionKind::kData));
  EXPECT_NE(base, make(1001, "data", RegionKind::kData));
  EXPECT_NE(base, make(1000, "datb", RegionKind::kData));
  EXPECT_NE(base, make(1000, "data", RegionKind::kFlags));
}

TEST(OpLayout, EveryOpAndWorldSizeFitsWhatItsKernelsAddress) {
  struct Case {
    CollectiveOp op;
    Algorithm alg;
    size_t esz;
  };
  const Case cases[] = {
      {CollectiveOp::kAllGather, Algorithm::kPush, 1},     {CollectiveOp::kAllGather, Algorithm::kPull, 1},
      {CollectiveOp::kAllGather, Algorithm::kNcclDefault, 1}, {CollectiveOp::kReduceScatter, Algorithm::kPush, 2},
      {CollectiveOp::kReduceScatter, Algorithm::kPush, 4}, {CollectiveOp::kAllReduce, Algorithm::kOneShot, 2},
      {CollectiveOp::kAllReduce, Algorithm::kTwoShot, 2},  {CollectiveOp::kAllReduce, Algorithm::kAuto, 4},
      {CollectiveOp::kAllReduce, Algorithm::kNcclDefault, 2},
  };
  for (int world : {1, 2, 3, 4, 8})
    for (const Case& c : cases)
      for (size_t max_count : {size_t(1), size_t(7), size_t(4099), size_t(1) << 20, (size_t(3) << 20) + 5}) {
        SCOPED_TRACE(::testing::Message() << to_string(c.op) << " " << to_string(c.alg) << " world " << world
                                          << " max_count " << max_count << " esz " << c.esz);
        OpShape s{c.op, c.alg, world, c.esz, max_count, 264};
        WindowLayout l;
        const OpOffsets o = add_op_regions(l, "op", s);
        expect_disjoint(l);
        const size_t bytes = max_count * c.esz;
        EXPECT_EQ(l.at("op.flags").bytes, 4u * kFlagPhases * world * 264);
        EXPECT_EQ(l.at("op.credits").bytes, 4u * world);
        EXPECT_GE(l.at("op.control").bytes, 3 * sizeof(uint32_t));
        EXPECT_EQ(o.flags % 256, 0u);
        switch (c.op) {
          case CollectiveOp::kAllGather:
            EXPECT_EQ(o.output_bytes, world * bytes);
            EXPECT_EQ(o.input_bytes, bytes);
            EXPECT_EQ(l.find("op.staging"), nullptr);
            break;
          case CollectiveOp::kReduceScatter:
            EXPECT_EQ(o.input_bytes, world * bytes);
            EXPECT_EQ(o.output_bytes, bytes);
            if (c.alg == Algorithm::kPush) {
              EXPECT_GE(o.oneshot_stride, bytes);
              EXPECT_EQ(o.oneshot_stride % kSlotAlign, 0u);
              EXPECT_GE(o.slot_bytes, world * o.oneshot_stride);
              EXPECT_EQ(l.at("op.staging").bytes, kStagingSlots * o.slot_bytes);
            }
            break;
          case CollectiveOp::kAllReduce: {
            const size_t g = kVecBytes / c.esz;
            if (c.alg == Algorithm::kOneShot) EXPECT_EQ(o.oneshot_max_count, max_count);
            if (c.alg == Algorithm::kOneShot || c.alg == Algorithm::kAuto) {
              EXPECT_GE(o.oneshot_stride, o.oneshot_max_count * c.esz);
              EXPECT_GE(o.slot_bytes, world * o.oneshot_stride);
            }
            if (c.alg == Algorithm::kTwoShot || c.alg == Algorithm::kAuto) {
              for (int q = 0; q < world; ++q)  // every owner chunk fits one per-source slot
                EXPECT_LE(owner_chunk(max_count, world, q, g).size() * c.esz, o.twoshot_stride);
              EXPECT_GE(o.slot_bytes, world * o.twoshot_stride);
            }
            if (c.alg == Algorithm::kNcclDefault) EXPECT_EQ(l.find("op.staging"), nullptr);
            break;
          }
        }
      }
}

TEST(OpLayout, SeveralOpsShareOneWindowWithoutAliasing) {
  WindowLayout l;
  const OpOffsets ag = add_op_regions(l, "ag", OpShape{CollectiveOp::kAllGather, Algorithm::kPush, 8, 1, 1 << 20, 264});
  const OpOffsets ar = add_op_regions(l, "ar", OpShape{CollectiveOp::kAllReduce, Algorithm::kAuto, 8, 2, 1 << 22, 264});
  const OpOffsets rs = add_op_regions(l, "rs", OpShape{CollectiveOp::kReduceScatter, Algorithm::kPush, 8, 4, 12345, 64});
  OpShape ll{CollectiveOp::kAllReduce, Algorithm::kAuto, 8, 2, 1 << 20, 264};
  ll.ll_max_count = 1 << 19;
  const OpOffsets arll = add_op_regions(l, "arll", ll);
  expect_disjoint(l);
  EXPECT_EQ(l.regions().size(), 5u + 6u + 6u + 7u);
  EXPECT_NE(arll.ll, 0u);
  EXPECT_NE(ag.flags, ar.flags);
  EXPECT_NE(ar.staging, rs.staging);
  EXPECT_THROW(add_op_regions(l, "ag", OpShape{CollectiveOp::kAllGather, Algorithm::kPush, 8, 1, 16, 1}), Error);
}

TEST(OpLayout, LowLatencyLinesHoldEveryPayloadForEverySourceAndCopy) {
  for (int world : {1, 2, 4, 8})
    for (auto op : {CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllReduce})
      for (size_t esz : {size_t(1), size_t(2), size_t(4)})
        for (size_t max_count : {size_t(1), size_t(3), size_t(4099), size_t(1) << 17}) {
          if (op == CollectiveOp::kAllGather && esz != 1) continue;
          SCOPED_TRACE(::testing::Message() << to_string(op) << " world " << world << " esz " << esz << " max_count "
                                            << max_count);
          for (auto alg : {Algorithm::kLowLatency, Algorithm::kAuto}) {
            OpShape s{op, alg, world, esz, max_count, 16};
            s.ll_max_count = alg == Algorithm::kLowLatency ? max_count : std::min<size_t>(max_count, 1000);
            WindowLayout l;
            const OpOffsets o = add_op_regions(l, "op", s);
            expect_disjoint(l);
            EXPECT_EQ(o.ll_max_count, s.ll_max_count);
            // The last line of the largest payload of the last source in the last copy is inside.
            const size_t lines = ll_lines(s.ll_max_count * esz);
            EXPECT_LE(lines * kLLLineBytes, o.ll_stride);
            EXPECT_EQ(o.ll_stride % kSlotAlign, 0u);
            EXPECT_EQ(l.at("op.ll").offset, o.ll);
            EXPECT_EQ(l.at("op.ll").bytes, kLLSlots * world * o.ll_stride);
            if (alg == Algorithm::kLowLatency && op != CollectiveOp::kAllGather)
              EXPECT_EQ(l.find("op.staging"), nullptr) << "ll stages nothing besides its lines";
          }
        }
  WindowLayout l;
  OpShape too_big{CollectiveOp::kAllReduce, Algorithm::kLowLatency, 2, 2, 16, 1};
  too_big.ll_max_count = 17;
  EXPECT_NE(invalid_argument_of([&] { add_op_regions(l, "x", too_big); }).find("ll_max_count"), std::string::npos);
}

TEST(OpLayout, AutoThresholdsAndLowLatencyGrid) {
  // one-shot all-reduce up to 8 MiB at 2 ranks, shrinking with the world-1 copies each rank receives
  EXPECT_EQ(one_shot_auto_max_bytes(2), size_t(8) << 20);
  EXPECT_EQ(one_shot_auto_max_bytes(8), (size_t(8) << 20) / 7);
  EXPECT_EQ(one_shot_auto_max_bytes(1), size_t(8) << 20);
  // ll buffers: lsa only; explicit ll holds max_count, auto up to kLLAutoMaxBytes per peer
  EXPECT_EQ(ll_max_count_for(Transport::kLsa, Algorithm::kLowLatency, 12345, 2), 12345u);
  EXPECT_EQ(ll_max_count_for(Transport::kLsa, Algorithm::kAuto, size_t(1) << 30, 2), kLLAutoMaxBytes / 2);
  EXPECT_EQ(ll_max_count_for(Transport::kLsa, Algorithm::kAuto, 100, 4), 100u);
  EXPECT_EQ(ll_max_count_for(Transport::kLsa, Algorithm::kPush, 100, 1), 0u);
  EXPECT_EQ(ll_max_count_for(Transport::kCe, Algorithm::kAuto, 100, 2), 0u);
  EXPECT_EQ(ll_max_count_for(Transport::kNccl, Algorithm::kAuto, 100, 2), 0u);
  // one 8-byte unit per 512-thread CTA slot, at least one CTA, at most the cap
  EXPECT_EQ(ll_blocks_for(1, 264), 1);
  EXPECT_EQ(ll_blocks_for(4096, 264), 1);
  EXPECT_EQ(ll_blocks_for(4097, 264), 2);
  EXPECT_EQ(ll_blocks_for(size_t(1) << 20, 264), 256);
  EXPECT_EQ(ll_blocks_for(size_t(2) << 20, 264), 264);
  EXPECT_EQ(ll_blocks_for(size_t(2) << 20, 7), 7);
}

TEST(OpLayout, RefusesImpossibleShapes) {
  WindowLayout l;
  EXPECT_NE(invalid_argument_of([&] { add_op_regions(l, "a", OpShape{CollectiveOp::kAllGather, Algorithm::kPush, 9, 1, 16, 1}); })
                .find("world"),
            std::string::npos);
  EXPECT_NE(invalid_argument_of([&] { add_op_regions(l, "b", OpShape{CollectiveOp::kAllGather, Algorithm::kPush, 2, 1, 0, 1}); })
                .find("max_count"),
            std::string::npos);
  EXPECT_NE(invalid_argument_of([&] { add_op_regions(l, "c", OpShape{CollectiveOp::kAllReduce, Algorithm::kAuto, 2, 3, 16, 1}); })
                .find("element size"),
            std::string::npos);
}
