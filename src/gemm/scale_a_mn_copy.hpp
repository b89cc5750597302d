// Blockscale's A scales from row-major (scale_layout raw: fp32 [M, K/128], K-block contiguous) into
// MN-major order (scale_layout mn-major: column kb holds rows 0..M-1 contiguously), the first step
// of weave::Gemm's route for row-major scales (GemmPlan::scale_a_mn_copy; weave/gemm.hpp says when
// the planner takes it). The second is the MN-major kernel on the copy, whose stage's A scales then
// arrive in one TMA box instead of one 4-byte copy per row. A copy of values: the GEMM's result is
// bitwise the one the row-major kernel gives.
//
// Enqueue only: no allocation, no sync, graph-capturable.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace weave::gemm {

struct ScaleAMnCopy {
  const float* src = nullptr;  // row-major [m, k_blocks], row stride src_ld floats (>= k_blocks)
  int64_t src_ld = 0;
  int64_t m = 0;
  int64_t k_blocks = 0;
  float* dst = nullptr;        // [k_blocks, dst_ld]: element (row, kb) at dst[kb * dst_ld + row]
  int64_t dst_ld = 0;          // ref::mn_major_scale_ld(m): >= m, a multiple of 4 (the TMA pitch)
};

// Bytes of the copy's destination (k_blocks columns of dst_ld floats).
int64_t scale_a_mn_copy_bytes(int64_t m, int64_t k_blocks);

// Enqueues the copy. Rows [m, dst_ld) of each column are not written (no map reads them). The
// caller builds `op` from checked operands (m >= 1, k_blocks >= 1, src_ld >= k_blocks, dst_ld >= m,
// both pointers on the stream's device): nothing is checked here, on the per-call path.
void scale_a_mn_copy(const ScaleAMnCopy& op, cudaStream_t stream);

}  // namespace weave::gemm
