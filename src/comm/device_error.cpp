#include "comm/device_error.hpp"

#include <sstream>

namespace weave::comm {

const char* to_string(FlagKind kind) noexcept {
  switch (kind) {
    case FlagKind::kCredit: return "credit (ready epoch)";
    case FlagKind::kArrival: return "arrival flag";
    case FlagKind::kDone: return "done-reading flag";
    case FlagKind::kReady: return "data-ready flag";
    case FlagKind::kLine: return "ll data line";
  }
  return "unknown flag";
}

std::string describe(const DeviceErrorRecord& r) {
  std::ostringstream os;
  os << "rank " << r.rank << " timed out after " << static_cast<double>(r.waited_ns) * 1e-9 << " s waiting for peer "
     << r.peer << "'s " << to_string(static_cast<FlagKind>(r.flag_kind));
  if (r.phase >= 0) os << " (phase " << r.phase << ", block " << r.block << ")";
  else os << " (block " << r.block << ")";
  os << " at window offset " << r.flag_offset;
  if (static_cast<FlagKind>(r.flag_kind) == FlagKind::kLine) {
    const int32_t behind = static_cast<int32_t>(r.expected - r.seen);
    os << ": expected line flag " << r.expected << ", seen " << r.seen;
    if (r.seen == 0) os << " (never written: peer " << r.peer << " did not make this call, or is stuck)";
    else if (behind > 0) os << " (an older call's line: peer " << r.peer << " is slow, stuck, or did not make this call)";
    else os << " (a LATER call's line: the line was overwritten before it was read; buffer reuse is broken)";
    return os.str();
  }
  os << ": expected epoch >= " << r.expected << ", seen " << r.seen
     << " (peer " << r.peer << " is " << static_cast<int32_t>(r.expected - r.seen)
     << " call(s) behind: it is slow, stuck, or did not make this call)";
  return os.str();
}

}  // namespace weave::comm
