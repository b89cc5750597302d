// Testing hooks of weave::Collective (internal): the negative controls and stress settings the
// tests set through Collective::Impl::create. Kept out of the public CollectiveConfig so a caller
// cannot switch a safety mechanism off. Never change them in production.
#pragma once
#include <cstdint>

namespace weave::comm {

struct CollectiveHooks {
  bool flow_control = true;       // false disables credits: the negative control must corrupt
  std::uint32_t initial_epoch = 0;  // start call epochs here (e.g. near 2^32 to force wrap-around)
  std::uint32_t stale_slot_lag = 0;  // flags and credits start this many calls behind the epoch
                                     // (a slot last written long ago, e.g. 2^31 + k)
  int max_blocks = 0;             // lsa grid cap; 0 = from occupancy
  std::uint64_t receive_delay_ns = 0;  // lsa ll, ce reductions: the last rank waits this long before it
                                       // reads what it received (LL lines, ce staging)
  // ce push: write into peers with copy-engine copies enqueued whatever the device decides (the
  // pre-issue-16 path): a call that timed out still overwrites a slow peer's live buffers. The
  // negative control of docs/memory_ordering.md "ce-gate".
  bool ce_ungated_peer_copies = false;
};

}  // namespace weave::comm
