// The GEMM pipeline's bounded-wait timeout path (src/hopper/pipeline.cuh, wait_record.*): a wait
// that exceeds kMbarrierTimeoutNs writes block, thread, site, stage, parity and the time waited
// into a host-mapped WaitTimeoutRecord and traps; hopper::take_wait_timeout_report() formats the
// record (tests/cpu/test_wait_record.cpp tests the formatting alone) and clears it.
//
// A trap ends the CUDA context of its process, and every later test in that process would fail,
// so the real timeout runs in a child process: a gtest death test in the "threadsafe" style
// re-executes this binary with a filter for that one test (clone + exec, so the parent's CUDA
// state is never shared), and only the child's context traps. The child waits the full 10 s of
// kMbarrierTimeoutNs (it is constexpr; no test hook shortens it) and gives up after 90 s (alarm).
//
// What each test catches:
//  - HostMappedRecordRoundTrip: a record the kernels cannot address (not mapped, or a host
//    pointer that is not also the device pointer, which operands.cpp assumes by passing it
//    straight into MainloopArgs), GEMM arguments built without the record (a trap would then leave
//    no report), a report that is not cleared by take, or one that reads a record without its
//    magic;
//  - TrappedWaitIsRecordedAndReported (child process): a bounded wait that never times out (the
//    child would hang until the alarm), one that traps without writing the record or writes it
//    after the trap, wrong fields (block, thread, site, stage, parity) and a report that is lost
//    once the context is dead.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "gemm/operands.hpp"
#include "gemm/planner.hpp"
#include "hopper/pipeline.cuh"
#include "hopper/wait_record.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

// One thread of one block waits on a barrier nobody arrives at: phase 0 of a fresh mbarrier never
// completes, so the wait for parity 0 runs into the bound.
__global__ void wait_forever(hopper::WaitTimeoutRecord* record, int wait_block, int wait_thread, uint32_t stage) {
  __shared__ uint64_t bar;
  const uint32_t addr = ptx::smem_addr(&bar);
  if (threadIdx.x == 0) ptx::mbarrier_init_shared_cta(addr, 1);
  __syncthreads();
  if (static_cast<int>(blockIdx.x) == wait_block && static_cast<int>(threadIdx.x) == wait_thread)
    hopper::mbarrier_wait_bounded(addr, 0, hopper::WaitSite::kConsumerFull, stage, record);
}

// The child's half: trap, then report on stderr (the death test matches it) and exit 0; exit 3
// if the kernel did not fail.
[[noreturn]] void child_trap_and_report() {
  alarm(90);  // a wait that never times out must not hang the run (SIGALRM: the death test fails)
  hopper::WaitTimeoutRecord* record = hopper::wait_timeout_record();
  std::fprintf(stderr, "child: record %p\n", static_cast<void*>(record));
  wait_forever<<<2, 64>>>(record, 1, 37, 3);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t sync = cudaDeviceSynchronize();
  std::fprintf(stderr, "child: launch %s, sync %s\n", cudaGetErrorName(launch), cudaGetErrorName(sync));
  std::fprintf(stderr, "child: report: %s\n", hopper::take_wait_timeout_report().c_str());
  std::fprintf(stderr, "child: report after take: '%s'\n", hopper::take_wait_timeout_report().c_str());
  std::fflush(stderr);
  std::_Exit(sync == cudaSuccess ? 3 : 0);
}

}  // namespace

TEST(GemmWaitTimeout, HostMappedRecordRoundTrip) {
  WEAVE_REQUIRE_GPUS(1);
  hopper::WaitTimeoutRecord* record = hopper::wait_timeout_record();
  ASSERT_NE(record, nullptr) << "no host-mapped record: a timed-out GEMM wait would trap without a report";
  EXPECT_EQ(hopper::wait_timeout_record(), record) << "one process-wide record";
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, record), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  EXPECT_EQ(attr.devicePointer, static_cast<void*>(record)) << "the kernels are handed the host pointer";
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "a record left over from an earlier test";

  // What the device side (hopper::report_wait_timeout) writes, written from the host.
  volatile hopper::WaitTimeoutRecord* r = record;
  r->site = static_cast<uint32_t>(hopper::WaitSite::kProducerEmpty);
  r->stage = 4;
  r->parity = 1;
  r->block = 131;
  r->thread = 0;
  r->waited_ns = 10'000'250'000ull;
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "reported a record whose magic is not written yet";
  r->magic = hopper::kWaitTimeoutMagic;
  EXPECT_EQ(hopper::take_wait_timeout_report(),
            "GEMM pipeline wait timed out after 10000 ms: block 131 thread 0 waiting on empty[4] parity 1");
  EXPECT_EQ(r->magic, 0u) << "take must clear the record";
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "reported twice";

  // Every tiled GEMM's main-loop arguments carry the record.
  const OperandSet o = make_operands(ScaleMode::kBF16, 128, 128, 128, 61, false);
  const GemmPlan plan = gemm_plan(o.p, 132, GemmPlanOverrides{.block_m = 128, .block_n = 128, .split_k = 1});
  ASSERT_FALSE(plan.gemv);
  const gemm::MainloopArgs args = gemm::make_mainloop_args(o.p, plan, o.va, o.vb, o.scales, false);
  EXPECT_EQ(args.timeout_record, record);
}

TEST(GemmWaitTimeoutDeathTest, TrappedWaitIsRecordedAndReported) {
  WEAVE_REQUIRE_GPUS(1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-exec this binary: nothing of our CUDA state is inherited
  EXPECT_EXIT(child_trap_and_report(), testing::ExitedWithCode(0),
              "child: report: GEMM pipeline wait timed out after [0-9]{5,} ms: block 1 thread 37 waiting on "
              "full\\[3\\] parity 0\n.*report after take: ''");
}
