// The testing hook CollectiveHooks::receive_delay_ns as both the lsa and the ce calls apply it
// (collective_run.cpp, collective_ce.cpp).
#pragma once
#include <cstdint>

#include "comm/collective_hooks.hpp"

namespace weave {

// Testing hook CollectiveHooks::receive_delay_ns: only the last rank is slow, so its peers run ahead.
inline uint64_t receive_delay_of(const comm::CollectiveHooks& hooks, int rank, int world) {
  return rank == world - 1 ? hooks.receive_delay_ns : 0;
}

}  // namespace weave
