// An all-gather with ONE process per GPU, bootstrapped the way a launcher (MPI, torchrun, a job
// script) does it: every rank learns its rank and the world size, rank 0 creates an
// ncclUniqueId and the others receive it (here through a file: weave::unique_id_via_file), then
// each rank calls Communicator::create(id, rank, world, device).
//
//   ./collective_processes                      starts one process per visible Hopper GPU (itself,
//                                               with the arguments below) and waits for them all
//   ./collective_processes RANK WORLD ID_FILE   one rank (what a launcher would start); rank r
//                                               drives CUDA device r
//
// Rank r contributes bytes (r * 31 + i) % 251 in its block; every rank checks every block. Without
// two Hopper GPUs it prints the plan (pure CPU), says why the GPU part is skipped, and exits 77
// (skipped). Exit 1: wrong bytes on some rank; 2: bad arguments or an error.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "weave/weave.hpp"

namespace {

constexpr std::size_t kBytesPerRank = std::size_t{8} << 20;  // 8 MiB

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

unsigned char expected(int rank, std::size_t i) { return static_cast<unsigned char>((rank * 31 + i) % 251); }

// RANK and WORLD: one digit, 0 .. 8 (atoi would read "abc" as 0).
bool small_int(const char* text, int* out) {
  if (text[0] < '0' || text[0] > '8' || text[1] != '\0') return false;
  *out = text[0] - '0';
  return true;
}

int run_rank(int rank, int world, const std::string& id_file) {
  const ncclUniqueId id = weave::unique_id_via_file(id_file, rank, 60);
  auto comm = weave::Communicator::create(id, rank, world, /*device=*/rank);
  weave::CollectiveConfig cfg;
  cfg.op = weave::CollectiveOp::kAllGather;
  cfg.max_count = kBytesPerRank;  // all-gather: bytes per rank
  weave::Collective op(*comm, cfg);
  // Zero copy, in place: this rank's block of the window's output is its input. (Had the plan
  // fallen back to NCCL's default algorithm, which needs no window, any device buffer would do.)
  void* own = nullptr;
  if (op.window_output() == nullptr) check_cuda(cudaMalloc(&own, kBytesPerRank * world), "cudaMalloc");
  auto* out = static_cast<unsigned char*>(own ? own : op.window_output());
  std::vector<unsigned char> host(kBytesPerRank * world);
  for (std::size_t i = 0; i < kBytesPerRank; ++i) host[rank * kBytesPerRank + i] = expected(rank, i);
  check_cuda(cudaMemcpy(out + rank * kBytesPerRank, host.data() + rank * kBytesPerRank, kBytesPerRank,
                        cudaMemcpyHostToDevice), "cudaMemcpy");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  op.run(out + rank * kBytesPerRank, out, kBytesPerRank, stream);
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  op.check();
  check_cuda(cudaMemcpy(host.data(), out, host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  long long wrong = 0;
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < kBytesPerRank; ++i) wrong += host[r * kBytesPerRank + i] != expected(r, i);
  std::printf("rank %d (%s): %lld of %zu bytes wrong\n", rank, op.describe().c_str(), wrong, host.size());
  cudaStreamDestroy(stream);
  cudaFree(own);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  int child_rank = 0, child_world = 0;
  if (argc == 4 && small_int(argv[1], &child_rank) && small_int(argv[2], &child_world) && child_world >= 1 &&
      child_rank < child_world)
    return run_rank(child_rank, child_world, argv[3]);
  if (argc != 1) {
    std::fprintf(stderr, "usage: %s [RANK WORLD ID_FILE]: none (one process per Hopper GPU), or RANK 0 .. WORLD-1 "
                 "and WORLD 1 .. 8\n", argv[0]);
    return 2;
  }

  int hopper = 0;
  for (const weave::DeviceInfo& d : weave::list_devices()) hopper += d.is_hopper();
  const int world = hopper >= 2 ? hopper : 2;
  weave::PlanInputs in;
  in.op = weave::CollectiveOp::kAllGather;
  in.bytes = kBytesPerRank;
  in.world = world;
  in.lsa_team_size = world;
  const weave::CollectivePlan plan = weave::plan_collective(in);
  std::printf("all-gather of %zu bytes per rank over %d processes: %s %s (%s)\n", kBytesPerRank, world,
              std::string(weave::to_string(plan.transport)).c_str(), std::string(weave::to_string(plan.algorithm)).c_str(),
              plan.reason.c_str());
  if (hopper < 2) {
    const std::string why = weave::no_gpu_reason();
    std::printf("GPU part skipped: needs 2 Hopper GPUs, found %d%s%s\n", hopper, why.empty() ? "" : ": ", why.c_str());
    return 77;
  }
  // The launcher: one child per GPU. This process has touched CUDA only to count GPUs; the
  // children exec a fresh image, so none inherits a CUDA context.
  const std::string id_file = "/tmp/weave_example_id." + std::to_string(::getpid());
  std::vector<pid_t> children;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      const std::string rank = std::to_string(r), w = std::to_string(world);
      ::execl("/proc/self/exe", argv[0], rank.c_str(), w.c_str(), id_file.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    children.push_back(pid);
  }
  int worst = 0;
  for (pid_t pid : children) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    const int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 2;
    worst = rc > worst ? rc : worst;
  }
  std::remove(id_file.c_str());
  return worst;
} catch (const weave::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
