// Scale grids per mode and operand, and the shape check every consumer of a QuantMatrix runs.
#include "ref/quant_layout.hpp"

#include "common/check.hpp"

namespace weave::ref::detail {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
const char* operand_name(Operand operand) { return operand == Operand::kA ? "A" : "B"; }
}  // namespace

ScaleGrid scale_grid(ScaleMode mode, Operand operand, int64_t rows, int64_t cols) {
  WEAVE_EXPECT_ARG(operand == Operand::kA || operand == Operand::kB,
                   "argument 'operand': must be Operand::kA or Operand::kB, got "
                       << static_cast<int>(operand));
  WEAVE_EXPECT_ARG(mode == ScaleMode::kBF16 || mode == ScaleMode::kPtpc ||
                       mode == ScaleMode::kBlockscale || mode == ScaleMode::kMxfp8,
                   "argument 'mode': unknown scale mode " << static_cast<int>(mode));
  if (mode == ScaleMode::kBF16) return {};
  const ScaleGranularity g = scale_granularity(mode);
  const int64_t group_rows = operand == Operand::kA ? g.a_rows : g.b_rows;
  const int64_t group_k_rule = operand == Operand::kA ? g.a_k : g.b_k;
  // A K group must never straddle the end of a row: the kernels step K in whole groups.
  WEAVE_EXPECT_ARG(group_k_rule == 0 || cols % group_k_rule == 0,
                   "argument 'cols' (K = " << cols << "): must be a multiple of " << group_k_rule
                                           << ", the K group of " << to_string(mode)
                                           << " scales (operand " << operand_name(operand) << ")");
  const int64_t group_k = group_k_rule == 0 ? cols : group_k_rule;
  return {.group_rows = group_rows,
          .group_k = group_k,
          .scale_rows = ceil_div(rows, group_rows),  // a partial last row block keeps its scale
          .scale_cols = cols / group_k};
}

ScaleGrid expect_consistent(const QuantMatrix& q, Operand operand, const char* what) {
  WEAVE_EXPECT_ARG(q.rows >= 1 && q.cols >= 1, "argument '" << what << "': shape must be >= [1, 1], got ["
                                                            << q.rows << ", " << q.cols << "]");
  const ScaleGrid grid = scale_grid(q.mode, operand, q.rows, q.cols);
  const auto elems = static_cast<std::size_t>(q.rows * q.cols);
  const auto num_scales = static_cast<std::size_t>(grid.scale_rows * grid.scale_cols);
  const bool fp8 = q.mode != ScaleMode::kBF16;
  WEAVE_EXPECT_ARG(q.e4m3.size() == (fp8 ? elems : 0),
                   "argument '" << what << "': e4m3 holds " << q.e4m3.size() << " bytes, "
                                << to_string(q.mode) << " [" << q.rows << ", " << q.cols
                                << "] needs " << (fp8 ? elems : 0));
  WEAVE_EXPECT_ARG(q.bf16.size() == (fp8 ? 0 : elems),
                   "argument '" << what << "': bf16 holds " << q.bf16.size() << " values, "
                                << to_string(q.mode) << " [" << q.rows << ", " << q.cols
                                << "] needs " << (fp8 ? 0 : elems));
  const bool mx = q.mode == ScaleMode::kMxfp8;
  WEAVE_EXPECT_ARG(q.scales.size() == (fp8 && !mx ? num_scales : 0),
                   "argument '" << what << "': scales holds " << q.scales.size() << " floats, "
                                << to_string(q.mode) << " needs " << (fp8 && !mx ? num_scales : 0));
  WEAVE_EXPECT_ARG(q.ue8m0.size() == (mx ? num_scales : 0),
                   "argument '" << what << "': ue8m0 holds " << q.ue8m0.size() << " bytes, "
                                << to_string(q.mode) << " needs " << (mx ? num_scales : 0));
  WEAVE_EXPECT_ARG(q.scale_rows == grid.scale_rows && q.scale_cols == grid.scale_cols,
                   "argument '" << what << "': scale shape must be [" << grid.scale_rows << ", "
                                << grid.scale_cols << "] for " << to_string(q.mode) << " operand "
                                << operand_name(operand) << ", got [" << q.scale_rows << ", "
                                << q.scale_cols << "]");
  return grid;
}

}  // namespace weave::ref::detail
