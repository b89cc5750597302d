// Blockscale A scales: row-major [rows, k_blocks] -> M-contiguous [k_blocks, ld] (ScaleLayout::
// kMnMajor, the layout whose K-block columns the GEMM loads with one TMA box each).
#include "common/check.hpp"
#include "weave/quant.hpp"

namespace weave::ref {

int64_t mn_major_scale_ld(int64_t rows) { return (rows + 3) / 4 * 4; }

std::vector<float> mn_major_block_scales(const float* row_major, int64_t rows, int64_t k_blocks) {
  WEAVE_EXPECT_ARG(rows >= 1, "argument 'rows': must be >= 1, got " << rows);
  WEAVE_EXPECT_ARG(k_blocks >= 1, "argument 'k_blocks': must be >= 1, got " << k_blocks);
  WEAVE_EXPECT_ARG(row_major != nullptr, "argument 'row_major': must not be null");
  const int64_t ld = mn_major_scale_ld(rows);
  // Padding rows hold 0: never read by the GEMM (its TMA box stops at M), but defined bytes.
  std::vector<float> out(static_cast<std::size_t>(k_blocks * ld), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t kb = 0; kb < k_blocks; ++kb) out[kb * ld + r] = row_major[r * k_blocks + kb];
  return out;
}

}  // namespace weave::ref
