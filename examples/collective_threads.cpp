// An all-reduce over every visible Hopper GPU from ONE process, one host thread per GPU.
//
//   comms = Communicator::create_local(devices)   one ncclCommInitAll for all ranks
//   run_per_rank(comms, fn)                        fn(rank's Communicator) on one thread per GPU
//   Collective op(comm, config)                    collective: every rank constructs it, in the same order
//   op.run(in, out, count, stream)                 enqueues only; any device buffers of this GPU
//
// Each rank contributes the value rank + 1 in every element; every rank must receive
// 1 + 2 + ... + world. Without two Hopper GPUs the example prints the plan weave would use (pure
// CPU), says why the GPU part is skipped, and exits 77 (skipped). Exit 1: a wrong element; 2: bad
// arguments or an error.
//   ./collective_threads [elements]      (default 1M fp32 elements = 4 MiB; 1 .. 2^28)
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "weave/weave.hpp"

namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

int main(int argc, char** argv) try {
  std::size_t count = std::size_t{1} << 20;
  if (argc > 1) {
    // Digits only: strtoull reads "abc" as 0 and "-1" as 2^64 - 1.
    constexpr std::size_t kMaxCount = std::size_t{1} << 28;  // 1 GiB of fp32 per rank
    std::size_t v = 0;
    bool ok = argc == 2 && argv[1][0] != '\0';
    for (const char* c = argv[1]; ok && *c; ++c) {
      ok = *c >= '0' && *c <= '9';
      v = v * 10 + static_cast<std::size_t>(*c - '0');
      ok = ok && v <= kMaxCount;
    }
    if (!ok || v < 1) {
      std::fprintf(stderr, "usage: %s [elements]: an integer, 1 .. %zu (default %zu)\n", argv[0], kMaxCount, count);
      return 2;
    }
    count = v;
  }
  std::vector<int> devices;
  for (const weave::DeviceInfo& d : weave::list_devices())
    if (d.is_hopper()) devices.push_back(d.ordinal);
  const int world = devices.size() >= 2 ? static_cast<int>(devices.size()) : 2;

  // CPU part: what an fp32 all-reduce of this size would use on `world` NVLink-connected GPUs.
  weave::PlanInputs in;
  in.op = weave::CollectiveOp::kAllReduce;
  in.bytes = count * sizeof(float);
  in.world = world;
  in.lsa_team_size = world;
  const weave::CollectivePlan plan = weave::plan_collective(in);
  std::printf("all-reduce of %zu fp32 over %d GPUs: %s %s (%s)\n", count, world,
              std::string(weave::to_string(plan.transport)).c_str(), std::string(weave::to_string(plan.algorithm)).c_str(),
              plan.reason.c_str());
  if (devices.size() < 2) {
    const std::string why = weave::no_gpu_reason();
    std::printf("GPU part skipped: needs 2 Hopper GPUs, found %zu%s%s\n", devices.size(), why.empty() ? "" : ": ",
                why.c_str());
    return 77;
  }

  auto comms = weave::Communicator::create_local(devices);
  std::vector<long long> wrong(comms.size(), 0);
  weave::run_per_rank(comms, [&](weave::Communicator& comm) {  // this thread's GPU is current
    weave::CollectiveConfig cfg;
    cfg.op = weave::CollectiveOp::kAllReduce;
    cfg.dtype = weave::DType::kF32;
    cfg.max_count = count;          // sizes the op's symmetric window; run() refuses larger calls
    weave::Collective op(comm, cfg);  // transport and algorithm chosen as plan_collective says
    if (comm.rank() == 0) std::printf("rank 0 runs: %s\n", op.describe().c_str());

    // Caller-owned buffers (staged through the window). For zero copy, use op.window_input() and
    // op.window_output() instead: they sit at the same offset on every rank.
    std::vector<float> host(count, static_cast<float>(comm.rank() + 1));
    void *in_dev = nullptr, *out_dev = nullptr;
    check_cuda(cudaMalloc(&in_dev, count * sizeof(float)), "cudaMalloc");
    check_cuda(cudaMalloc(&out_dev, count * sizeof(float)), "cudaMalloc");
    check_cuda(cudaMemcpy(in_dev, host.data(), count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    cudaStream_t stream = nullptr;
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    op.run(in_dev, out_dev, count, stream);
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    op.check();  // raises a timeout a device-side wait recorded (rank, peer, flag, expected, seen)
    check_cuda(cudaMemcpy(host.data(), out_dev, count * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    const float want = static_cast<float>(comm.world_size() * (comm.world_size() + 1) / 2);
    for (float v : host) wrong[comm.rank()] += v != want;
    cudaStreamDestroy(stream);
    cudaFree(in_dev);
    cudaFree(out_dev);
  });
  long long total = 0;
  for (std::size_t r = 0; r < wrong.size(); ++r) {
    std::printf("rank %zu: %lld of %zu elements wrong\n", r, wrong[r], count);
    total += wrong[r];
  }
  return total == 0 ? 0 : 1;
} catch (const weave::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
