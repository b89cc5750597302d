// The credit rule in the form the kernels apply it (docs/memory_ordering.md "credit"), host- and
// device-callable: exchange_credits (comm/call_protocol.cuh; every lsa kernel and the ce enter
// kernel) waits for credit_wait_epoch(e, lag) and tests/cpu/test_comm_protocol.cpp simulates
// credit_granted, which is that wait's pass condition (wait_reached passes once
// epoch_reached(seen, expected)). The host picks the lag per buffer (collective_run.cpp, collective_ce.cpp): slots - 1
// for lsa staging (two copies), 0 for what lands in a receiver's output and for the ce transport's
// single staging copy. (comm::credit_needed(e, slots) in protocol.hpp is the same rule written
// with the slot count; the CPU test holds the two equal.)
#pragma once
#include <cstdint>

#include "comm/protocol.hpp"

namespace weave::comm {

// Calls a receiver may still be behind a sender's call when the buffer written rotates through
// `slots` copies: the copy call e overwrites was last read by call e - slots, which is over once
// the receiver has entered call e - slots + 1.
WEAVE_HD uint32_t credit_lag(uint32_t slots) { return slots - 1u; }
// The ready epoch a sender of call `epoch` waits for in the receiver's credit slot.
WEAVE_HD uint32_t credit_wait_epoch(uint32_t epoch, uint32_t lag) { return epoch - lag; }
// The sender of call `epoch` may write once the receiver's published ready epoch is `ready`.
WEAVE_HD bool credit_granted(uint32_t ready, uint32_t epoch, uint32_t lag) {
  return epoch_reached(ready, credit_wait_epoch(epoch, lag));
}

}  // namespace weave::comm
