// Replays of captured calls in an order every rank shares: the fused operators' graph tests in the
// emulated world (tests/gpu, through test::replay_graphs_in_lockstep) and over NCCL (tests/multi_gpu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"

namespace weave::test {

// Instantiates `graphs` (destroying them), calls `before_first` (every rank set up before any
// replay waits for it), then replays them `replays` times in an order drawn from `seed` (the same
// on every rank: every rank makes the same calls), calling `after_each` after each launch (the
// emulated world's lockstep enqueue; nothing over NCCL), waits (bounded by `timeout_s`) and
// destroys the executables. Returns how often each graph was replayed.
inline std::vector<int> replay_graphs(const std::vector<cudaGraph_t>& graphs, int replays, uint32_t seed,
                                      cudaStream_t st, const std::function<void()>& before_first,
                                      const std::function<void()>& after_each, double timeout_s = 60) {
  std::vector<cudaGraphExec_t> execs;
  for (cudaGraph_t graph : graphs) {
    cudaGraphExec_t exec;
    WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    WEAVE_CHECK_CUDA(cudaGraphDestroy(graph));
    execs.push_back(exec);
  }
  if (before_first) before_first();
  std::mt19937 order(seed);
  std::vector<int> launched(execs.size(), 0);
  for (int i = 0; i < replays; ++i) {
    const size_t e = order() % execs.size();
    WEAVE_CHECK_CUDA(cudaGraphLaunch(execs[e], st));
    ++launched[e];
    if (after_each) after_each();
  }
  comm::sync_stream_bounded(st, timeout_s, "graph replays");
  for (cudaGraphExec_t e : execs) WEAVE_CHECK_CUDA(cudaGraphExecDestroy(e));
  return launched;
}

}  // namespace weave::test
