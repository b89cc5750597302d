#include "comm/op_layout.hpp"

#include <algorithm>

#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "weave/window_handle.hpp"

namespace weave::comm {

size_t ll_max_count_for(Transport transport, Algorithm algorithm, size_t max_count, size_t elem_bytes) {
  if (transport != Transport::kLsa) return 0;
  if (algorithm == Algorithm::kLowLatency) return max_count;
  if (algorithm == Algorithm::kAuto) return std::min(max_count, std::max<size_t>(1, kLLAutoMaxBytes / elem_bytes));
  return 0;
}

bool call_uses_ll(const OpOffsets& off, Algorithm algorithm, size_t count) {
  if (algorithm == Algorithm::kLowLatency) return true;
  return algorithm == Algorithm::kAuto && count <= off.ll_max_count;
}

bool call_uses_one_shot(const OpOffsets& off, Algorithm algorithm, size_t count) {
  if (algorithm == Algorithm::kOneShot) return true;
  if (algorithm == Algorithm::kTwoShot) return false;
  return count <= off.oneshot_max_count;
}

OpOffsets add_op_regions(WindowLayout& layout, const std::string& prefix, const OpShape& s) {
  WEAVE_EXPECT_ARG(s.world >= 1 && s.world <= kMaxWorld,
                   "world size must be in 1.." << kMaxWorld << ", got " << s.world);
  WEAVE_EXPECT_ARG(s.max_count >= 1, "max_count must be >= 1");
  WEAVE_EXPECT_ARG(s.elem_bytes == 1 || s.elem_bytes == 2 || s.elem_bytes == 4,
                   "element size must be 1, 2 or 4 bytes, got " << s.elem_bytes);
  WEAVE_EXPECT_ARG(s.max_blocks >= 1 && s.max_blocks <= 4096, "max_blocks must be in 1..4096, got " << s.max_blocks);
  const size_t w = static_cast<size_t>(s.world);
  const size_t unit_bytes = s.max_count * s.elem_bytes;
  WEAVE_EXPECT_ARG(unit_bytes / s.elem_bytes == s.max_count && unit_bytes <= (size_t(1) << 40),
                   "max_count " << s.max_count << " is too large (over 1 TiB)");
  // NCCL's own algorithms stage nothing in our window (it only holds zero-copy in/out buffers).
  const bool nccl = s.algorithm == Algorithm::kNcclDefault || s.algorithm == Algorithm::kNcclCopyEngine;
  OpOffsets o;
  o.max_blocks = s.max_blocks;
  o.control = layout.add(prefix + ".control", RegionKind::kControl, kControlBytes).offset;
  o.credits = layout.add(prefix + ".credits", RegionKind::kCredits, 4 * w).offset;
  o.flags = layout.add(prefix + ".flags", RegionKind::kFlags,
                       4 * static_cast<size_t>(kFlagPhases) * w * static_cast<size_t>(s.max_blocks)).offset;
  switch (s.op) {
    case CollectiveOp::kAllGather:
      o.input_bytes = unit_bytes;
      o.output_bytes = w * unit_bytes;
      break;
    case CollectiveOp::kReduceScatter: {
      o.input_bytes = w * unit_bytes;
      o.output_bytes = unit_bytes;
      if (!nccl && s.algorithm != Algorithm::kLowLatency) {
        o.oneshot_stride = round_up(unit_bytes, kSlotAlign);
        o.slot_bytes = w * o.oneshot_stride;
        o.oneshot_max_count = s.max_count;
      }
      break;
    }
    case CollectiveOp::kAllReduce: {
      o.input_bytes = unit_bytes;
      o.output_bytes = unit_bytes;
      const size_t granule = kVecBytes / s.elem_bytes;
      const bool one = s.algorithm == Algorithm::kOneShot || s.algorithm == Algorithm::kAuto;
      const bool two = s.algorithm == Algorithm::kTwoShot || s.algorithm == Algorithm::kAuto;
      if (one) {
        o.oneshot_max_count = s.algorithm == Algorithm::kOneShot
                                  ? s.max_count
                                  : std::min(s.max_count, std::max<size_t>(1, one_shot_auto_max_bytes(s.world) / s.elem_bytes));
        o.oneshot_stride = round_up(o.oneshot_max_count * s.elem_bytes, kSlotAlign);
      }
      if (two) o.twoshot_stride = round_up(max_owner_chunk(s.max_count, s.world, granule) * s.elem_bytes, kSlotAlign);
      o.slot_bytes = w * std::max(o.oneshot_stride, o.twoshot_stride);
      break;
    }
  }
  if (s.external_buffers) {
    o.input_bytes = o.output_bytes = 0;
  } else {
    o.input = layout.add(prefix + ".in", RegionKind::kData, o.input_bytes).offset;
    o.output = layout.add(prefix + ".out", RegionKind::kData, o.output_bytes).offset;
  }
  if (o.slot_bytes > 0)
    o.staging = layout.add(prefix + ".staging", RegionKind::kData, o.slots * o.slot_bytes).offset;
  if (s.ll_max_count > 0) {
    // Per source: the payload one peer sends it per call (all-gather: its block; reduce-scatter:
    // the receiver's block; all-reduce: the whole buffer), as 16-byte lines of 8 payload bytes.
    WEAVE_EXPECT_ARG(s.ll_max_count <= s.max_count,
                     "ll_max_count (" << s.ll_max_count << ") must not exceed max_count (" << s.max_count << ")");
    o.ll_max_count = s.ll_max_count;
    o.ll_stride = round_up(ll_lines(s.ll_max_count * s.elem_bytes) * kLLLineBytes, kSlotAlign);
    o.ll = layout.add(prefix + ".ll", RegionKind::kData, kLLSlots * w * o.ll_stride).offset;
  }
  return o;
}

size_t op_window_bytes(const OpShape& shape) {
  WindowLayout layout;
  add_op_regions(layout, "op", shape);
  return layout.total_bytes();
}

}  // namespace weave::comm
