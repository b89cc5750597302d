// The one-line report of a WaitTimeoutRecord (hopper/wait_record.hpp), as a pure function so it
// can be tested on the CPU: take_wait_timeout_report() formats the process-wide record with it.
// (Its own header, not wait_record.hpp, which every GEMM kernel instance includes.)
#pragma once
#include <string>

#include "hopper/wait_record.hpp"

namespace weave::hopper {

// "" unless r.magic == kWaitTimeoutMagic; else "GEMM pipeline wait timed out after <ms> ms: block
// <b> thread <t> waiting on <site>[<stage>] parity <p>" (site: empty, full,
// tile-scales empty, tile-scales full; hopper::WaitSite). Reads nothing but `r`.
std::string format_wait_timeout(const WaitTimeoutRecord& r);

}  // namespace weave::hopper
