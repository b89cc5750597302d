// Which window regions one collective op needs, and where they are (docs/comm.md, "window
// layout"). CPU-only arithmetic: the CPU tests check sizes, alignment and non-aliasing for every
// op, algorithm and world size, and the kernels receive the resulting offsets by value.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "weave/collectives.hpp"
#include "weave/transport.hpp"
#include "weave/window_layout.hpp"

namespace weave::comm {

inline constexpr uint32_t kStagingSlots = 2;      // rotating staging copies (power of two)
inline constexpr size_t kSlotAlign = 256;         // per-source slot stride alignment (bytes)
inline constexpr size_t kVecBytes = 16;           // 16-byte vector loads/stores
// Auto all-reduce runs one-shot (every rank receives the whole buffer from each of the world - 1
// peers) up to this many bytes, two-shot above; its one-shot staging is sized for that. Measured on
// 2 x H200 (docs/perf/comm.md): one-shot is faster up to 8 MB, two-shot from 16 MB; one-shot's
// traffic per rank grows with world - 1, hence the division. An explicit one-shot op stages its
// whole max_count.
inline constexpr size_t one_shot_auto_max_bytes(int world) {
  return (size_t(8) << 20) / static_cast<size_t>(world > 1 ? world - 1 : 1);
}
// lsa auto: calls whose payload per peer is at most this many bytes use the LL protocol (its
// lines carry 8 payload bytes in 16, so it wins only where latency, not bandwidth, dominates;
// docs/perf/comm.md has the crossover measured). An explicit ll op holds its whole max_count.
inline constexpr size_t kLLAutoMaxBytes = size_t(1) << 20;

struct OpShape {
  CollectiveOp op = CollectiveOp::kAllGather;
  Algorithm algorithm = Algorithm::kAuto;  // resolved for push/pull; kAuto allowed for all-reduce
  int world = 1;
  size_t elem_bytes = 1;   // 1 for all-gather (counts are bytes)
  size_t max_count = 0;
  int max_blocks = 1;
  // lsa low-latency protocol: largest call (in `max_count` units) its LL buffers hold; 0 = none.
  size_t ll_max_count = 0;
  // No ".in" / ".out" regions: every call's buffers lie in the window already (an op hosted in a
  // fused operator's window, whose output region it gathers in place). run() refuses others.
  bool external_buffers = false;
};

// Byte offsets into the op's window, identical on every rank; passed to kernels by value.
struct OpOffsets {
  uint64_t control = 0, credits = 0, flags = 0;
  uint64_t input = 0, input_bytes = 0;    // window_input()
  uint64_t output = 0, output_bytes = 0;  // window_output(); also the landing area of pushes
  uint64_t staging = 0;                   // kStagingSlots copies of slot_bytes
  uint64_t slot_bytes = 0;                // one staging copy
  uint64_t oneshot_stride = 0;            // per-source stride inside a copy: one-shot all-reduce, reduce-scatter
  uint64_t twoshot_stride = 0;            // per-source stride inside a copy: two-shot reduce-scatter leg
  uint32_t slots = kStagingSlots;         // lsa; the ce transport uses slot 0 only (see collective_ce.cpp)
  int max_blocks = 1;
  size_t oneshot_max_count = 0;           // largest count the one-shot staging holds
  uint64_t ll = 0;                        // LL buffers: [kLLSlots][source rank][ll_stride]
  uint64_t ll_stride = 0;                 // bytes of LL lines per source (0: no LL region)
  size_t ll_max_count = 0;                // largest call the LL buffers hold
};

// The LL buffers an op needs (OpShape::ll_max_count): lsa with algorithm ll holds its whole
// max_count; lsa auto holds calls up to kLLAutoMaxBytes per peer; anything else none (0).
size_t ll_max_count_for(Transport transport, Algorithm algorithm, size_t max_count, size_t elem_bytes);

// Which protocol one call of `count` takes, for an op planned with `algorithm` whose regions are
// `off` (run() and `weave plan comm` both ask these): ll for explicit ll ops and for auto calls the
// LL buffers hold; one-shot all-reduce for explicit one-shot and for auto calls its staging holds.
bool call_uses_ll(const OpOffsets& off, Algorithm algorithm, size_t count);
bool call_uses_one_shot(const OpOffsets& off, Algorithm algorithm, size_t count);

// Adds "<prefix>.control", ".credits", ".flags", ".in", ".out", (reductions) ".staging" and (LL)
// ".ll" to
// `layout` and returns their offsets. Throws Error(kInvalidArgument) for an impossible shape.
OpOffsets add_op_regions(WindowLayout& layout, const std::string& prefix, const OpShape& shape);

// Bytes of the regions add_op_regions would add (for `weave plan comm`).
size_t op_window_bytes(const OpShape& shape);

}  // namespace weave::comm
