// Whether this build has the ce transport: the fused operators' copy-engine mode (fused-ce) runs
// copy-engine pulls between the ranks' windows, so a build that compiled the ce transport out
// (-DWEAVE_ENABLE_CE=OFF) refuses that mode at construction instead of running copies it says it
// has not got. Host only; a constant of the build (no GPU is queried).
#pragma once

namespace weave::fused {

// Error(kUnavailable) "<op>: mode fused-ce needs the ce transport, which this build compiled out
// (-DWEAVE_ENABLE_CE=OFF)" when the ce transport is not compiled in; returns otherwise.
void require_ce_compiled_in(const char* op);

}  // namespace weave::fused
