// Testing hooks of weave::GemmAllReduce (internal): the negative controls and stress settings the
// tests set through GemmAllReduce::Impl::create. Kept out of the public GemmAllReduceConfig so a
// caller cannot switch a safety mechanism off. Never change them in production.
#pragma once
#include <cstdint>

#include "fused/tile_choice.hpp"

namespace weave::fused {

struct GemmAllReduceHooks {
  bool flow_control = true;           // split modes and fused-ce: false = no credit wait (fused-ce's
                                      // credit keeps a call's stores from overwriting the output a
                                      // peer's copy engine still reads). The fused kernel has no
                                      // credit: its own waits order every write into a peer after
                                      // the peer's reads (docs/fused.md)
  bool skip_arrival_wait = false;     // fused: end before the peers' final tiles landed (fused-ce:
                                      // trigger every copy at once, before its chunk is ready)
  bool skip_partial_wait = false;     // fused: sum own tiles without waiting for the peers' partials
  bool publish_every_tile = false;    // fused: no election; a chunk's flag after each of its tiles
  std::uint32_t initial_epoch = 0;    // start the call epochs here (e.g. near 2^32)
  std::uint32_t stale_slot_lag = 0;   // flags and credits start this many calls behind the epoch (a
                                      // slot last written long ago, e.g. 2^31 + k; as CollectiveHooks')
  std::uint64_t delay_stores_ns = 0;  // fused: wait this long before each tile's stores (a slow
                                      // rank; may differ between ranks)
  std::uint64_t delay_receive_ns = 0; // decode-fused: wait this long between sending the lines and
                                      // reading the peers' (a slow receiver; may differ between ranks).
                                      // delay_stores_ns delays its sends, skip_arrival_wait takes the
                                      // peers' lines unchecked (the negative control)
  int skip_gemv_push_rank = -1;       // decode-fused at M <= 8: the CTAs of this cluster rank push
                                      // none of their partials, so their cluster peers' landing waits
                                      // give up after 40 s (the negative control of the landing wait;
                                      // may differ between ranks)
  std::uint64_t delay_pull_ns = 0;    // fused-ce: each gather copy's trigger this much later (a slow
                                      // puller of the peers' final rows, for the credit's tests; may
                                      // differ between ranks)
  bool mx_route_unguarded = false;    // mxfp8 route: run both kernels (the guard's negative control;
                                      // may differ between ranks)
  bool pull_stores_after_abort = false;  // fused-ce: keep storing tiles after this rank gave up (the
                                         // negative control of "stores nothing after an abort")
  FusedTile tile;                     // every call runs this tile (one of the op's candidates), not
                                      // the planner's: each built instance gets tested
};

}  // namespace weave::fused
