// The state behind weave::GemmAllGather (internal). Built on a comm::Group, so the same code runs
// over an NCCL communicator and in the test-only emulated world (Impl::create).
//
// Window (prefix "gag.", every region at capacity, offsets independent of M):
//   gag.control / gag.credits / gag.flags   the fused kernel's protocol words (OpRuntime)
//   gag.out      [world * m_max, N] out_dtype; a call of m rows uses the first world * m rows
//                ([world * m, N] row-major, rank s at rows [s*m, (s+1)*m)). That the rows of one
//                call depend on m is safe because every writer waits for the receiver's credit
//                of the same call first (lag 0): the receiver finished everything it did with
//                the previous call's output, whatever its m.
//                fused-ce pulls them with copy engines: this rank's copy stream s - 1 copies peer
//                r + s's rows out of that peer's gag.out into its own, chunk by chunk.
//   gag.partials the split modes' K-split partials (fp32 [S, m, N], plan.hpp gag_partials_bytes):
//                local only, written and read by this rank's kernels in stream order
//   gag.split.*  the split modes' all-gather (a Collective without in/out regions of its own:
//                it gathers gag.out in place)
#pragma once
#include <memory>
#include <optional>

#include "comm/collective_impl.hpp"
#include "comm/copy_streams.hpp"
#include "comm/group.hpp"
#include "comm/op_runtime.hpp"
#include "comm/stream_mem_ops.hpp"
#include "fused/pipeline_record.hpp"
#include "fused/all_gather/hooks.hpp"
#include "fused/all_gather/params.hpp"
#include "fused/calibration.hpp"
#include "fused/all_gather/plan.hpp"
#include "fused/mx_route.hpp"
#include "fused/tile_kernels.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/operands.hpp"
#include "weave/gemm_all_gather.hpp"

namespace weave {

struct GemmAllGather::Impl {
  std::shared_ptr<comm::Group> owned_group;
  comm::Group* group = nullptr;
  GemmAllGatherConfig cfg;
  fused::GemmAllGatherHooks hooks;  // the tests' negative controls (defaults everywhere else)
  int num_sms = 0;
  int grid_cap = 1;                 // CTAs per rank: SMs / ranks sharing the GPU
  size_t out_bytes = 2;             // bytes per output element
  fused::GagLayout gl;               // this op's regions in its window
  uint64_t out_off = 0;             // gag.out
  std::unique_ptr<comm::OpRuntime> rt;
  fused::PipelineRecord pipeline;  // this op's kernels' GEMM-pipeline timeouts (check() reports them)
  gemm::MainloopDebug debug;  // WEAVE_GEMM_DEBUG_* at construction (as weave::Gemm: the stall knob)
  std::unique_ptr<Collective::Impl> split;  // split-lsa / split-ce: the in-place all-gather
  comm::CopyStreams pulls;                  // fused-ce: one copy stream per peer step
  std::unique_ptr<comm::StreamMemOps> mem_ops;  // fused-ce: the copy streams wait on kernel-stored triggers
  fused::GagCapabilities caps;      // what this op can run here (resolved once, in the constructor)
  // The tiles a call may run (fused/tile_choice.hpp: the planner's rule on those built with the
  // all-gather epilogue and the local store; split runs the tile fused would) and their kernels.
  std::vector<gemm::TileCandidate> tiles;
  std::vector<fused::TileKernels<fused::AllGatherParams>> kernels;
  // mxfp8's bf16 route (fused/mx_route.hpp): the buffers (its kernels are in `kernels`).
  std::unique_ptr<fused::MxBf16Route> mx;
  bool last_mx_bf16_route = false;  // the last call converted mxfp8 to bf16 (which kernel ran: the GPU's flag)
  GemmAllGatherMode last = GemmAllGatherMode::kAuto;
  std::optional<fused::Calibration> calibration;  // cfg.calibration's table (auto's measured choices)
  uint64_t self_test_seed = 0x5eed;
  bool fail_after_enqueue_for_testing = false;  // run() raises after its GPU work is enqueued

  Impl(comm::Group& g, const GemmAllGatherConfig& config, const fused::GemmAllGatherHooks& hooks = {});
  static Impl& of(GemmAllGather& op) { return *op.impl_; }  // tests reach the state through it
  static std::unique_ptr<GemmAllGather> create(comm::Group& g, const GemmAllGatherConfig& config,
                                               const fused::GemmAllGatherHooks& hooks = {});
  // Construction in steps, so several ops can share one window (fused/shared_window.hpp): add this
  // op's regions under `prefix`, then attach the window made from the whole layout.
  fused::GagLayout lay_out(WindowLayout& layout, const std::string& prefix);
  void attach(const std::shared_ptr<comm::OpWindow>& window);
  static std::unique_ptr<GemmAllGather> wrap(std::unique_ptr<Impl> impl);

  GemmAllGatherPlan plan(int64_t m) const;
  GemmAllGatherPlan plan_on(int64_t m, const GemmPlan& tile, const fused::AgChunks& chunks,
                            const fused::SplitGemmLeg& leg) const;
  using Planned = fused::PlannedCall<fused::AgChunks, GemmAllGatherPlan>;
  const Planned& planned_at(int64_t m) const;
  mutable fused::PerMCache<Planned> planned;
  GemmPlan tile_plan(int64_t m) const;  // the call's tile GEMM (hooks.tile forces one), made once per m
  mutable fused::TilePlanCache tile_plans;
  // One call's decisions, made once (plan_call) and only carried out by enqueue.
  struct Call {
    GemmAllGatherPlan plan;   // the public plan (its mode, grid, model, reason)
    fused::AgChunks chunks;   // the chunks the fused kernel publishes and fused-ce pulls
    bool pull = false;        // fused-ce with peers
    GemmPlan gemm;            // the tile GEMM's plan
    const fused::TileKernels<fused::AllGatherParams>* kernels = nullptr;  // its tile's kernels
    fused::MxBf16Route* route = nullptr;  // mxfp8 converted to bf16 for this call (fused/mx_route.hpp)
    fused::MxRouteCall rc;
    const fused::SplitGemmLeg* leg = nullptr;  // split modes: weave::Gemm's GEMV or K split instead of the tile
  };
  Call plan_call(const GemmProblem& prob, const TensorView& a, const TensorView& b, const GemmScales& s) const;
  // One call (checks every argument before any GPU work); with `out`, then the copy into it.
  void run(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s, const TensorView* out,
           cudaStream_t stream);
  // The same inside a call guard the caller holds (the self-test: its output poison is part of the call).
  void run_in(comm::OpRuntime::CallGuard& guard, int64_t m, const TensorView& a, const TensorView& b,
              const GemmScales& s, const TensorView* out, cudaStream_t stream);
  // The call's GPU work for checked operands (prob.m rows), in the mode the plan resolves.
  void enqueue(const GemmProblem& prob, const TensorView& a, const TensorView& b, const GemmScales& s,
               cudaStream_t stream);
  // fused-ce: the copy streams' part of a call (forked before the kernel, joined after).
  void enqueue_pulls(int64_t m, int block_m, const fused::AgChunks& chunks, size_t rows_bytes, cudaStream_t stream);
  char* out_local() const { return rt->window().local() + out_off; }
  TensorView output(int64_t m) const;
  void check() const;
  std::string describe() const;
};

}  // namespace weave
