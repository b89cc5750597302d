// The hooks of the split collective a fused op hosts (its split-lsa / split-ce modes): the op's
// protocol testing hooks passed on, and the op's max_sms grid cap, kept within the collective's
// occupancy (its CTAs wait for peers, so they must be resident together).
#pragma once
#include <algorithm>

#include "comm/collective_hooks.hpp"
#include "comm/group.hpp"
#include "comm/kernels.hpp"

namespace weave::fused {

template <class OpHooks>
comm::CollectiveHooks split_collective_hooks(const OpHooks& op, int max_sms, const comm::Group& g) {
  comm::CollectiveHooks ch;
  ch.flow_control = op.flow_control;
  ch.initial_epoch = op.initial_epoch;
  ch.stale_slot_lag = op.stale_slot_lag;
  if (max_sms > 0)
    ch.max_blocks =
        std::min(max_sms, std::max(1, comm::lsa_max_blocks(g.device(), g.world_size()) / g.ranks_per_device()));
  return ch;
}

}  // namespace weave::fused
