// The values Collective::self_test moves and the check of what arrived, as pure host functions
// (CPU-tested with planted faults in tests/cpu/test_comm_self_test_values.cpp).
//
// Every value depends on (source rank, global element index, seed) through a full hash, so a chunk
// that lands at the wrong position, a missing source, a repeated source or an untouched output
// (poison, or this rank's own input) all show as wrong. Values are exact in every dtype, so the
// check is bitwise:
//   all-gather: a hashed byte per (source, index, seed)             -> checked per source
//   fp32 reduce: source s contributes d_s * 8^s, d_s in 1..7 hashed -> the sum's octal digit s must
//                be d_s, and no digit above world - 1 may be set (exact: < 2^24 for world <= 8)
//   bf16 reduce: hashed integers in -3..3 (sums exact in bf16)      -> checked as a sum
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "weave/collectives.hpp"
#include "weave/types.hpp"

namespace weave::comm {

struct SelfTestShape {
  CollectiveOp op = CollectiveOp::kAllReduce;
  DType dtype = DType::kF32;  // kF32 or kBF16 for the reductions; all-gather moves bytes
  int world = 1;
  int rank = 0;
  std::size_t count = 0;      // elements (bytes for all-gather) per rank, as Collective::run takes it
  uint64_t seed = 0;
};

// Elements (bytes for all-gather) of this rank's input and output.
std::size_t self_test_in_elems(const SelfTestShape& s);
std::size_t self_test_out_elems(const SelfTestShape& s);
std::size_t self_test_elem_bytes(const SelfTestShape& s);

// The raw input bytes rank s.rank sends.
std::vector<uint8_t> self_test_input(const SelfTestShape& s);
// The raw output bytes a correct collective leaves on rank s.rank (the host simulation).
std::vector<uint8_t> self_test_expected(const SelfTestShape& s);

struct SelfTestCheck {
  std::vector<int64_t> wrong_from_rank;  // per source rank (a bf16 sum charges every source)
  int64_t first_wrong = -1;              // output element index, -1 if none
  bool ok() const { return first_wrong < 0; }
};
// Checks the raw output bytes `got` of rank s.rank. Throws kInvalidArgument if got has the wrong size.
SelfTestCheck self_test_verify(const SelfTestShape& s, const std::vector<uint8_t>& got);

}  // namespace weave::comm
