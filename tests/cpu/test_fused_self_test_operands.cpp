// The fused self-tests' operands (fused/self_test_support.hpp): in every quant their dequantised
// GEMM (ref::dequantize, the GEMM contract's reference) is exactly the closed form the self-tests
// expect, while the scales vary per row and block, so the same data read with all scales 1 is off.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "fused/self_test_support.hpp"

namespace weave {
namespace {

int64_t col_of(int64_t i, int64_t k) { return (i * 37 + 11) % k; }
int b_val(int64_t row, int64_t kk) { return static_cast<int>((row * 131 + kk * 7) % 17) - 8; }

// (A B^T)[i, j] from the dequantised operands (one-hot A: one term per element, checked as a sum).
double product(const std::vector<float>& a, const std::vector<float>& b, int64_t i, int64_t j, int64_t k) {
  double s = 0;
  for (int64_t kk = 0; kk < k; ++kk) s += double(a[i * k + kk]) * double(b[j * k + kk]);
  return s;
}

TEST(FusedSelfTestOperands, DequantisedProductIsTheClosedFormAndTheScalesMatter) {
  const int64_t m = 77, n = 160, k = 512;  // partial B scale blocks in both blockscale and mxfp8
  for (ScaleMode quant : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    SCOPED_TRACE(to_string(quant));
    const fused::SelfTestHostOperands h = fused::make_self_test_host_operands(
        quant, m, n, k, [&](int64_t i) { return col_of(i, k); }, b_val);
    const std::vector<float> a = ref::dequantize(h.a, ref::Operand::kA), b = ref::dequantize(h.b, ref::Operand::kB);
    int64_t wrong = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) wrong += product(a, b, i, j, k) != double(b_val(j, col_of(i, k)));
    EXPECT_EQ(wrong, 0) << "elements whose dequantised product is not the closed form";
    if (quant == ScaleMode::kBF16) continue;
    // The scales vary, and ignoring them breaks the closed form (the negative control).
    std::set<int> exps;
    for (float s : h.a.scales) exps.insert(std::ilogb(s));
    for (float s : h.b.scales) exps.insert(std::ilogb(s));
    for (uint8_t e : h.a.ue8m0) exps.insert(e - 127);
    for (uint8_t e : h.b.ue8m0) exps.insert(e - 127);
    EXPECT_GE(exps.size(), 3u) << "the scale exponents should vary (0..3)";
    ref::QuantMatrix a1 = h.a, b1 = h.b;
    for (float& s : a1.scales) s = 1.0f;
    for (float& s : b1.scales) s = 1.0f;
    for (uint8_t& e : a1.ue8m0) e = 127;
    for (uint8_t& e : b1.ue8m0) e = 127;
    const std::vector<float> a_1 = ref::dequantize(a1, ref::Operand::kA), b_1 = ref::dequantize(b1, ref::Operand::kB);
    int64_t off = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) off += b_val(j, col_of(i, k)) != 0 && product(a_1, b_1, i, j, k) != double(b_val(j, col_of(i, k)));
    EXPECT_GT(off, m * n / 2) << "read with every scale 1, most nonzero elements must be off";
  }
}

}  // namespace
}  // namespace weave
