// Diagnostic (issue 38): how fast does HBM deliver a weight matrix read in row chunks, as a GEMV
// reads it? Reports, never fails on speed; fails when a pattern did not read every byte once.
//
// The decode GEMV's warps own 16 rows each and read them in steps of 64 bytes per row (4 lanes x
// 16 bytes: the MMA fragment's layout), 2 CTAs of 8 warps per SM, the K range split over CTAs.
// It reaches 70-80% of HBM in steady state where a contiguous read of the same bytes reaches 99%.
// This test reads [N rows, K bytes] with the GEMV's work split but no arithmetic, varying only:
//   chunk   contiguous bytes of one row per warp instruction (64 = the GEMV; 512 = a whole warp
//           on one row), the rest of the 512 bytes going to the next rows of the warp's 16;
//   depth   16-byte loads in flight per lane (8 = the GEMV's registers path in bf16);
//   hint    ld.global.nc with or without the L2::256B prefetch hint (the GEMV uses it);
//   share   warps of a CTA owning the same 16 rows and interleaving K chunk by chunk (1 = the
//           GEMV): with 8, a CTA's warps request 8 chunks of each row at about the same time;
// beside the plain contiguous read (bench::launch_stream_read) and the HBM ceiling (1 GiB).
// Each pattern xors every 32-bit word it read into a sink; the sum over the grid must equal the
// xor of the matrix (computed on the host), so a pattern that skips or repeats data fails.
//
// Run: ./weave_tests_gpu --gtest_filter='ReadPatterns*'   (a few seconds)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "bench/stream_read.hpp"
#include "common/check.hpp"
#include "hopper/ptx/sync_mma_ld.cuh"
#include "support/gpu.hpp"
#include "testing/gemm_operands.hpp"

using namespace weave;

namespace {

constexpr int kRowsPerWarp = 16, kWarps = 8;

// grid (split, n_rows / rows per CTA); CTA (r, band) reads its rows x bytes [r k_slice, +k_slice).
// Warps w and w' with w / kShare == w' / kShare own the same 16 rows and interleave K: warp
// instruction i covers K step (i / groups) kShare + w % kShare (kChunk bytes per row) of row group
// i % groups. kShare = 1 is the GEMV (each warp its own 16 rows, the CTA 128).
template <int kChunk, int kDepth, bool kHint, int kShare>
__global__ void __launch_bounds__(kWarps * 32, 2)
    row_chunk_read_kernel(const uint8_t* __restrict__ b, int64_t k_bytes, int64_t k_slice, uint32_t* sink) {
  constexpr int kLanesPerRow = kChunk / 16, kRowsPerInstr = 32 / kLanesPerRow;
  constexpr int kGroups = kRowsPerWarp / kRowsPerInstr;
  constexpr int kCtaRows = kRowsPerWarp * kWarps / kShare;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = int64_t(blockIdx.y) * kCtaRows + (warp / kShare) * kRowsPerWarp + lane / kLanesPerRow;
  const int64_t k0 = blockIdx.x * k_slice + (warp % kShare) * kChunk + 16 * (lane % kLanesPerRow);
  const int total = static_cast<int>(k_slice / (kChunk * kShare)) * kGroups;
  auto address = [&](int i) {
    return b + (row0 + (i % kGroups) * kRowsPerInstr) * k_bytes + k0 + int64_t(i / kGroups) * kChunk * kShare;
  };
  auto load = [&](int i) {
    if (i >= total) return make_uint4(0, 0, 0, 0);
    if constexpr (kHint) return weave::detail::gemv::ptx::ld_global_nc_na_l2_256b_v4_pred(address(i), true);
    else return __ldg(reinterpret_cast<const uint4*>(address(i)));
  };
  uint4 buf[kDepth];
#pragma unroll
  for (int u = 0; u < kDepth; ++u) buf[u] = load(u);
  uint32_t x = 0;
  for (int i0 = 0; i0 < total; i0 += kDepth) {
#pragma unroll
    for (int u = 0; u < kDepth; ++u) {
      x ^= buf[u].x ^ buf[u].y ^ buf[u].z ^ buf[u].w;
      buf[u] = load(i0 + u + kDepth);
    }
  }
  for (int o = 16; o > 0; o /= 2) x ^= __shfl_xor_sync(0xFFFFFFFFu, x, o);
  if (lane == 0) atomicXor(sink, x);
}

struct Pattern {
  std::string name;
  void (*kernel)(const uint8_t*, int64_t, int64_t, uint32_t*);
  int cta_rows;
};

template <int kChunk, int kDepth, bool kHint, int kShare = 1>
Pattern pattern() {
  return {"chunk " + std::to_string(kChunk) + " depth " + std::to_string(kDepth) + (kHint ? " L2::256B" : " no hint") +
              (kShare > 1 ? " share " + std::to_string(kShare) : ""),
          row_chunk_read_kernel<kChunk, kDepth, kHint, kShare>, kRowsPerWarp * kWarps / kShare};
}

}  // namespace

TEST(ReadPatterns, RowChunksVersusContiguousRead) {
  WEAVE_REQUIRE_GPUS(1);
  int device = 0, num_sms = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  cudaStream_t stream;
  WEAVE_CHECK_CUDA(cudaStreamCreate(&stream));
  const double hbm_gbps = bench::measure_hbm_read_gbps(num_sms, stream);
  std::printf("HBM read ceiling: 1 GiB read at %.0f GB/s\n", hbm_gbps);

  const std::vector<Pattern> patterns = {
      pattern<64, 8, true>(),   pattern<64, 8, false>(),  pattern<64, 16, true>(),  pattern<128, 8, true>(),
      pattern<256, 8, true>(),  pattern<512, 8, true>(),  pattern<512, 8, false>(),
      pattern<256, 16, true>(), pattern<128, 16, true>(), pattern<64, 8, true, 2>(),   pattern<64, 8, true, 4>(),
      pattern<64, 8, true, 8>(),  pattern<128, 8, true, 4>()};
  struct Shape {
    int64_t n, k_bytes;
    int split;
  };
  // llama3-70b down_proj at tp 2 in bf16 (235 MB: no copies needed), and a 29 MB layer read from
  // rotating copies (8 x 29 MB, far past the 50 MB L2).
  const Shape shapes[] = {{8192, 28672, 4}, {7168, 4096, 4}, {7168, 4096, 2}};
  bench::DeviceBuffer sink(4 * patterns.size());
  for (const Shape& shape : shapes) {
    const size_t bytes = size_t(shape.n) * shape.k_bytes;
    const int copies = bytes >= (size_t(200) << 20) ? 1 : 8;
    std::vector<uint32_t> host(bytes / 4);
    std::mt19937 rng(7 + shape.n);
    for (uint32_t& w : host) w = rng();
    uint32_t expect = 0;
    for (uint32_t w : host) expect ^= w;
    bench::DeviceBuffer mat(bytes * copies);
    for (int c = 0; c < copies; ++c)
      WEAVE_CHECK_CUDA(cudaMemcpy(static_cast<uint8_t*>(mat.get()) + c * bytes, host.data(), bytes, cudaMemcpyHostToDevice));
    auto copy = [&](int call) { return static_cast<const uint8_t*>(mat.get()) + (call % copies) * bytes; };

    std::vector<bench::Arm> arms;
    arms.push_back({"contiguous read", [&](cudaStream_t s, int call) {
                      bench::launch_stream_read(copy(call), bytes, sink.as<uint32_t>(), num_sms, s);
                    }});
    auto grid = [&](size_t p) { return dim3(shape.split, static_cast<unsigned>(shape.n / patterns[p].cta_rows)); };
    const int64_t k_slice = shape.k_bytes / shape.split;
    for (size_t p = 0; p < patterns.size(); ++p)
      arms.push_back({patterns[p].name, [&, p](cudaStream_t s, int call) {
                        patterns[p].kernel<<<grid(p), kWarps * 32, 0, s>>>(copy(call), shape.k_bytes, k_slice,
                                                                          sink.as<uint32_t>() + p);
                      }});
    bench::TimingConfig cfg;
    cfg.calls_per_graph = 20;
    cfg.samples = 11;
    const std::vector<bench::Timing> t = bench::time_alternating(arms, cfg, stream);

    // Correctness: one more call of each pattern from a zeroed sink must give the matrix's xor.
    WEAVE_CHECK_CUDA(cudaMemsetAsync(sink.get(), 0, sink.bytes(), stream));
    for (size_t p = 0; p < patterns.size(); ++p)
      patterns[p].kernel<<<grid(p), kWarps * 32, 0, stream>>>(copy(0), shape.k_bytes, k_slice, sink.as<uint32_t>() + p);
    WEAVE_CHECK_CUDA(cudaGetLastError());
    std::vector<uint32_t> got(patterns.size());
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(got.data(), sink.get(), 4 * got.size(), cudaMemcpyDeviceToHost, stream));
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));

    std::printf("\n%lld rows x %lld bytes (%.0f MB, %d cop%s), K split %d, %u CTAs of 128 rows:\n", (long long)shape.n,
                (long long)shape.k_bytes, bytes / 1e6, copies, copies == 1 ? "y" : "ies", shape.split, grid(0).x * grid(0).y);
    for (size_t a = 0; a < arms.size(); ++a) {
      const double gbps = bytes / (t[a].median_us * 1e3);
      std::printf("  %-28s %8.1f us %6.0f GB/s %5.1f%% HBM\n", arms[a].name.c_str(), t[a].median_us, gbps,
                  100.0 * gbps / hbm_gbps);
    }
    for (size_t p = 0; p < patterns.size(); ++p)
      EXPECT_EQ(got[p], expect) << patterns[p].name << " did not read every word of the matrix exactly once";
  }
  WEAVE_CHECK_CUDA(cudaStreamDestroy(stream));
}
