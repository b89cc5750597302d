// GemmAllReduce fused-ce: the copy streams' walk and the words they share with the kernel (host and
// device; the protocol is docs/memory_ordering.md "ar-fused-ce").
//
// Rank r has one copy stream per peer step s = 1..world-1 (peer q = (r + s) mod world). Stream s
// carries both legs with q, in the order their chunks become ready at q (q's walk,
// fused/all_reduce/schedule.hpp: round k makes q's partial of band r chunk k, then q's own chunk k - 1):
//
//   RS 0, RS 1, AG 0, RS 2, AG 1, ..., AG C_q - 1
//   RS c: pull q's bf16 partial of band r's chunk c (in q's output rows) into r's staging slot [q]
//   AG c: pull q's final chunk c of band q (q's output rows) into r's output rows
//
// The words live in the op's gar.pull region, local to each rank (peers never touch them):
//   trigger[leg][s - 1][c]  the kernel stores 1 once the chunk is ready at q (on every path); the
//                           stream waits for 1, stores 0, copies
//   landed[s - 1][c]        the stream stores 1 after an RS copy (cuStreamWriteValue32 with its
//                           memory barrier: the copy's bytes first); the kernel's landed lane waits
//                           for 1, stores 0 and publishes arrived[q][c] = e
//   arrived[src][c]         epoch words: what the own tiles' combine waits for (as fused waits for
//                           flag[0][src][c]); set to the initial epoch at construction
#pragma once
#include <cstdint>

#include "comm/protocol.hpp"
#include "fused/all_reduce/schedule.hpp"

namespace weave::fused {

inline constexpr int kArPullRs = 0, kArPullAg = 1;  // legs (= the flag phase each waits for)
inline constexpr int kArPullSets = kArMaxWorld - 1;  // peer steps

WEAVE_HD int ar_pull_trigger(int leg, int step, int chunk) {
  return (leg * kArPullSets + step - 1) * comm::kMaxChunks + chunk;
}
WEAVE_HD int ar_pull_landed(int step, int chunk) { return (2 * kArPullSets + step - 1) * comm::kMaxChunks + chunk; }
inline constexpr int kArPullArrived = 3 * kArPullSets * comm::kMaxChunks;  // first arrived word
WEAVE_HD int ar_pull_arrived(int src, int chunk) { return kArPullArrived + src * comm::kMaxChunks + chunk; }
inline constexpr int kArPullWords = kArPullArrived + kArMaxWorld * comm::kMaxChunks;
inline constexpr uint64_t kArPullBytes = kArPullWords * 4;

// Calls f(leg, chunk) for stream `step`'s events in order: round k = 0 .. max_chunks gives RS k
// (band `rank`'s chunk k, if it exists) then AG k - 1 (band q's chunk k - 1, if it exists).
template <class F>
WEAVE_HD void ar_pull_walk(const ArSchedule& s, int rank, int q, F&& f) {
  const int own = ar_chunks_of(s, rank), theirs = ar_chunks_of(s, q);
  for (int k = 0; k <= s.max_chunks; ++k) {
    if (k < own) f(kArPullRs, k);
    if (k >= 1 && k - 1 < theirs) f(kArPullAg, k - 1);
  }
}

// Calls f(step, leg, chunk) for every copy-stream event of rank `rank`, in the order the op enqueues
// them: round-major (round k of every stream before round k + 1 of any), each stream's own events
// in ar_pull_walk's order. Where the copy streams share one hardware queue
// (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-style overlap sets) the queue runs the events in this
// order; stream-major (one stream's whole walk, then the next's) deadlocks there at W >= 3: a
// gather from one peer waits, ahead of another peer's reduce-scatter pull that the first peer's
// chunk needs (CPU-simulated in tests/cpu/test_fused_ar_plan.cpp).
// round_end(k) after round k's events (every rank runs the same s.max_chunks + 1 rounds): the op
// puts a host lockstep there, so where RANKS share one GPU's queues (the emulated world) round k of
// every rank is enqueued before round k + 1 of any; enqueued rank by rank instead, ranks whose copy
// streams met on one queue deadlocked (CPU-simulated in tests/cpu/test_fused_ar_plan.cpp).
template <class F, class RoundEnd>
WEAVE_HD void ar_pull_enqueue_order(const ArSchedule& s, int rank, int world, F&& f, RoundEnd&& round_end) {
  const int own = ar_chunks_of(s, rank);
  for (int k = 0; k <= s.max_chunks; ++k) {
    for (int step = 1; step < world; ++step) {
      const int q = comm::peer_at(rank, step, world);
      if (k < own) f(step, kArPullRs, k);
      if (k >= 1 && k - 1 < ar_chunks_of(s, q)) f(step, kArPullAg, k - 1);
    }
    round_end(k);
  }
}
template <class F>
WEAVE_HD void ar_pull_enqueue_order(const ArSchedule& s, int rank, int world, F&& f) {
  ar_pull_enqueue_order(s, rank, world, f, [](int) {});
}

}  // namespace weave::fused
