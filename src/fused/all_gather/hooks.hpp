// Testing hooks of weave::GemmAllGather (internal): the negative controls and stress settings the
// tests set through GemmAllGather::Impl::create. Kept out of the public GemmAllGatherConfig so a
// caller cannot switch a safety mechanism off. Never change them in production.
#pragma once
#include <cstdint>

#include "fused/tile_choice.hpp"

namespace weave::fused {

struct GemmAllGatherHooks {
  bool flow_control = true;           // false: no credit wait (the negative control must corrupt)
  bool skip_arrival_wait = false;     // fused: end before the peers' chunks landed (negative control)
  std::uint32_t initial_epoch = 0;    // start the call epochs here (e.g. near 2^32)
  std::uint32_t stale_slot_lag = 0;   // flags and credits start this many calls behind the epoch (a
                                      // slot last written long ago, e.g. 2^31 + k; as CollectiveHooks')
  std::uint64_t delay_stores_ns = 0;  // fused: wait this long before each tile's stores (a slow
                                      // rank; may differ between ranks)
  std::uint64_t delay_pull_ns = 0;    // fused-ce: wait this long before triggering each chunk's
                                      // pull (a slow receiver)
  bool mx_route_unguarded = false;    // mxfp8 route: run both kernels (the guard's negative control;
                                      // may differ between ranks)
  FusedTile tile;                     // every call runs this tile (one of the op's candidates), not
                                      // the planner's: each built instance gets tested
  bool split_leg = true;              // false: the split modes run the op's tile at every m, never
                                      // weave::Gemm's GEMV or K split (fused == split bitwise tests)
};

}  // namespace weave::fused
