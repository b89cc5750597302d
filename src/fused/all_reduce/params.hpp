// The epilogue parameters of GemmAllReduce's fused kernel (host/device POD, passed by value inside
// the kernel's __grid_constant__ arguments; with the main loop's 3.3 KB in all, under the 4 KB limit).
#pragma once
#include <cuda.h>

#include <cstdint>

#include "comm/kernels.hpp"
#include "fused/all_reduce/schedule.hpp"
#include "weave/window_handle.hpp"

namespace weave::fused {

struct AllReduceParams {
  CUtensorMap tma_c;                        // rows [0, m) of gar.out in this rank's window
  CUtensorMap tma_peer[kMaxWorld - 1];      // the same rows in peer (rank + s) % world's window, s = 1..world-1
  CUtensorMap tma_stage[kMaxWorld];         // [owner d]: d's staging slot [src = rank], rows of band d
  comm::Proto p;                            // window handle, control / credit / flag offsets, timeout, error record
  ArSchedule sched;                         // bands, chunks and this rank's walk
  uint64_t staging = 0;                     // gar.staging in every window: [src][band rows][n] bf16
  uint64_t slot_stride = 0;                 // bytes of one source's slot
  int32_t m = 0, n = 0;                     // rows and columns of this call
  int32_t block_m = 128;
  int32_t exact_own = 0;                    // 1: the own term in fp32 (else rounded to bf16, as the split path)
  // fused-rs (MORI's structure, a control arm): every tile, the own band's too, goes as a bf16
  // partial to its owner's staging slot [rank] (tma_stage[rank] = this rank's own slot); no combine,
  // no end-of-call wait; the tail kernel (fused/all_reduce/tail.hpp) reduces, gathers and closes the call.
  int32_t scatter_only = 0;
  // GemmReduceScatter (fused): the own band's final tiles go to this rank's output only (no gather
  // leg); their chunk flags still go to every peer, as the word that this rank has read the peers'
  // partials (the end-of-call wait that keeps the next call's partials out of the staging).
  int32_t no_gather = 0;
  // fused-ce (fused/all_reduce/pull.hpp): every tile to this rank's own output rows (a peer band's as its
  // partial), the copy streams pull them; end_call's warp triggers the copies and turns their
  // landed words into the arrived epochs the combine waits for.
  int32_t pull = 0;
  uint64_t pull_words = 0;                  // gar.pull in this rank's window
  uint64_t delay_pull_ns = 0;               // testing, fused-ce: each gather trigger this much later (a slow puller of the peers' rows)
  // Testing hooks (negative controls; never set in production):
  int32_t skip_arrival_wait = 0;            // end without waiting for the peers' final chunks
  int32_t skip_partial_wait = 0;            // reduce own tiles without waiting for the peers' partials
  int32_t publish_every_tile = 0;           // no election: publish a chunk's flag after each of its tiles
  uint64_t delay_stores_ns = 0;             // a slow rank (each tile's stores start this much later)
  int32_t pull_stores_after_abort = 0;      // fused-ce: store tiles after an abort (the negative control)
};

}  // namespace weave::fused
