// weave::Gemm's routes under CUDA-graph capture, through the public API: the mxfp8 bf16 route (raw
// and packed scales; its conversion into the workspace and its guarded native rerun), the
// blockscale MN-major copy of row-major A scales, the decode GEMV (blockscale, mxfp8) and a forced
// split-K, beside the plain tiled kernel as the control.
//
// What each check catches:
//  - a route whose launches cannot be captured (a host sync, a blocking copy, an allocation or a
//    non-capturable driver call inside run()) fails at capture or instantiation;
//  - a route that bakes this call's data into the graph (a conversion or scale copy done once at
//    capture, a host-side decision taken from the values): after the first replays, new operand
//    values are copied into the SAME buffers and the next replay must give the new product;
//  - C is NaN-poisoned inside the graph before the captured calls, so a replay that skipped its
//    store leaves NaN ("never written"); the workspace is NaN-poisoned between replays, outside
//    the graph, so a route reading a conversion left from an earlier replay is caught;
//  - guard bytes after C and the workspace stay intact.
#include <gtest/gtest.h>

#include <cstdio>

#include "gemm/planner.hpp"
#include "support/gpu.hpp"
#include "test_gemm_support.hpp"

using namespace weave;
using namespace weave::test;

namespace {

struct RouteCase {
  const char* name;
  ScaleMode mode;
  ScaleLayout layout;
  int64_t m;
  GemmPlanOverrides ov;
  bool gemv = false, mx_dequant = false;  // the route the plan must take
  int split_k = 0;                        // > 0: the plan's split_k must be this
  bool mn_copy = false;                   // the plan copies A's scales to MN-major first
};

// Copies every device tensor of `from` into the same tensor of `to` (equal shapes), so a graph
// captured over `to`'s buffers sees `from`'s values; returns once the copies are done.
void copy_values(const OperandSet& from, const OperandSet& to) {
  auto copy = [](const Guarded& src, const Guarded& dst) {
    if (dst.get() == nullptr) return;
    ASSERT_EQ(src.bytes(), dst.bytes());
    ASSERT_EQ(cudaMemcpy(dst.get(), src.get(), dst.bytes(), cudaMemcpyDeviceToDevice), cudaSuccess);
  };
  copy(from.a, to.a);
  copy(from.b, to.b);
  copy(from.sa, to.sa);
  copy(from.sb, to.sb);
  copy(from.sa_packed, to.sa_packed);
  copy(from.sb_packed, to.sb_packed);
  copy(from.sa_mn, to.sa_mn);
  // A device-to-device cudaMemcpy may return before it is done and does not order a non-blocking
  // stream: finish the copies before a graph on any stream reads them.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

void check_route_in_graph(const RouteCase& rc, cudaStream_t stream) {
  constexpr int kCallsPerGraph = 3, kReplaysPerSet = 3;
  const DType out = DType::kF32;
  const uint64_t seed = 8100 + 10 * static_cast<uint64_t>(rc.mode) + static_cast<uint64_t>(rc.layout);
  const OperandSet o1 = make_operands(rc.mode, rc.m, 264, 1024, seed, false);
  const OperandSet o2 = make_operands(rc.mode, rc.m, 264, 1024, seed + 1, false);
  GemmProblem p = o1.p;
  p.out_dtype = out;
  p.scale_layout = rc.layout;
  Guarded c(static_cast<std::size_t>(p.m * p.n) * dtype_bytes(out));
  Gemm g(p, o1.va, o1.vb, o1.scales_for(rc.layout), TensorView::matrix(c.get(), out, p.m, p.n, 0), rc.ov);
  const std::string what = std::string(rc.name) + ": " + describe(o1, out) + " " + g.plan().kernel;
  SCOPED_TRACE(what);
  // The route under test must be the one taken (a silent fallback would test something else).
  ASSERT_EQ(g.plan().gemv, rc.gemv);
  ASSERT_EQ(g.plan().mx_dequant, rc.mx_dequant);
  if (rc.split_k > 0) ASSERT_EQ(g.plan().split_k, rc.split_k);
  ASSERT_EQ(g.plan().scale_a_mn_copy, rc.mn_copy);
  const Guarded ws = attach_workspace(g);
  g.run(stream);  // loads the kernels' modules outside the capture
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  bench::poison_nan(c.get(), c.bytes(), out, stream);
  for (int i = 0; i < kCallsPerGraph; ++i) g.run(stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  int replays = 0;
  for (const OperandSet* values : {&o1, &o2}) {
    if (values == &o2) copy_values(o2, o1);
    for (int rep = 0; rep < kReplaysPerSet; ++rep, ++replays) {
      if (ws.bytes() > 0) bench::poison_nan(ws.get(), ws.bytes(), DType::kF32, stream);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const ref::Comparison cmp = compare_output(*values, c, out);
      EXPECT_EQ(cmp.wrong, 0) << "replay " << replays << " (operand set " << (values == &o1 ? 1 : 2)
                              << "): never written " << cmp.never_written << ", rel_l2 " << cmp.rel_l2;
      EXPECT_LT(cmp.rel_l2, rel_l2_bound(p.mode, out)) << "replay " << replays;
      if (cmp.wrong) break;
    }
  }
  std::printf("  %-22s %-40s %-46s %d replays of %d calls, new values after %d\n", rc.name, describe(o1, out).c_str(),
              g.plan().kernel.c_str(), replays, kCallsPerGraph, kReplaysPerSet);
  EXPECT_TRUE(c.guard_intact()) << "wrote past the end of C";
  if (ws.bytes() > 0) EXPECT_TRUE(ws.guard_intact()) << "wrote past the end of the workspace";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace

TEST(GemmRouteGraphs, EveryRouteReplaysWithNewValuesInTheSameBuffers) {
  WEAVE_REQUIRE_GPUS(1);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const RouteCase cases[] = {
      {"tiled (control)", ScaleMode::kPtpc, ScaleLayout::kRaw, 200, {}},
      {"split-K 3", ScaleMode::kBlockscale, ScaleLayout::kRaw, 200, {.block_m = 128, .block_n = 128, .split_k = 3},
       false, false, 3},
      {"mxfp8 bf16 route raw", ScaleMode::kMxfp8, ScaleLayout::kRaw, 200, {.mx_route = MxRoute::kBf16}, false, true},
      {"mxfp8 bf16 route packed", ScaleMode::kMxfp8, ScaleLayout::kPacked, 200, {.mx_route = MxRoute::kBf16}, false,
       true},
      {"mn-major scale copy", ScaleMode::kBlockscale, ScaleLayout::kRaw, 200,
       {.scale_a_route = ScaleARoute::kMnMajorCopy}, false, false, 0, true},
      {"gemv blockscale", ScaleMode::kBlockscale, ScaleLayout::kRaw, 7, {}, true},
      {"gemv mxfp8", ScaleMode::kMxfp8, ScaleLayout::kRaw, 7, {}, true},
  };
  int ran = 0;
  for (const RouteCase& rc : cases) {
    GemmProblem probe{.m = rc.m, .n = 264, .k = 1024, .mode = rc.mode, .scale_layout = rc.layout};
    if (rc.split_k > 0 && !split_k_tiles_built(probe)) {
      std::printf("  %-22s not run: no split-K tile built for this mode\n", rc.name);
      continue;
    }
    GemmProblem mn_probe = probe;
    mn_probe.scale_layout = ScaleLayout::kMnMajor;
    if (rc.mn_copy && gemm::gemm_tile_candidates(mn_probe).empty()) {
      std::printf("  %-22s not run: no mn-major blockscale instance built\n", rc.name);
      continue;
    }
    check_route_in_graph(rc, stream);
    ++ran;
    if (HasFatalFailure()) break;
  }
  EXPECT_GE(ran, 5) << "routes not exercised";
  cudaStreamDestroy(stream);
}
