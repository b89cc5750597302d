// Quantised operands back to real values: element x scale of its block.
#include "common/check.hpp"
#include "ref/quant_layout.hpp"

namespace weave::ref {

namespace {

template <typename T>
std::vector<T> dequantize_as(const QuantMatrix& q, Operand operand, const char* what) {
  const detail::ScaleGrid grid = detail::expect_consistent(q, operand, what);
  const auto elems = static_cast<std::size_t>(q.rows * q.cols);
  std::vector<T> out(elems);
  if (q.mode == ScaleMode::kBF16) {
    for (std::size_t i = 0; i < elems; ++i) out[i] = static_cast<T>(bf16_to_float(q.bf16[i]));
    return out;
  }
  const bool mx = q.mode == ScaleMode::kMxfp8;
  for (int64_t r = 0; r < q.rows; ++r) {
    const int64_t scale_row = (r / grid.group_rows) * grid.scale_cols;
    for (int64_t c = 0; c < q.cols; ++c) {
      const auto s = static_cast<std::size_t>(scale_row + c / grid.group_k);
      const T scale = mx ? static_cast<T>(ue8m0_to_float(q.ue8m0[s])) : static_cast<T>(q.scales[s]);
      const auto i = static_cast<std::size_t>(r * q.cols + c);
      out[i] = static_cast<T>(e4m3_to_float(q.e4m3[i])) * scale;
    }
  }
  return out;
}

}  // namespace

std::vector<float> dequantize(const QuantMatrix& q, Operand operand) {
  return dequantize_as<float>(q, operand, "q");
}

namespace detail {
std::vector<double> dequantize_f64(const QuantMatrix& q, Operand operand, const char* what) {
  return dequantize_as<double>(q, operand, what);
}
}  // namespace detail

}  // namespace weave::ref
