// Which rows of a fused op's output its peers may still read after this rank's call ended, and a
// NaN poison that leaves those rows alone: shared by the emulated-world tests (tests/gpu) and the
// multi-GPU tests (tests/multi_gpu), which poison outputs between calls the same way.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/check.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave::test {

// Rows [begin, end) of a call's output that peers may still read after this rank's call ended
// (fused-ce: their copy engines pull them in their own, later calls); empty for every other mode.
struct RowRange {
  int64_t begin = 0, end = 0;
  bool empty() const { return end <= begin; }
};

// GemmAllGather: fused-ce's peers pull this rank's own rows [r m, (r + 1) m).
inline RowRange gemm_all_gather_rows_peers_read(GemmAllGatherMode mode, int64_t m, int rank) {
  return mode == GemmAllGatherMode::kFusedCe ? RowRange{rank * m, (rank + 1) * m} : RowRange{};
}

// GemmAllReduce: fused-ce's peers pull this rank's band of final rows: row blocks
// [r band, (r + 1) band), band = ceil(ceil(m / 128) / world) (fused/all_reduce/schedule.hpp).
inline RowRange gemm_all_reduce_rows_peers_read(GemmAllReduceMode mode, int world, int64_t m, int rank) {
  if (mode != GemmAllReduceMode::kFusedCe) return {};
  const int64_t band_rows = (((m + 127) / 128 + world - 1) / world) * 128;
  return RowRange{std::min(m, rank * band_rows), std::min(m, (rank + 1) * band_rows)};
}

// NaN (0xFF bytes) into a call's output rows [0, rows) of `row_bytes` each, on `st`, except
// `keep` (rows a peer may still read: poisoning them races that peer's copy, not the op). Where
// `keep` is not empty the tests poison AFTER checking the call (only this rank writes the other
// rows then), else before the call.
inline void poison_rows_except(void* out, size_t row_bytes, int64_t rows, RowRange keep, cudaStream_t st) {
  char* o = static_cast<char*>(out);
  const int64_t b = std::min(keep.begin, rows), e = std::min(std::max(keep.end, b), rows);
  if (keep.empty()) {
    WEAVE_CHECK_CUDA(cudaMemsetAsync(o, 0xFF, static_cast<size_t>(rows) * row_bytes, st));
    return;
  }
  if (b > 0) WEAVE_CHECK_CUDA(cudaMemsetAsync(o, 0xFF, static_cast<size_t>(b) * row_bytes, st));
  if (e < rows) WEAVE_CHECK_CUDA(cudaMemsetAsync(o + e * row_bytes, 0xFF, static_cast<size_t>(rows - e) * row_bytes, st));
}

}  // namespace weave::test
