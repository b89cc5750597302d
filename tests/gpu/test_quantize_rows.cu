// weave::quantize_rows against weave::ref::quantize (the reference the fp8 GEMM tests quantise
// with): every e4m3 code, fp32 scale and ue8m0 byte bit for bit (NaN codes as NaN), in every mode,
// over rows of random magnitude and crafted rows (zero, NaN, Inf, bf16 subnormals), with strided
// x and q; q and the scales poisoned with two patterns in turn, so an unwritten byte shows, and the
// padding past K in q's rows must keep its poison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/check.hpp"
#include "support/gpu.hpp"
#include "weave/quant.hpp"
#include "weave/quantize.hpp"

using namespace weave;

namespace {

struct DeviceBytes {
  void* p = nullptr;
  explicit DeviceBytes(size_t n) { WEAVE_CHECK_CUDA(cudaMalloc(&p, n)); }
  ~DeviceBytes() { cudaFree(p); }
};

bool is_nan_code(uint8_t v) { return (v & 0x7F) == 0x7F; }

// bf16-representable values: rows of N(0,1) times 2^e, e in [-40, 40], and crafted rows 0-3
// (zero, a NaN, an Inf, bf16 subnormals) when there are enough rows.
std::vector<float> inputs(int64_t m, int64_t k, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> expo(-40, 40);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    const float row_scale = std::ldexp(1.0f, expo(rng));
    for (int64_t c = 0; c < k; ++c) x[r * k + c] = ref::bf16_to_float(ref::float_to_bf16(normal(rng) * row_scale));
  }
  if (m >= 4) {
    for (int64_t c = 0; c < k; ++c) {
      x[c] = 0.0f;
      x[3 * k + c] = ref::bf16_to_float(static_cast<uint16_t>((c * 7) % 127 + 1));  // bf16 subnormals
    }
    x[k + k / 2] = std::numeric_limits<float>::quiet_NaN();
    x[2 * k + 5] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

struct Case {
  int64_t m, k, ldx, ldq;
};

// Mismatches of the GPU's codes against the reference's (NaN codes equal to NaN codes).
int64_t code_mismatches(const std::vector<uint8_t>& got, int64_t ldq, const ref::QuantMatrix& want) {
  int64_t bad = 0;
  for (int64_t r = 0; r < want.rows; ++r)
    for (int64_t c = 0; c < want.cols; ++c) {
      const uint8_t g = got[r * ldq + c], w = want.e4m3[r * want.cols + c];
      bad += !(g == w || (is_nan_code(g) && is_nan_code(w)));
    }
  return bad;
}

void check_case(ScaleMode mode, const Case& cs, std::mt19937& rng) {
  const int64_t group = quantize_group(mode, cs.k), groups = cs.k / group;
  const std::vector<float> x = inputs(cs.m, cs.k, rng);
  const ref::QuantMatrix want = ref::quantize(x.data(), cs.m, cs.k, mode, ref::Operand::kA);
  std::vector<uint16_t> xb(static_cast<size_t>(cs.m * cs.ldx), 0);
  for (int64_t r = 0; r < cs.m; ++r)
    for (int64_t c = 0; c < cs.k; ++c) xb[r * cs.ldx + c] = ref::float_to_bf16(x[r * cs.k + c]);
  const size_t scale_bytes = static_cast<size_t>(cs.m * groups) * (mode == ScaleMode::kMxfp8 ? 1 : 4);
  DeviceBytes dx(xb.size() * 2), dq(static_cast<size_t>(cs.m * cs.ldq)), ds(scale_bytes);
  WEAVE_CHECK_CUDA(cudaMemcpy(dx.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  const TensorView xv = TensorView::matrix(dx.p, DType::kBF16, cs.m, cs.k, cs.ldx, 0);
  const TensorView qv = TensorView::matrix(dq.p, DType::kE4M3, cs.m, cs.k, cs.ldq, 0);
  const TensorView sv = mode == ScaleMode::kPtpc ? TensorView::vector(ds.p, DType::kF32, cs.m, 0)
                        : TensorView::matrix(ds.p, mode == ScaleMode::kMxfp8 ? DType::kUE8M0 : DType::kF32,
                                             cs.m, groups, 0);
  const std::string what = std::string(to_string(mode)) + " " + std::to_string(cs.m) + "x" + std::to_string(cs.k) +
                           " ldx " + std::to_string(cs.ldx) + " ldq " + std::to_string(cs.ldq);
  for (const int poison : {0x5A, 0xA5}) {
    WEAVE_CHECK_CUDA(cudaMemset(dq.p, poison, static_cast<size_t>(cs.m * cs.ldq)));
    WEAVE_CHECK_CUDA(cudaMemset(ds.p, poison, scale_bytes));
    quantize_rows(mode, xv, qv, sv, nullptr);
    WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<uint8_t> q(static_cast<size_t>(cs.m * cs.ldq)), s(scale_bytes);
    WEAVE_CHECK_CUDA(cudaMemcpy(q.data(), dq.p, q.size(), cudaMemcpyDeviceToHost));
    WEAVE_CHECK_CUDA(cudaMemcpy(s.data(), ds.p, s.size(), cudaMemcpyDeviceToHost));
    EXPECT_EQ(code_mismatches(q, cs.ldq, want), 0) << what << ", poison " << poison;
    int64_t padding_written = 0;
    for (int64_t r = 0; r < cs.m; ++r)
      for (int64_t c = cs.k; c < cs.ldq; ++c) padding_written += q[r * cs.ldq + c] != poison;
    EXPECT_EQ(padding_written, 0) << what << ": bytes past K in q's rows were written";
    int64_t scale_bad = 0;
    for (int64_t i = 0; i < cs.m * groups; ++i) {
      if (mode == ScaleMode::kMxfp8) {
        scale_bad += s[i] != want.ue8m0[i];
      } else {
        float g;
        std::memcpy(&g, &s[4 * i], 4);
        const float w = want.scales[i];
        scale_bad += !(std::memcmp(&g, &w, 4) == 0 || (std::isnan(g) && std::isnan(w)));
      }
    }
    EXPECT_EQ(scale_bad, 0) << what << ", poison " << poison << ": scales differ from the reference";
    if (poison == 0x5A) {  // the comparison can fail: one flipped code is one mismatch
      q[0] ^= 0x01;
      EXPECT_EQ(code_mismatches(q, cs.ldq, want), 1) << what;
    }
  }
}

}  // namespace

TEST(QuantizeRows, EqualsTheReferenceBitForBitInEveryMode) {
  WEAVE_REQUIRE_GPUS(1);
  std::mt19937 rng(20261207);
  const Case cases[] = {{1, 4096, 4096, 4096}, {7, 14336, 14336 + 64, 14336 + 16}, {33, 384, 512, 400},
                        {300, 1024, 1024, 1024}, {5, 7168, 7168, 7168}};
  for (const ScaleMode mode : {ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
    for (const Case& cs : cases) check_case(mode, cs, rng);
  for (const ScaleMode mode : {ScaleMode::kPtpc, ScaleMode::kMxfp8})  // K a multiple of 32, not of 128
    check_case(mode, Case{6, 160, 160, 160}, rng);
}
