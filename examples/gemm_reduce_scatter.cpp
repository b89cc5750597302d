// The row-parallel linear layer of sequence parallelism, GEMM + reduce-scatter in one operator,
// over every visible Hopper GPU from ONE process, one host thread per GPU.
//
//   comms = Communicator::create_local(devices)   one ncclCommInitAll for all ranks
//   GemmReduceScatter op(comm, config)             collective: every rank constructs it, in the same order
//   op.run(m, a, b, scales, stream)                enqueues only; rank r receives rows [r m/W, (r+1) m/W)
//
// Rank r holds A_r = all ones [m, K] and B_r = r + 1 everywhere [N, K], so every element of every
// rank's rows must be K (1 + 2 + ... + W): exact in bf16 for K = 256 and W <= 8. Without a Hopper
// GPU the example prints what weave would run for this layer at TP 2 (pure CPU), says why the GPU
// part is skipped, and exits 77 (skipped). Exit 1: a wrong element or a failed self-test; 2: an error.
//   ./gemm_reduce_scatter [m]      (rows of all ranks together, a multiple of the GPU count; default 4096)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "weave/weave.hpp"

namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

uint16_t bf16_of_small_int(int v) {  // exact for |v| < 256
  float f = static_cast<float>(v);
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

float float_of_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main(int argc, char** argv) try {
  std::int64_t m = 4096;
  if (argc > 1) {
    char* end = nullptr;
    const long long v = std::strtoll(argv[1], &end, 10);
    if (argc != 2 || *end != '\0' || v < 1 || v > (1 << 20)) {
      std::fprintf(stderr, "usage: %s [m]: rows of all ranks, an integer 1 .. 1048576 (default 4096)\n", argv[0]);
      return 2;
    }
    m = v;
  }
  constexpr std::int64_t n = 2048, k = 256;
  std::vector<int> devices;
  for (const weave::DeviceInfo& d : weave::list_devices())
    if (d.is_hopper()) devices.push_back(d.ordinal);
  const int world = devices.empty() ? 2 : static_cast<int>(devices.size());
  if (m % world != 0) {
    std::fprintf(stderr, "m = %lld must be a multiple of the world (%d GPUs)\n", static_cast<long long>(m), world);
    return 2;
  }

  weave::GemmReduceScatterConfig cfg;
  cfg.n = n;
  cfg.k = k;
  cfg.m_max = m;
  cfg.quant = weave::ScaleMode::kBF16;
  const std::string bad = weave::GemmReduceScatter::validate(cfg, world);
  if (!bad.empty()) {
    std::fprintf(stderr, "config: %s\n", bad.c_str());
    return 2;
  }
  // CPU part: what auto would run for one call of m rows on `world` NVLink-connected GPUs.
  const weave::GemmReduceScatterPlan plan = weave::gemm_reduce_scatter_plan(cfg, world, m);
  std::printf("GEMM [%lld, %lld, K_r %lld] + reduce-scatter over %d GPUs: %s (%s)\n", static_cast<long long>(m),
              static_cast<long long>(n), static_cast<long long>(k), world,
              std::string(weave::to_string(plan.mode)).c_str(), plan.reason.c_str());
  if (devices.empty()) {
    const std::string why = weave::no_gpu_reason();
    std::printf("GPU part skipped: needs a Hopper GPU%s%s\n", why.empty() ? "" : ": ", why.c_str());
    return 77;
  }

  auto comms = weave::Communicator::create_local(devices);
  std::vector<long long> wrong(comms.size(), 0);
  std::vector<int> self_test_ok(comms.size(), 0);
  weave::run_per_rank(comms, [&](weave::Communicator& comm) {  // this thread's GPU is current
    weave::GemmReduceScatter op(comm, cfg);
    if (comm.rank() == 0) std::printf("rank 0 runs: %s\n", op.describe().c_str());
    const weave::SelfTestReport rep = op.self_test();  // known values through the real path, checked
    self_test_ok[comm.rank()] = rep.ok;
    if (comm.rank() == 0) std::printf("self-test: %s\n", rep.detail.c_str());

    const int dev = comm.device();
    std::vector<uint16_t> ha(static_cast<size_t>(m * k), bf16_of_small_int(1));
    std::vector<uint16_t> hb(static_cast<size_t>(n * k), bf16_of_small_int(comm.rank() + 1));
    void *a = nullptr, *b = nullptr;
    check_cuda(cudaMalloc(&a, ha.size() * 2), "cudaMalloc");
    check_cuda(cudaMalloc(&b, hb.size() * 2), "cudaMalloc");
    check_cuda(cudaMemcpy(a, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    check_cuda(cudaMemcpy(b, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    op.run(m, weave::TensorView::matrix(a, weave::DType::kBF16, m, k, dev),
           weave::TensorView::matrix(b, weave::DType::kBF16, n, k, dev), {}, stream);
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    op.check();  // raises a timeout a device-side wait recorded (rank, peer, flag, expected, seen)
    const weave::TensorView out = op.output(m);  // [m / world, n]: this rank's rows, in the op's window
    std::vector<uint16_t> host(static_cast<size_t>(out.rows() * out.cols()));
    check_cuda(cudaMemcpy(host.data(), out.data, host.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const int w = comm.world_size();
    const float want = static_cast<float>(k * w * (w + 1) / 2);
    for (uint16_t v : host) wrong[comm.rank()] += float_of_bf16(v) != want;
    cudaStreamDestroy(stream);
    cudaFree(a);
    cudaFree(b);
  });
  long long total = 0;
  for (std::size_t r = 0; r < wrong.size(); ++r) {
    std::printf("rank %zu: self-test %s, %lld of %lld elements wrong\n", r, self_test_ok[r] ? "passed" : "FAILED",
                wrong[r], static_cast<long long>(m / static_cast<std::int64_t>(wrong.size()) * n));
    total += wrong[r] + (self_test_ok[r] ? 0 : 1);
  }
  return total == 0 ? 0 : 1;
} catch (const weave::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
