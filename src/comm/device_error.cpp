#include "comm/device_error.hpp"

#include <sstream>

namespace weave::comm {

const char* to_string(FlagKind kind) noexcept {
  switch (kind) {
    case FlagKind::kCredit: return "credit (ready epoch)";
    case FlagKind::kArrival: return "arrival flag";
    case FlagKind::kDone: return "done-reading flag";
    case FlagKind::kReady: return "data-ready flag";
  }
  return "unknown flag";
}

std::string describe(const DeviceErrorRecord& r) {
  std::ostringstream os;
  os << "rank " << r.rank << " timed out after " << static_cast<double>(r.waited_ns) * 1e-9 << " s waiting for peer "
     << r.peer << "'s " << to_string(static_cast<FlagKind>(r.flag_kind));
  if (r.phase >= 0) os << " (phase " << r.phase << ", block " << r.block << ")";
  else os << " (block " << r.block << ")";
  os << " at window offset " << r.flag_offset << ": expected epoch >= " << r.expected << ", seen " << r.seen
     << " (peer " << r.peer << " is " << static_cast<int32_t>(r.expected - r.seen)
     << " call(s) behind: it is slow, stuck, or did not make this call)";
  return os.str();
}

}  // namespace weave::comm
