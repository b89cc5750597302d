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
    case FlagKind::kZeroCopyOffset: return "zero-copy buffer offset";
    case FlagKind::kCallRows: return "call rows (m)";
    case FlagKind::kLineBytes: return "ll line byte count";
    case FlagKind::kCopyLanded: return "copy-engine landed word";
  }
  return "unknown flag";
}

// The epochs an LL line flag can stand for (protocol.hpp ll_flag): 2^31 is the flag of epoch 0
// and of epoch 2^31 alike; every other nonzero flag is its own epoch.
static int32_t ll_calls_behind(uint32_t expected_flag, uint32_t seen_flag) {
  auto candidates = [](uint32_t flag, uint32_t out[2]) {
    out[0] = flag;
    out[1] = flag == 0x80000000u ? 0u : flag;
    return flag == 0x80000000u ? 2 : 1;
  };
  uint32_t e[2], s[2];
  const int ne = candidates(expected_flag, e), ns = candidates(seen_flag, s);
  // The reading nearest to the expected call is the one a peer a few calls off produces.
  int32_t best = static_cast<int32_t>(e[0] - s[0]);
  for (int i = 0; i < ne; ++i)
    for (int j = 0; j < ns; ++j) {
      const int32_t d = static_cast<int32_t>(e[i] - s[j]);
      const int64_t ad = d < 0 ? -int64_t{d} : int64_t{d}, ab = best < 0 ? -int64_t{best} : int64_t{best};
      if (ad < ab) best = d;
    }
  return best;
}

LineState classify_ll_line(uint32_t expected_flag, uint32_t seen_flag) {
  if (seen_flag == 0) return LineState::kNeverWritten;
  return ll_calls_behind(expected_flag, seen_flag) > 0 ? LineState::kOlderCall : LineState::kLaterCall;
}

Status error_status(const DeviceErrorRecord& r) noexcept {
  const FlagKind kind = static_cast<FlagKind>(r.flag_kind);
  return kind == FlagKind::kZeroCopyOffset || kind == FlagKind::kCallRows || kind == FlagKind::kLineBytes
             ? Status::kMismatch
             : Status::kTimeout;
}

std::string describe(const DeviceErrorRecord& r) {
  std::ostringstream os;
  if (static_cast<FlagKind>(r.flag_kind) == FlagKind::kZeroCopyOffset) {
    os << "rank " << r.rank << ": its zero-copy buffer of this call is at window offset " << r.own_offset
       << " (block stride " << r.own_stride << " bytes) but peer " << r.peer << "'s is at window offset "
       << r.peer_offset << " (block stride " << r.peer_stride
       << " bytes); in and out buffers that lie in the op's window must sit at the same offset on every rank "
          "(e.g. window_output() on each), or outside the window on every rank. Nothing was stored into a peer";
    return os.str();
  }
  if (static_cast<FlagKind>(r.flag_kind) == FlagKind::kCallRows) {
    os << "rank " << r.rank << " called with m = " << r.own_offset << " but peer " << r.peer << " with m = "
       << r.peer_offset << " in the same call (epoch " << r.expected
       << "); every rank of a fused call must pass the same m. Nothing more was stored into a peer";
    return os.str();
  }
  if (static_cast<FlagKind>(r.flag_kind) == FlagKind::kLineBytes) {
    os << "rank " << r.rank << "'s low-latency call moves " << r.own_offset << " bytes per peer but peer " << r.peer
       << "'s moves " << r.peer_offset << " in the same call (line flag " << r.expected
       << "); every rank must make the same call with the same count (e.g. the same m). Nothing was read from "
          "the peer's lines";
    return os.str();
  }
  if (static_cast<FlagKind>(r.flag_kind) == FlagKind::kCopyLanded && r.followed_peer == 0) {
    // The word is this rank's own (not in the window, not an epoch): no offset, no "calls behind".
    os << "rank " << r.rank << " timed out after " << static_cast<double>(r.waited_ns) * 1e-9
       << " s waiting for its copy stream to land a chunk pulled from peer " << r.peer << " (block " << r.block
       << "): the copy engine's copy did not complete (its stream waits on other work, or the peer never "
          "triggered it)";
    return os.str();
  }
  if (r.followed_peer != 0) {
    os << "rank " << r.rank << " stopped waiting after " << static_cast<double>(r.waited_ns) * 1e-9 << " s: peer "
       << r.peer << " gave up this op first (a timeout or an error there, which that rank's check() names; it "
       << "publishes nothing more), while this rank waited for its " << to_string(static_cast<FlagKind>(r.flag_kind));
  } else {
    os << "rank " << r.rank << " timed out after " << static_cast<double>(r.waited_ns) * 1e-9
       << " s waiting for peer " << r.peer << "'s " << to_string(static_cast<FlagKind>(r.flag_kind));
  }
  if (r.phase >= 0) os << " (phase " << r.phase << ", block " << r.block << ")";
  else os << " (block " << r.block << ")";
  os << " at window offset " << r.flag_offset;
  if (static_cast<FlagKind>(r.flag_kind) == FlagKind::kLine) {
    os << ": expected line flag " << r.expected << ", seen " << r.seen;
    switch (classify_ll_line(r.expected, r.seen)) {
      case LineState::kNeverWritten:
        os << " (never written: peer " << r.peer << " did not make this call, or is stuck)";
        break;
      case LineState::kOlderCall:
        os << " (an older call's line, " << ll_calls_behind(r.expected, r.seen) << " call(s) back: peer " << r.peer
           << " is slow, stuck, or did not make this call)";
        break;
      case LineState::kLaterCall:
        os << " (a LATER call's line: the line was overwritten before it was read; buffer reuse is broken)";
        break;
    }
    return os.str();
  }
  if (r.followed_peer != 0) {
    os << ": expected epoch >= " << r.expected << ", seen " << r.seen;
    return os.str();
  }
  os << ": expected epoch >= " << r.expected << ", seen " << r.seen
     << " (peer " << r.peer << " is " << static_cast<int32_t>(r.expected - r.seen)
     << " call(s) behind: it is slow, stuck, or did not make this call)";
  return os.str();
}

}  // namespace weave::comm
