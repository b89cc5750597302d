// Transports compiled out by CMake option report it, and requesting one raises kUnavailable
// naming the option. Runs in the default build (all compiled in) and in CI's build with every
// transport off (scripts/test.sh), where the expectations flip.
#include <gtest/gtest.h>

#include "fused/ce_build.hpp"
#include "weave/error.hpp"
#include "weave/transport.hpp"

using namespace weave;

namespace {
bool expected_compiled_in(Transport t) {
  switch (t) {
    case Transport::kNccl: return WEAVE_TEST_EXPECT_NCCL_TRANSPORT;
    case Transport::kCe: return WEAVE_TEST_EXPECT_CE;
    case Transport::kLsa: return WEAVE_TEST_EXPECT_LSA;
  }
  return false;
}
}  // namespace

TEST(TransportBuild, CompiledInMatchesTheBuildOptions) {
  for (const auto& a : transport_availability({0, 1})) {
    EXPECT_EQ(a.compiled_in, expected_compiled_in(a.transport)) << to_string(a.transport);
    if (!a.compiled_in) {
      EXPECT_FALSE(a.available);
      EXPECT_NE(a.reason.find("compiled out"), std::string::npos) << a.reason;
      EXPECT_NE(a.reason.find("=OFF"), std::string::npos) << a.reason;
    }
  }
}

TEST(TransportBuild, RequestingAnUnavailableTransportRaisesWithTheReason) {
  // On a CPU machine every transport is unavailable (no GPU); on a compiled-out build the reason
  // must be the build option, which takes precedence over the missing GPU.
  for (Transport t : {Transport::kNccl, Transport::kCe, Transport::kLsa}) {
    bool available = false;
    std::string reason;
    for (const auto& a : transport_availability({0, 1}))
      if (a.transport == t) available = a.available, reason = a.reason;
    if (available) continue;
    try {
      require_transport(t, {0, 1});
      ADD_FAILURE() << "require_transport(" << to_string(t) << ") returned although unavailable";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kUnavailable);
      EXPECT_NE(e.message().find(reason), std::string::npos) << e.message();
      if (!expected_compiled_in(t)) EXPECT_NE(e.message().find("compiled out"), std::string::npos);
    }
  }
}

// Both fused operators' fused-ce mode runs copy-engine pulls: a build without the ce transport
// refuses it by name (GemmAllGather and GemmAllReduce construct through this check), and a build
// with it lets it through (whether the GPUs can run it is the transport's availability, later).
TEST(TransportBuild, FusedCeModeNeedsTheCeTransportCompiledIn) {
  for (const char* op : {"GemmAllGather", "GemmAllReduce"}) {
    if (expected_compiled_in(Transport::kCe)) {
      EXPECT_NO_THROW(fused::require_ce_compiled_in(op)) << op;
      continue;
    }
    try {
      fused::require_ce_compiled_in(op);
      ADD_FAILURE() << op << ": fused-ce accepted in a build without the ce transport";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kUnavailable);
      EXPECT_NE(e.message().find(op), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("fused-ce"), std::string::npos) << e.message();
      EXPECT_NE(e.message().find("-DWEAVE_ENABLE_CE=OFF"), std::string::npos) << e.message();
    }
  }
}

TEST(TransportBuild, ParsesNames) {
  EXPECT_EQ(parse_transport("ce"), Transport::kCe);
  EXPECT_EQ(parse_transport("lsa"), Transport::kLsa);
  EXPECT_EQ(parse_transport("nccl"), Transport::kNccl);
  EXPECT_FALSE(parse_transport("sdma").has_value());
}
