// fp32 -> quantised operands for every scale mode (see weave/quant.hpp for the contract).
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/check.hpp"
#include "ref/quant_layout.hpp"

namespace weave::ref {

namespace {

struct BlockStats {
  float amax = 0;         // max |x| over every element (Inf if any is infinite)
  float finite_amax = 0;  // max |x| over the finite elements
  bool has_nan = false;
};

BlockStats block_stats(const float* x, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  BlockStats s;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = c0; c < c1; ++c) {
      const float v = std::fabs(x[r * cols + c]);
      if (std::isnan(v)) {
        s.has_nan = true;
        continue;
      }
      s.amax = std::max(s.amax, v);
      if (std::isfinite(v)) s.finite_amax = std::max(s.finite_amax, v);
    }
  }
  return s;
}

// ptpc and blockscale: amax / 448 in fp32. A block whose scale would be zero (all zeros, or so
// tiny that amax / 448 underflows) gets 1, so its elements quantise to (almost) zero and no
// division by zero happens. NaN in the block makes the scale NaN, Inf makes it Inf: either way the
// whole block dequantises to NaN, which is what a reference should say about such input.
float fp32_scale(const BlockStats& s) {
  if (s.has_nan) return std::numeric_limits<float>::quiet_NaN();
  const float scale = s.amax / kE4M3Max;
  return scale == 0.0f ? 1.0f : scale;
}

}  // namespace

QuantMatrix quantize(const float* x, int64_t rows, int64_t cols, ScaleMode mode, Operand operand) {
  WEAVE_EXPECT_ARG(rows >= 1, "argument 'rows': must be >= 1, got " << rows);
  WEAVE_EXPECT_ARG(cols >= 1, "argument 'cols': must be >= 1, got " << cols);
  WEAVE_EXPECT_ARG(x != nullptr, "argument 'x': must not be null");
  const detail::ScaleGrid grid = detail::scale_grid(mode, operand, rows, cols);

  QuantMatrix q;
  q.rows = rows;
  q.cols = cols;
  q.mode = mode;
  q.scale_rows = grid.scale_rows;
  q.scale_cols = grid.scale_cols;
  const auto elems = static_cast<std::size_t>(rows * cols);
  if (mode == ScaleMode::kBF16) {
    q.bf16.resize(elems);
    for (std::size_t i = 0; i < elems; ++i) q.bf16[i] = float_to_bf16(x[i]);
    return q;
  }

  q.e4m3.resize(elems);
  const auto num_scales = static_cast<std::size_t>(grid.scale_rows * grid.scale_cols);
  if (mode == ScaleMode::kMxfp8) q.ue8m0.resize(num_scales);
  else q.scales.resize(num_scales);

  for (int64_t br = 0; br < grid.scale_rows; ++br) {
    const int64_t r0 = br * grid.group_rows;
    const int64_t r1 = std::min(r0 + grid.group_rows, rows);  // the last row block may be partial
    for (int64_t bk = 0; bk < grid.scale_cols; ++bk) {
      const int64_t c0 = bk * grid.group_k;
      const int64_t c1 = c0 + grid.group_k;
      const BlockStats stats = block_stats(x, cols, r0, r1, c0, c1);
      const std::size_t scale_idx = static_cast<std::size_t>(br * grid.scale_cols + bk);
      if (mode == ScaleMode::kMxfp8) {
        // The byte says NaN for a block holding NaN or Inf; its elements are still stored,
        // scaled by the exponent of the finite ones, so the bytes stay readable.
        const uint8_t byte = (stats.has_nan || !std::isfinite(stats.amax)) ? 0xFF
                                                                           : mx_scale_byte(stats.amax);
        q.ue8m0[scale_idx] = byte;
        const int shared_exp = static_cast<int>(mx_scale_byte(stats.finite_amax)) - 127;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c)
            // ldexp by a power of two is exact (a result below 2^-126 could round in fp32, but
            // it is far below e4m3's 2^-10 rounding threshold, so the e4m3 code is unaffected).
            q.e4m3[r * cols + c] = float_to_e4m3(std::ldexp(x[r * cols + c], -shared_exp));
      } else {
        const float scale = fp32_scale(stats);
        q.scales[scale_idx] = scale;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t c = c0; c < c1; ++c) q.e4m3[r * cols + c] = float_to_e4m3(x[r * cols + c] / scale);
      }
    }
  }
  return q;
}

}  // namespace weave::ref
