// The host-visible error slot a kernel fills when a bounded wait times out (STYLE.md habit 7):
// one per op, in mapped pinned host memory, so the host can read it after the kernel exits
// without a device copy. The first failing thread claims it (atomicCAS on the op's local abort
// word), writes the fields, then sets `valid` after a system fence. The host raises
// Error(kTimeout) naming them, or Error(kMismatch) for a zero-copy offset or a call's m that
// differs between ranks (the records that are not a timed-out wait; docs/memory_ordering.md
// "zero-copy-offsets" and "call-key").
#pragma once
#include <cstdint>
#include <string>

#include "weave/error.hpp"

namespace weave::comm {

enum class FlagKind : uint32_t {
  kCredit = 1,   // waiting for a receiver's ready epoch before writing into its window
  kArrival = 2,  // waiting for a sender's data-arrived flag
  kDone = 3,     // pull: waiting for readers to finish reading this rank's window
  kReady = 4,    // pull: waiting for a sender's data-ready flag
  kLine = 5,     // ll: waiting for a flag-in-data line of this call (equality, not >=)
  // Not a wait: a peer's zero-copy buffer sits at another window offset than this rank's
  // (own_* / peer_* below); found right after the call's handshake, before any store to a peer.
  kZeroCopyOffset = 6,
  // Not a wait: a peer called this fused op's call with another m (own_offset / peer_offset hold
  // the two m, expected the call's epoch); found right after acquiring the peer's flag or credit.
  kCallRows = 7,
  // fused-ce: waiting for this rank's own copy stream to land a chunk pulled from the peer (a
  // local word the copy sets to 1 after its copy; never an epoch).
  kCopyLanded = 8,
  // Not a wait: a peer's LL line of this call carries another payload byte count (own_offset /
  // peer_offset hold both counts, expected the line flag); found while polling the line.
  kLineBytes = 9,
};
const char* to_string(FlagKind kind) noexcept;

struct DeviceErrorRecord {
  uint32_t claimed;  // informational: 1 once a device thread took the record
  uint32_t valid;    // 1 once the fields below are written
  int32_t rank;
  int32_t peer;
  int32_t block;
  int32_t phase;
  uint32_t flag_kind;  // FlagKind
  uint32_t expected;   // the epoch waited for
  uint32_t seen;       // the last value read
  uint32_t followed_peer;  // 1: the wait ended early because `peer` had given up ("peer-abort")
  uint64_t waited_ns;
  uint64_t flag_offset;  // byte offset of the flag in the waiting rank's window
  // kZeroCopyOffset: where this rank's and the peer's zero-copy buffer of the call sit in their
  // windows (push: the landing offset; pull: rank 0's block) and their per-rank block stride.
  uint64_t own_offset, own_stride, peer_offset, peer_stride;
};

// "rank 1 timed out after 2.00 s waiting for peer 0's arrival flag (phase 0, block 3, window
//  offset 4352): expected epoch >= 8, seen 7"
std::string describe(const DeviceErrorRecord& r);
// kMismatch for a zero-copy offset, call-rows or LL byte-count mismatch, else kTimeout.
Status error_status(const DeviceErrorRecord& r) noexcept;

// What an LL line with flag `seen_flag` is, for a receiver waiting for `expected_flag`: zeros, a
// line of an earlier call, or of a later one. Flags are mapped back to epochs first (ll_flag gives
// epoch 0 the flag 2^31), so calls around 0 and the 2^32 wrap are classified right.
enum class LineState { kNeverWritten, kOlderCall, kLaterCall };
LineState classify_ll_line(uint32_t expected_flag, uint32_t seen_flag);

}  // namespace weave::comm
