// TensorView validation: every broken rule is rejected with the argument named.
#include <gtest/gtest.h>

#include "support/expect_error.hpp"

#include "weave/error.hpp"
#include "weave/tensor.hpp"

using namespace weave;

namespace {
using weave::test::error_of;
alignas(16) char buffer[1 << 16];
}  // namespace

TEST(TensorView, DescribesItself) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 4, 8, 16, 0);
  EXPECT_EQ(v.describe(), "[4, 8] bf16 strides [16, 1] cuda:0");
  EXPECT_EQ(v.numel(), 32);
  EXPECT_EQ(v.span_bytes(), (3 * 16 + 8) * 2);
}

TEST(TensorView, AcceptsAValidOperand) {
  auto v = TensorView::matrix(buffer, DType::kE4M3, 64, 128, 0);
  EXPECT_NO_THROW(expect_matrix(v, "A", {DType::kE4M3, 64, 128, true, true, 0}));
}

TEST(TensorView, RejectsWrongDtypeNamingTheArgument) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 64, 128, 0);
  auto msg = error_of([&] { expect_matrix(v, "A", {DType::kE4M3, 64, 128, true, true, 0}); });
  EXPECT_NE(msg.find("argument 'A'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype must be e4m3"), std::string::npos) << msg;
}

TEST(TensorView, RejectsWrongShape) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 64, 128, 0);
  auto msg = error_of([&] { expect_matrix(v, "B", {DType::kBF16, 64, 256, true, true, 0}); });
  EXPECT_NE(msg.find("shape must be [64, 256] (got [64, 128])"), std::string::npos) << msg;
}

TEST(TensorView, RejectsNonContiguousInnerDimension) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 64, 128, 0);
  v.strides = {1, 64, 0, 0};  // column-major: K not contiguous
  auto msg = error_of([&] { expect_matrix(v, "A", {DType::kBF16, 64, 128, true, false, 0}); });
  EXPECT_NE(msg.find("last dimension must be contiguous"), std::string::npos) << msg;
}

TEST(TensorView, RejectsOverlappingRows) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 64, 128, 100, 0);
  auto msg = error_of([&] { expect_matrix(v, "A", {DType::kBF16, 64, 128, true, false, 0}); });
  EXPECT_NE(msg.find("rows would overlap"), std::string::npos) << msg;
}

TEST(TensorView, RejectsMisalignedBaseForTma) {
  auto v = TensorView::matrix(buffer + 2, DType::kBF16, 64, 128, 0);
  auto msg = error_of([&] { expect_matrix(v, "A", {DType::kBF16, 64, 128, true, true, 0}); });
  EXPECT_NE(msg.find("16-byte aligned"), std::string::npos) << msg;
}

TEST(TensorView, RejectsLeadingDimensionNotMultipleOf16BytesForTma) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 4, 6, 6, 0);  // 12-byte rows
  auto msg = error_of([&] { expect_matrix(v, "C", {DType::kBF16, 4, 6, true, true, 0}); });
  EXPECT_NE(msg.find("multiple of 16"), std::string::npos) << msg;
}

TEST(TensorView, RejectsWrongDevice) {
  auto v = TensorView::matrix(buffer, DType::kBF16, 4, 8, kHostDevice);
  auto msg = error_of([&] { expect_matrix(v, "A", {DType::kBF16, 4, 8, true, false, 1}); });
  EXPECT_NE(msg.find("must live in cuda:1 (got host memory)"), std::string::npos) << msg;
}

TEST(TensorView, RejectsNullData) {
  auto v = TensorView::matrix(nullptr, DType::kBF16, 4, 8, 0);
  auto msg = error_of([&] { expect_matrix(v, "A", {DType::kBF16, 4, 8, true, false, 0}); });
  EXPECT_NE(msg.find("null"), std::string::npos) << msg;
}

TEST(TensorView, VectorRules) {
  alignas(16) static float scales[8];
  auto v = TensorView::vector(scales, DType::kF32, 8, kHostDevice);
  EXPECT_NO_THROW(expect_vector(v, "scale_a", DType::kF32, 8, kHostDevice));
  auto msg = error_of([&] { expect_vector(v, "scale_a", DType::kF32, 9, kHostDevice); });
  EXPECT_NE(msg.find("argument 'scale_a': length must be 9"), std::string::npos) << msg;
}

TEST(Error, CarriesStatusCallLocationAndMessage) {
  Error e(Status::kTimeout, "wait_flag", "x.cu:1", "rank 0 waited for peer 1");
  EXPECT_EQ(e.status(), Status::kTimeout);
  EXPECT_STREQ(e.what(), "weave: timeout: rank 0 waited for peer 1 [in wait_flag] (x.cu:1)");
}

TEST(Types, ParseAndPrintRoundTrip) {
  for (auto d : {DType::kBF16, DType::kF32, DType::kE4M3, DType::kUE8M0})
    EXPECT_EQ(parse_dtype(to_string(d)), d);
  for (auto m : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
    EXPECT_EQ(parse_scale_mode(to_string(m)), m);
  EXPECT_FALSE(parse_scale_mode("fp4").has_value());
  EXPECT_EQ(scale_granularity(ScaleMode::kBlockscale).b_rows, 128);
  EXPECT_EQ(scale_granularity(ScaleMode::kMxfp8).a_k, 32);
}
