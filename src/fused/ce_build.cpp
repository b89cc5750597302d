#include "fused/ce_build.hpp"

#include "common/check.hpp"
#include "weave/transport.hpp"

namespace weave::fused {

void require_ce_compiled_in(int device, const char* op) {
  bool compiled_in = false;
  for (const TransportAvailability& t : transport_availability({device}))
    if (t.transport == Transport::kCe) compiled_in = t.compiled_in;
  WEAVE_EXPECT(compiled_in, Status::kUnavailable,
               op << ": mode fused-ce needs the ce transport, which this build compiled out (-DWEAVE_ENABLE_CE=OFF)");
}

}  // namespace weave::fused
