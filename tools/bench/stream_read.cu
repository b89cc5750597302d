#include "bench/stream_read.hpp"

#include <cuda_runtime.h>

#include <algorithm>

#include "bench/harness.hpp"
#include "common/check.hpp"

namespace weave::bench {
namespace {

__global__ void stream_read_kernel(const uint4* __restrict__ p, size_t n16, uint32_t* sink) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  uint32_t x = 0;
  size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    const uint4 a = __ldg(p + i), b = __ldg(p + i + stride), c = __ldg(p + i + 2 * stride),
                d = __ldg(p + i + 3 * stride);
    x ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n16; i += stride) {
    const uint4 a = __ldg(p + i);
    x ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  if (x == 0x9E3779B9u) *sink = x;
}

}  // namespace

void launch_stream_read(const void* p, std::size_t bytes, std::uint32_t* sink, int num_sms, cudaStream_t stream) {
  const size_t n16 = bytes / 16;
  const size_t want = (n16 + 4 * 256 - 1) / (4 * 256);
  const int blocks = static_cast<int>(std::max<size_t>(1, std::min<size_t>(want, size_t(num_sms) * 8)));
  stream_read_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4*>(p), n16, sink);
  WEAVE_CHECK_LAUNCH();
}

double measure_hbm_read_gbps(int num_sms, cudaStream_t stream) {
  const size_t bytes = size_t(1) << 30;
  struct Buffer {  // freed on every path out (time_alternating throws weave::Error)
    void* p = nullptr;
    ~Buffer() { cudaFree(p); }
  } big, sink;
  WEAVE_CHECK_CUDA(cudaMalloc(&big.p, bytes));
  WEAVE_CHECK_CUDA(cudaMalloc(&sink.p, 64));
  WEAVE_CHECK_CUDA(cudaMemsetAsync(big.p, 1, bytes, stream));
  TimingConfig cfg;
  cfg.calls_per_graph = 4;
  cfg.samples = 9;
  const auto t = time_alternating(
      {{"read 1 GiB",
        [&](cudaStream_t s, int) { launch_stream_read(big.p, bytes, static_cast<uint32_t*>(sink.p), num_sms, s); }}},
      cfg, stream);
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  return bytes / (t[0].median_us * 1e3);
}

}  // namespace weave::bench
