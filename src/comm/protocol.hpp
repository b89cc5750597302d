// The arithmetic every transport shares, host- and device-callable so the CPU tests check exactly
// what the kernels run: call epochs and credits (wrap-safe), peer orders, per-block partitions,
// flag indices, reduction chunks. World-size generic (1..kMaxWorld).
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define WEAVE_HD __host__ __device__ __forceinline__
#else
#define WEAVE_HD inline
#endif

namespace weave::comm {

// --- epochs (docs/memory_ordering.md, "credit" and "wrap") ---
// Every op counts its calls in a u32 epoch (call e = previous + 1) that wraps at 2^32. `seen`
// has reached `expected` when it is at most kEpochAheadWindow calls ahead of it (wrap-safe:
// unsigned distance; never a plain >=, which would fail at the wrap). Not "anything up to 2^31
// ahead": flag and credit slots are not rewritten by every call (per-CTA flags only by calls whose
// grid reaches the CTA, LL calls write none), so a slot last written 2^31 + k calls ago would read
// as k calls AHEAD and pass a wait at once (issue 16 item 1). A writer is never more than a few
// calls ahead of a reader of the same slot (each call waits on its peers; at most kStagingSlots
// rotating copies), so a stale slot now reads as behind unless it is within this window of 2^32
// calls old. The window is small for that reason (it was 2^20: a slot 2^32 - 2^20 calls old read as
// written; issue 36 item 6).
inline constexpr uint32_t kEpochAheadWindow = 64;
WEAVE_HD bool epoch_reached(uint32_t seen, uint32_t expected) { return seen - expected <= kEpochAheadWindow; }

// A receiver publishes ready = e when its call e starts (all of its earlier stream work, which
// includes every read of the buffers the op writes into, is then complete). A sender may write
// call `epoch` into a buffer that rotates through `slots` copies once the receiver's ready epoch
// has reached credit_needed(epoch, slots): the copy it overwrites was last used by call
// epoch - slots, which finished before the receiver started call epoch - slots + 1.
WEAVE_HD uint32_t credit_needed(uint32_t epoch, uint32_t slots) { return epoch - slots + 1u; }

// Slots must be a power of two: 2^32 is then a multiple of `slots` and the rotation does not jump
// at the wrap (3 slots would map 0xFFFFFFFF and 0 to the same slot).
WEAVE_HD bool valid_slot_count(uint32_t slots) { return slots != 0 && (slots & (slots - 1)) == 0; }
WEAVE_HD uint32_t slot_of(uint32_t epoch, uint32_t slots) { return epoch & (slots - 1u); }

// --- ranks sharing one GPU (the emulated world; docs/memory_ordering.md "residency") ---
// CTAs one rank may keep resident at once when `ranks` ranks share a GPU of `sms` SMs: its share of
// the SMs, less one left for the short kernels around calls (copies, checks), which could otherwise
// hold the last SM a peer's full-SM CTA needs. One rank per GPU: every SM.
WEAVE_HD int rank_sm_share(int sms, int ranks) {
  if (ranks <= 1) return sms;
  const int share = sms / ranks - 1;
  return share > 0 ? share : 1;
}

// --- peer orders ---
// Step s (1..world-1) of rank r talks to (r + s) mod world: in every step each rank sends to a
// distinct rank and receives from a distinct rank, so no receiver is hit by all senders at once.
WEAVE_HD int peer_at(int rank, int step, int world) { return (rank + step) % world; }
// The rank whose step-s send arrives at `rank`.
WEAVE_HD int source_at(int rank, int step, int world) { return (rank - step % world + world) % world; }

// --- partitions ---
struct Range {
  size_t begin = 0, end = 0;
  WEAVE_HD size_t size() const { return end - begin; }
};
WEAVE_HD size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
WEAVE_HD size_t round_up(size_t a, size_t b) { return ceil_div(a, b) * b; }

// Part `idx` of `parts` contiguous parts of [0, total), each part a multiple of `granule` (the
// last one shorter, trailing ones possibly empty). Both sides of a transfer compute the same
// parts, which is what lets block b of one rank signal block b of another.
WEAVE_HD Range part_range(size_t total, int parts, int idx, size_t granule) {
  const size_t per = round_up(ceil_div(total, static_cast<size_t>(parts)), granule);
  Range r;
  r.begin = per * static_cast<size_t>(idx);
  if (r.begin > total) r.begin = total;
  r.end = r.begin + per;
  if (r.end > total) r.end = total;
  return r;
}

// Two-shot all-reduce: elements [0, count) split into `world` owner chunks (granule-aligned).
WEAVE_HD Range owner_chunk(size_t count, int world, int owner, size_t granule) {
  return part_range(count, world, owner, granule);
}
// Largest owner chunk for counts up to max_count (sizes the reduce-scatter staging slots).
WEAVE_HD size_t max_owner_chunk(size_t max_count, int world, size_t granule) {
  return round_up(ceil_div(max_count, static_cast<size_t>(world)), granule);
}

// --- low-latency (LL) lines (docs/memory_ordering.md "ll-flag-in-data") ---
// A 16-byte line {d0, flag, d1, flag} carries 8 payload bytes; each 8-byte half {data, flag}
// lands whole, so a receiver that sees the call's flag in both halves holds that call's data,
// with no fence on the sender and no separate flag.
inline constexpr size_t kLLPayloadBytes = 8;
inline constexpr size_t kLLLineBytes = 16;
// LL buffers rotate through two copies per source (the negative control uses one).
inline constexpr uint32_t kLLSlots = 2;
WEAVE_HD size_t ll_lines(size_t payload_bytes) { return ceil_div(payload_bytes, kLLPayloadBytes); }
// The flag value of call `epoch`. A polled copy holds zeros (never written: the window starts
// zeroed) or the line of call epoch - 2 (same copy; epoch +- 1 too in the one-copy negative
// control), so the flag must be nonzero and differ from those calls' flags across the 2^32 wrap:
// the epoch itself, except that call 0 (which follows 0xFFFFFFFF) uses 2^31, far from every
// neighbour. ((e mod (2^32 - 1)) + 1 would give calls 0xFFFFFFFF and 0 the same flag.)
WEAVE_HD uint32_t ll_flag(uint32_t epoch) { return epoch != 0u ? epoch : 0x80000000u; }

// --- flags ---
// Arrival flags live in the RECEIVER's window: [phase][source rank][block] u32 epochs.
WEAVE_HD size_t flag_index(int phase, int src, int block, int world, int max_blocks) {
  return (static_cast<size_t>(phase) * world + src) * max_blocks + block;
}
inline constexpr int kFlagPhases = 2;  // e.g. two-shot: reduce-scatter leg, all-gather leg

// Control words (local only) at the start of an op's control region.
inline constexpr int kCtrlEpoch = 0;      // last completed call epoch
inline constexpr int kCtrlAborted = 1;    // nonzero after a timed-out wait: skip all waits
inline constexpr int kCtrlDoneCount = 2;  // last-CTA election counter (atomicInc wraps to 0)
inline constexpr int kCtrlTrigger = 8;    // ce pull: words 8 .. 8 + world - 2, one per copy stream
// Fused ops: one tile counter per chunk of rows (docs/memory_ordering.md "chunk-election").
// GemmAllGather uses the first kMaxChunks; GemmAllReduce one set per destination rank (its
// reduce-scatter leg, [destination][chunk]) and one more for its all-gather leg.
inline constexpr int kCtrlChunkCounter = 16;
inline constexpr int kMaxChunks = 16;
inline constexpr int kMaxWorldCounters = 8;  // = kMaxWorld (weave/window_handle.hpp)
inline constexpr int kCtrlChunkCounterSets = kMaxWorldCounters + 1;
// GemmAllGather fused-ce (docs/memory_ordering.md "ag-fused-ce"): one trigger word per (copy stream
// s - 1, chunk), [s - 1][chunk], set by the kernel when peer r + s's chunk is readable, reset by the
// copy stream. They reuse the words of GemmAllReduce's counter sets 1.. (GemmAllGather counts only
// set 0; each op has its own control region).
inline constexpr int kCtrlPullTrigger = kCtrlChunkCounter + kMaxChunks;
WEAVE_HD int pull_trigger_word(int step, int chunk) { return kCtrlPullTrigger + (step - 1) * kMaxChunks + chunk; }
// Zero-copy keys (docs/memory_ordering.md "zero-copy-offsets"): words 192 .. 192 + 4 * kMaxWorld - 1,
// one {offset, stride} u64 pair per source rank, WRITTEN BY THAT PEER with its call's handshake.
inline constexpr int kCtrlZeroCopy = 192;
// Fused ops' call keys (docs/memory_ordering.md "call-key"): words 224 .. 224 + 2 * kMaxWorld - 1,
// one u64 {epoch << 32 | m} per source rank, WRITTEN BY THAT PEER before each flag or credit it
// publishes to this rank.
inline constexpr int kCtrlCallKey = kCtrlZeroCopy + 4 * kMaxWorldCounters;
inline constexpr size_t kControlBytes = 1024;
static_assert((kCtrlTrigger + 8) * 4 <= kControlBytes, "the trigger words fit the control region");
static_assert(kCtrlTrigger + 8 <= kCtrlChunkCounter, "chunk counters follow the trigger words");
static_assert((kCtrlChunkCounter + kCtrlChunkCounterSets * kMaxChunks) * 4 <= kControlBytes,
              "the chunk counters fit the control region");
static_assert(kCtrlPullTrigger + (kMaxWorldCounters - 1) * kMaxChunks <= kCtrlChunkCounter + kCtrlChunkCounterSets * kMaxChunks,
              "the pull triggers lie inside the chunk-counter words GemmAllGather does not use");
static_assert(kCtrlChunkCounter + kCtrlChunkCounterSets * kMaxChunks <= kCtrlZeroCopy && kCtrlZeroCopy % 2 == 0 &&
                  (kCtrlZeroCopy + 4 * kMaxWorldCounters) * 4 <= kControlBytes,
              "the zero-copy keys follow the chunk counters, u64-aligned, inside the control region");
static_assert(kCtrlCallKey % 2 == 0 && (kCtrlCallKey + 2 * kMaxWorldCounters) * 4 <= kControlBytes,
              "the call keys follow the zero-copy keys, u64-aligned, inside the control region");

}  // namespace weave::comm
