#include "fused/ce_build.hpp"

#include "comm/transport_build.hpp"
#include "common/check.hpp"

namespace weave::fused {

void require_ce_compiled_in(const char* op) {
  WEAVE_EXPECT(comm::transport_compiled_in(Transport::kCe), Status::kUnavailable,
               op << ": mode fused-ce needs the ce transport, which this build compiled out (-DWEAVE_ENABLE_CE=OFF)");
}

}  // namespace weave::fused
