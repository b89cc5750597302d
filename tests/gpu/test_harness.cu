// The measurement harness on a GPU: graphs time, poison marks, and a skipped write is caught.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bench/harness.hpp"
#include "support/gpu.hpp"
#include "testing/poison_nan.hpp"

using namespace weave;

namespace {
__global__ void write_ones(float* out, size_t n, size_t skip) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    if (i != skip) out[i] = 1.0f;
}
}  // namespace

TEST(Harness, NanPoisonCatchesASkippedWrite) {
  WEAVE_REQUIRE_GPUS(1);
  const size_t n = 1 << 20;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * 4), cudaSuccess);
  std::vector<float> h(n);
  for (size_t skip : {size_t(n), size_t(12345)}) {  // first: nothing skipped; then one element
    bench::poison_nan(d, n * 4, DType::kF32, nullptr);
    write_ones<<<256, 256>>>(d, n, skip);
    ASSERT_EQ(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t nonfinite = 0;
    for (float v : h) nonfinite += !std::isfinite(v);
    EXPECT_EQ(nonfinite, skip == n ? 0u : 1u);
  }
  cudaFree(d);
}

TEST(Harness, TimesAlternatingArmsUnderGraphs) {
  WEAVE_REQUIRE_GPUS(1);
  const size_t n = 1 << 24;
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * 4), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  std::vector<bench::Arm> arms = {
      {"small", [&](cudaStream_t st, int) { write_ones<<<64, 256, 0, st>>>(d, n / 16, n); }},
      {"large", [&](cudaStream_t st, int) { write_ones<<<1024, 256, 0, st>>>(d, n, n); }}};
  bench::TimingConfig cfg;
  cfg.samples = 5;
  auto t = bench::time_alternating(arms, cfg, s);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].samples, 5);
  EXPECT_GT(t[0].median_us, 0);
  EXPECT_GT(t[1].median_us, t[0].median_us);  // 16x the bytes takes longer
  EXPECT_LE(t[0].min_us, t[0].median_us);
  EXPECT_GE(t[0].max_us, t[0].median_us);
  cudaStreamDestroy(s);
  cudaFree(d);
}
