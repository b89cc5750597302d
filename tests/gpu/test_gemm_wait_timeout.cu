// The GEMM pipeline's bounded waits and their cooperative abort (src/hopper/pipeline.cuh,
// wait_record.*): a wait that exceeds its bound writes block, thread, site, stage, parity and the
// time waited into the process-wide host-mapped WaitTimeoutRecord (the first thread of the grid to
// claim it), sets its CTA's abort word, and every other wait of the CTA gives up at its next poll;
// the kernel then ends cleanly, so the CUDA context stays usable and weave::Gemm::check() (and the
// next run()) raise kTimeout with the record. hopper::take_wait_timeout_report() formats the
// record (tests/cpu/test_wait_record.cpp tests the formatting alone) and clears it.
//
// What each test catches:
//  - HostMappedRecordRoundTrip: a record the kernels cannot address (not mapped, or a host
//    pointer that is not also the device pointer, which operands.cpp assumes by passing it
//    straight into MainloopArgs), GEMM arguments built without the record, a report that is not
//    cleared (magic and claim) by take, or one that reads a record without its magic;
//  - AbortedWaitIsRecordedAndTheCtaLeaves: a bounded wait that never times out (the kernel would
//    not end within the test's 20 s watch), a timed-out wait that does not raise the abort word
//    (the CTA's other waiters, with a 15 s bound, would hold it past the 5 s allowed), a second
//    CTA's later timeout overwriting the first record (no claim), wrong fields, and an abort that
//    leaves the context unusable (a trap: the sync and the next kernel fail);
//  - GemmKernelAbortsCooperatively: every instance family (bf16, ptpc 128- and 256-row tiles,
//    blockscale, mxfp8 native, the 2-CTA cluster instances, whose CTAs also wait for each other's
//    B halves and empty stages) with a stage that is never loaded (debug knob) must end within a
//    few bounds, with cudaSuccess, report through Gemm::check() once (kTimeout), and the same
//    process must then compute a correct GEMM.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "gemm/operands.hpp"
#include "gemm/planner.hpp"
#include "hopper/pipeline.cuh"
#include "hopper/wait_record.hpp"
#include "comm/timeout.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "support/scoped_env.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

// Every thread of block `wait_block`, and thread `late_thread` of block 0, waits on a barrier
// nobody arrives at (phase 0 of a fresh mbarrier never completes). Thread `wait_thread` of
// `wait_block` has the short bound; its CTA's other threads a long one, so they can only leave
// early through the abort word. Block 0's thread times out later, on its own: its record must
// not replace the first. done[block * blockDim + thread] = 1 once a thread has left its wait.
__global__ void wait_forever(hopper::WaitTimeoutRecord* record, int wait_block, int wait_thread, uint32_t stage,
                             uint64_t short_ns, uint64_t long_ns, int late_thread, uint64_t late_ns, int* done) {
  __shared__ uint64_t bar;
  __shared__ uint32_t abort_word;
  const uint32_t addr = ptx::smem_addr(&bar);
  if (threadIdx.x == 0) {
    ptx::mbarrier_init_shared_cta(addr, 1);
    abort_word = 0;
  }
  __syncthreads();
  const int b = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x);
  bool waited = false;
  if (b == wait_block) {
    hopper::mbarrier_wait_or_abort(addr, 0, hopper::WaitSite::kConsumerFull, stage, record,
                                   t == wait_thread ? short_ns : long_ns, ptx::smem_addr(&abort_word));
    waited = true;
  } else if (t == late_thread) {
    hopper::mbarrier_wait_or_abort(addr, 0, hopper::WaitSite::kProducerEmpty, stage + 1, record, late_ns,
                                   ptx::smem_addr(&abort_word));
    waited = true;
  }
  if (waited) done[b * blockDim.x + t] = 1;
}

// Synchronises `stream` (bounded: a kernel still running after `limit_s` fails the test with
// kTimeout) and returns the seconds it took.
double seconds_to_sync(cudaStream_t stream, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  comm::sync_stream_bounded(stream, limit_s, "the kernel");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  // The kernels are handed the host pointer: under unified addressing it is the device pointer.
  // cudaHostGetDevicePointer is the documented query (the attribute's devicePointer read NULL once).
  void* mapped = nullptr;
  ASSERT_EQ(cudaHostGetDevicePointer(&mapped, record, 0), cudaSuccess);
  EXPECT_EQ(mapped, static_cast<void*>(record)) << "the kernels are handed the host pointer";
  if (attr.devicePointer != mapped)
    std::printf("  note: cudaPointerGetAttributes gave devicePointer %p for the record at %p\n", attr.devicePointer,
                static_cast<void*>(record));
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "a record left over from an earlier test";

  // What the device side (hopper::report_wait_timeout) writes, written from the host.
  volatile hopper::WaitTimeoutRecord* r = record;
  r->site = static_cast<uint32_t>(hopper::WaitSite::kProducerEmpty);
  r->stage = 4;
  r->parity = 1;
  r->block = 131;
  r->thread = 0;
  r->waited_ns = 10'000'250'000ull;
  r->claimed = 1;
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "reported a record whose magic is not written yet";
  r->magic = hopper::kWaitTimeoutMagic;
  EXPECT_EQ(hopper::take_wait_timeout_report(),
            "GEMM pipeline wait timed out after 10000 ms: block 131 thread 0 waiting on empty[4] parity 1");
  EXPECT_EQ(r->magic, 0u) << "take must clear the record";
  EXPECT_EQ(r->claimed, 0u) << "take must clear the claim, or no later timeout is ever recorded";
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "reported twice";

  // Every tiled GEMM's main-loop arguments carry the record.
  const OperandSet o = make_operands(ScaleMode::kBF16, 128, 128, 128, 61, false);
  const GemmPlan plan = gemm_plan(o.p, 132, GemmPlanOverrides{.block_m = 128, .block_n = 128, .split_k = 1});
  ASSERT_FALSE(plan.gemv);
  const gemm::MainloopArgs args = gemm::make_mainloop_args(o.p, plan, o.va, o.vb, o.scales);
  EXPECT_EQ(args.timeout_record, record);
}

TEST(GemmWaitTimeout, AbortedWaitIsRecordedAndTheCtaLeaves) {
  WEAVE_REQUIRE_GPUS(1);
  ASSERT_EQ(hopper::take_wait_timeout_report(), "") << "a record left over from an earlier test";
  hopper::WaitTimeoutRecord* record = hopper::wait_timeout_record();
  ASSERT_NE(record, nullptr);
  constexpr int kBlocks = 2, kThreads = 64;
  int* done = nullptr;
  ASSERT_EQ(cudaMalloc(&done, kBlocks * kThreads * sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(done, 0, kBlocks * kThreads * sizeof(int)), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  // Block 1 thread 37 gives up after 0.2 s; its 63 neighbours would wait 15 s; block 0 thread 5
  // gives up after 1 s, on its own.
  wait_forever<<<kBlocks, kThreads, 0, stream>>>(record, 1, 37, 3, 200'000'000ull, 15'000'000'000ull, 5,
                                                 1'000'000'000ull, done);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const double seconds = seconds_to_sync(stream, 20);
  EXPECT_LT(seconds, 5.0) << "block 1's other waits did not give up with thread 37 (no abort word?)";
  EXPECT_GE(seconds, 0.9) << "block 0's own 1 s wait ended early";
  std::vector<int> h(kBlocks * kThreads);
  ASSERT_EQ(cudaMemcpy(h.data(), done, h.size() * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  int left = 0;
  for (int v : h) left += v;
  EXPECT_EQ(left, kThreads + 1) << "every waiting thread must leave its wait";
  const std::string report = hopper::take_wait_timeout_report();
  std::printf("  report: %s (kernel ended after %.2f s)\n", report.c_str(), seconds);
  EXPECT_EQ(report.rfind("GEMM pipeline wait timed out after ", 0), 0u) << report;
  EXPECT_NE(report.find("block 1 thread 37 waiting on full[3] parity 0"), std::string::npos)
      << "the first timeout's record (block 0's later one must not replace it): " << report;
  EXPECT_EQ(hopper::take_wait_timeout_report(), "") << "reported twice";
  // The context survived: an ordinary copy and kernel still work.
  ASSERT_EQ(cudaMemsetAsync(done, 0, h.size() * sizeof(int), stream), cudaSuccess);
  wait_forever<<<1, 32, 0, stream>>>(record, -1, -1, 0, 0, 0, -1, 0, done);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  cudaFree(done);
}

TEST(GemmWaitTimeout, GemmKernelAbortsCooperatively) {
  WEAVE_REQUIRE_GPUS(1);
  ASSERT_EQ(hopper::take_wait_timeout_report(), "") << "a record left over from an earlier test";
  struct Case {
    ScaleMode mode;
    int block_m;
    int cluster = 1;
    ScaleLayout layout = ScaleLayout::kRaw;
  };
  // 256x128 as well as 128x128: ptpc's two tiles run different consumer loops (gemm/kernel.cuh).
  for (const Case c : {Case{ScaleMode::kBF16, 128}, Case{ScaleMode::kPtpc, 128}, Case{ScaleMode::kPtpc, 256},
                       Case{ScaleMode::kBlockscale, 128}, Case{ScaleMode::kMxfp8, 128},
                       Case{ScaleMode::kPtpc, 128, 2}, Case{ScaleMode::kPtpc, 256, 2},
                       Case{ScaleMode::kBlockscale, 128, 2, ScaleLayout::kMnMajor}}) {
    OperandSet o = make_operands(c.mode, 512, 512, 1024, 71 + c.block_m, false);
    o.p.scale_layout = c.layout;
    const std::string what = describe(o, DType::kBF16) + " tile " + std::to_string(c.block_m) + "x128 cluster " +
                             std::to_string(c.cluster);
    SCOPED_TRACE(what);
    Guarded out(o.p.m * o.p.n * 2);
    const TensorView cv = TensorView::matrix(out.get(), DType::kBF16, o.p.m, o.p.n, 0);
    GemmPlanOverrides ov{.block_m = c.block_m, .block_n = 128, .split_k = 1, .cluster = c.cluster};
    if (c.mode == ScaleMode::kMxfp8) ov.mx_route = MxRoute::kNative;
    if (c.cluster == 2 && gemm::gemm_tile_candidates(o.p, 2).empty()) {
      std::printf("  %s: not built (narrowed build)\n", what.c_str());
      continue;
    }
    {
      ScopedEnv stall("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", "2");
      ScopedEnv bound("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS", "200");
      Gemm g(o.p, o.va, o.vb, o.scales_for(c.layout), cv, ov);
      ASSERT_EQ(g.plan().block_m, c.block_m);
      ASSERT_EQ(g.plan().cluster, c.cluster);
      EXPECT_NO_THROW(g.check()) << "nothing recorded yet";
      g.run(nullptr);
      const double seconds = seconds_to_sync(nullptr, 20);
      EXPECT_LT(seconds, 3.0) << "the CTAs did not leave within a few 0.2 s bounds";
      const std::string message = error_of([&] { g.check(); }, Status::kTimeout);
      EXPECT_NE(message.find("GEMM pipeline wait timed out"), std::string::npos) << message;
      std::printf("  %s: %s (%.2f s)\n", what.c_str(), message.c_str(), seconds);
      EXPECT_NO_THROW(g.check()) << "reported twice";
    }
    // The same process computes a correct GEMM right after.
    Gemm g(o.p, o.va, o.vb, o.scales_for(c.layout), cv, ov);
    const RepeatResult r = run_repeated(g, o, out, DType::kBF16, 2, nullptr);
    EXPECT_EQ(r.bad_runs, 0) << "worst " << r.worst_wrong << " wrong after the abort";
    EXPECT_NO_THROW(g.check());
  }
}
