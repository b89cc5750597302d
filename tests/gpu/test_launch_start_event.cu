// What GemmAllGather fused-ce stands on (docs/memory_ordering.md "ag-fused-ce"): its copy streams
// fork from the GEMM kernel's launch-completion event, which CUDA documents as a best effort
// ("nominally" recorded once every CTA has begun, possibly as late as the kernel's end). Late is
// safe but leaves nothing to overlap: every pull would run after the GEMM. These tests pin what
// the driver does, eagerly and inside a captured graph, so a driver that starts recording it late
// shows up here rather than as a silent loss of overlap.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "support/gpu.hpp"

using namespace weave;

namespace {

// Holds its SM for `ns` (big shared memory: one CTA per SM).
__global__ void hold_sm(uint64_t ns) {
  extern __shared__ char smem[];
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  if (threadIdx.x == 1u << 30) smem[0] = 1;  // never: keeps the allocation
}

constexpr int kHoldSmem = 200 * 1024;
constexpr uint64_t kKernelNs = 2'000'000, kSideNs = 1'500'000;

struct Timer {
  cudaEvent_t e = nullptr;
  Timer() { WEAVE_CHECK_CUDA(cudaEventCreate(&e)); }
  ~Timer() { cudaEventDestroy(e); }
};

// Launches hold_sm on `ctas` CTAs of `main`, recording `started` at launch completion.
void launch_noting_start(int ctas, cudaStream_t main, cudaEvent_t started) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeLaunchCompletionEvent;
  attr.val.launchCompletionEvent.event = started;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(ctas));
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = kHoldSmem;
  cfg.stream = main;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&cfg, hold_sm, kKernelNs));
}

int sm_count() {
  int sms = 0;
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  WEAVE_CHECK_CUDA(cudaFuncSetAttribute(hold_sm, cudaFuncAttributeMaxDynamicSharedMemorySize, kHoldSmem));
  return sms;
}

}  // namespace

// Eager: a stream waiting on the event is released within a small part of the kernel's 2 ms.
TEST(LaunchStartEvent, ReleasesAWaitingStreamAtTheKernelsStart) {
  WEAVE_REQUIRE_GPUS(1);
  const int sms = sm_count();
  OwnedStream main, side;
  cudaEvent_t started = nullptr;
  WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&started, cudaEventDisableTiming));
  for (int rep = 0; rep < 5; ++rep) {
    Timer t0, t_end, t_side;
    WEAVE_CHECK_CUDA(cudaEventRecord(t0.e, main.s));
    launch_noting_start(sms, main.s, started);  // every SM held: as the fused kernel's grid
    WEAVE_CHECK_CUDA(cudaEventRecord(t_end.e, main.s));
    WEAVE_CHECK_CUDA(cudaStreamWaitEvent(side.s, started, 0));
    WEAVE_CHECK_CUDA(cudaEventRecord(t_side.e, side.s));
    WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
    float end_ms = 0, side_ms = 0;
    WEAVE_CHECK_CUDA(cudaEventElapsedTime(&end_ms, t0.e, t_end.e));
    WEAVE_CHECK_CUDA(cudaEventElapsedTime(&side_ms, t0.e, t_side.e));
    EXPECT_GE(end_ms, 1.9f);
    EXPECT_LT(side_ms, 0.5f) << "rep " << rep << ": the launch-completion event came " << side_ms
                             << " ms after the launch, kernel end at " << end_ms << " ms (late: fused-ce overlaps nothing)";
    if (rep == 0) std::printf("  eager: side stream released %.3f ms after the launch (kernel ends at %.3f ms)\n", side_ms, end_ms);
  }
  cudaEventDestroy(started);
}

// In a captured graph (how engines replay calls) the wait becomes a launch-completion edge: a
// side branch of 1.5 ms on the one SM the kernel leaves free ends with the kernel (2 ms in all),
// not after it (3.5 ms).
TEST(LaunchStartEvent, InAGraphTheEdgeFiresAtTheKernelsStart) {
  WEAVE_REQUIRE_GPUS(1);
  const int sms = sm_count();
  OwnedStream cap, main, side;
  cudaEvent_t started = nullptr, fork = nullptr, join = nullptr;
  WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&started, cudaEventDisableTiming));
  WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  WEAVE_CHECK_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  cudaGraph_t graph = nullptr;
  WEAVE_CHECK_CUDA(cudaStreamBeginCapture(cap.s, cudaStreamCaptureModeThreadLocal));
  WEAVE_CHECK_CUDA(cudaEventRecord(fork, cap.s));
  WEAVE_CHECK_CUDA(cudaStreamWaitEvent(main.s, fork, 0));
  launch_noting_start(sms - 1, main.s, started);
  WEAVE_CHECK_CUDA(cudaStreamWaitEvent(side.s, started, 0));
  hold_sm<<<1, 32, 0, side.s>>>(kSideNs);
  WEAVE_CHECK_CUDA(cudaEventRecord(join, side.s));
  WEAVE_CHECK_CUDA(cudaStreamWaitEvent(cap.s, join, 0));
  WEAVE_CHECK_CUDA(cudaEventRecord(join, main.s));
  WEAVE_CHECK_CUDA(cudaStreamWaitEvent(cap.s, join, 0));
  WEAVE_CHECK_CUDA(cudaStreamEndCapture(cap.s, &graph));
  cudaGraphExec_t exec = nullptr;
  WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 5; ++rep) {
    Timer a, b;
    WEAVE_CHECK_CUDA(cudaEventRecord(a.e, cap.s));
    WEAVE_CHECK_CUDA(cudaGraphLaunch(exec, cap.s));
    WEAVE_CHECK_CUDA(cudaEventRecord(b.e, cap.s));
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(cap.s));
    float ms = 0;
    WEAVE_CHECK_CUDA(cudaEventElapsedTime(&ms, a.e, b.e));
    EXPECT_LT(ms, 2.8f) << "rep " << rep << ": " << ms << " ms: the side branch waited for the kernel's end";
    if (rep == 0) std::printf("  graph: kernel 2 ms + side branch 1.5 ms from its launch completion: %.3f ms\n", ms);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  for (cudaEvent_t e : {started, fork, join}) cudaEventDestroy(e);
}
