// weave::quantize_rows refuses bad input naming the argument and the rule, before any GPU work
// (these views point at host memory labelled cuda:0: nothing is launched when a check fails).
#include <gtest/gtest.h>

#include "support/expect_error.hpp"

#include "weave/quantize.hpp"

using namespace weave;

namespace {
using weave::test::error_of;
alignas(16) char x_mem[1 << 16], q_mem[1 << 16], s_mem[1 << 12];

struct Views {
  TensorView x = TensorView::matrix(x_mem, DType::kBF16, 4, 256, 0);
  TensorView q = TensorView::matrix(q_mem, DType::kE4M3, 4, 256, 0);
  TensorView s = TensorView::vector(s_mem, DType::kF32, 4, 0);
};

std::string refusal(ScaleMode mode, const Views& v) {
  return error_of([&] { quantize_rows(mode, v.x, v.q, v.s, nullptr); });
}
}  // namespace

TEST(QuantizeRowsArgs, EachBrokenRuleIsRefusedNamingItsArgument) {
  Views v;
  EXPECT_NE(refusal(ScaleMode::kBF16, v).find("argument 'mode': must be ptpc, blockscale or mxfp8"), std::string::npos);
  Views host;
  host.x.device = kHostDevice;
  EXPECT_NE(refusal(ScaleMode::kPtpc, host).find("argument 'x': must live on a GPU"), std::string::npos);
  Views odd_k;
  odd_k.x = TensorView::matrix(x_mem, DType::kBF16, 4, 200, 0);
  EXPECT_NE(refusal(ScaleMode::kPtpc, odd_k).find("argument 'x': its columns K must be a positive multiple of 16"),
            std::string::npos);
  Views not_128;
  not_128.x = TensorView::matrix(x_mem, DType::kBF16, 4, 160, 0);
  EXPECT_NE(refusal(ScaleMode::kBlockscale, not_128).find("of the mode's K group 128 (got 160)"), std::string::npos);
  Views wrong_x;
  wrong_x.x.dtype = DType::kF32;
  EXPECT_NE(refusal(ScaleMode::kPtpc, wrong_x).find("argument 'x': dtype must be bf16"), std::string::npos);
  Views misaligned;
  misaligned.x = TensorView::matrix(x_mem + 2, DType::kBF16, 4, 256, 0);
  EXPECT_NE(refusal(ScaleMode::kPtpc, misaligned).find("argument 'x': base address must be 16-byte aligned"),
            std::string::npos);
  Views short_q;
  short_q.q = TensorView::matrix(q_mem, DType::kE4M3, 3, 256, 0);
  EXPECT_NE(refusal(ScaleMode::kPtpc, short_q).find("argument 'q'"), std::string::npos);
  Views q_elsewhere;
  q_elsewhere.q.device = 1;
  EXPECT_NE(refusal(ScaleMode::kPtpc, q_elsewhere).find("argument 'q': must live in cuda:0"), std::string::npos);
  Views short_scales;
  short_scales.s = TensorView::vector(s_mem, DType::kF32, 3, 0);
  EXPECT_NE(refusal(ScaleMode::kPtpc, short_scales).find("argument 'scales': length must be 4"), std::string::npos);
  Views block;  // blockscale wants fp32 [M, K/128]
  EXPECT_NE(refusal(ScaleMode::kBlockscale, block).find("argument 'scales': must be a 2-D"), std::string::npos);
  block.s = TensorView::matrix(s_mem, DType::kF32, 4, 2, 0);
  Views mx = block;  // mxfp8 wants ue8m0 [M, K/32]
  EXPECT_NE(refusal(ScaleMode::kMxfp8, mx).find("argument 'scales': dtype must be ue8m0"), std::string::npos);
}

TEST(QuantizeRowsArgs, TheKGroupOfEachMode) {
  EXPECT_EQ(quantize_group(ScaleMode::kPtpc, 4096), 4096);
  EXPECT_EQ(quantize_group(ScaleMode::kBlockscale, 4096), 128);
  EXPECT_EQ(quantize_group(ScaleMode::kMxfp8, 4096), 32);
  EXPECT_NE(error_of([] { quantize_group(ScaleMode::kBF16, 4096); }).find("need no quantisation"), std::string::npos);
}
