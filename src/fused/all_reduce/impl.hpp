// The state behind weave::GemmAllReduce (internal). Built on a comm::Group, so the same code runs
// over an NCCL communicator and in the test-only emulated world (Impl::create).
//
// Window (prefix "gar.", every region at capacity, offsets independent of M):
//   gar.control / gar.credits / gar.flags   the fused kernel's protocol words (OpRuntime); the
//                control region holds the chunk counters RS[destination][chunk] and AG[chunk]
//   gar.staging  (fused) [source][band_cap_rows][N] bf16: the partials peers send for this rank's
//                band. Written by peers in call e only after this rank's ready = e (lag-0
//                credit): this rank's call e - 1, which read them, is complete.
//   gar.pull     (fused-ce) the copy streams' trigger, landed and arrived words (fused/all_reduce/pull.hpp)
//   gar.out      [m_max, N] bf16; a call of m rows uses the first m. The split modes' GEMM writes
//                the partial here and the all-reduce runs in place.
//   gar.split.*  the split modes' all-reduce (a Collective without in/out regions of its own)
#pragma once
#include <array>
#include <memory>
#include <optional>

#include "comm/collective_impl.hpp"
#include "comm/copy_streams.hpp"
#include "comm/group.hpp"
#include "comm/op_runtime.hpp"
#include "comm/stream_mem_ops.hpp"
#include "fused/pipeline_record.hpp"
#include "fused/all_reduce/hooks.hpp"
#include "fused/all_reduce/params.hpp"
#include "fused/all_reduce/plan.hpp"
#include "fused/mx_route.hpp"
#include "fused/tile_kernels.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/operands.hpp"
#include "gemv/gemv.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave {

struct GemmAllReduce::Impl {
  std::shared_ptr<comm::Group> owned_group;
  comm::Group* group = nullptr;
  GemmAllReduceConfig cfg;
  fused::GemmAllReduceHooks hooks;  // the tests' negative controls (defaults everywhere else)
  // kReduceScatter: this Impl is GemmReduceScatter's (no gather leg; each rank keeps its band:
  // rows [r m / w, (r + 1) m / w), m a multiple of w; fused/reduce_scatter/).
  fused::ArLeg leg = fused::ArLeg::kAllReduce;
  int num_sms = 0;
  int grid_cap = 1;  // CTAs per rank: SMs / ranks sharing the GPU
  fused::GarLayout layout;
  std::unique_ptr<comm::OpRuntime> rt;
  fused::PipelineRecord pipeline;  // this op's kernels' GEMM-pipeline timeouts (check() reports them)
  gemm::MainloopDebug debug;  // WEAVE_GEMM_DEBUG_* at construction (as weave::Gemm: the stall knob)
  std::unique_ptr<Collective::Impl> split;  // split-lsa / split-ce: the in-place all-reduce
  fused::GarCapabilities caps;  // what this op can run here (resolved once, in the constructor)
  // Auto: the m (bit m - 1, m <= 32) whose decode-fused grid is resident in one wave, where the
  // calibration table names decode-fused (0: none; the table's other rows keep the model's choice).
  uint64_t auto_decode_fused_m = 0;
  // The tiles a call may run (fused/tile_choice.hpp: the planner's rule on those built with the
  // all-reduce epilogue and the local store; split runs the tile fused would) and their kernels.
  std::vector<gemm::TileCandidate> tiles;
  std::vector<fused::TileKernels<fused::AllReduceParams>> kernels;
  // mxfp8's bf16 route (fused/mx_route.hpp): the buffers (its kernels are in `kernels`).
  std::unique_ptr<fused::MxBf16Route> mx;
  GemmAllReduceMode last = GemmAllReduceMode::kAuto;
  bool last_mx_bf16_route = false;  // the last call converted mxfp8 to bf16 (which kernel ran: the GPU's flag)
  // fused-ce: one copy stream per peer step, waiting on words the kernel stores (fused/all_reduce/pull.hpp).
  std::unique_ptr<comm::StreamMemOps> mem_ops;
  comm::CopyStreams pulls;
  std::optional<fused::Calibration> calibration;  // cfg.calibration's table (auto's measured choices)
  uint64_t self_test_seed = 0x5eed;
  bool fail_after_enqueue_for_testing = false;  // run() raises after its GPU work is enqueued

  Impl(comm::Group& g, const GemmAllReduceConfig& config, const fused::GemmAllReduceHooks& hooks = {},
       fused::ArLeg leg = fused::ArLeg::kAllReduce);
  static Impl& of(GemmAllReduce& op) { return *op.impl_; }  // tests reach the state through it
  static std::unique_ptr<GemmAllReduce> create(comm::Group& g, const GemmAllReduceConfig& config,
                                               const fused::GemmAllReduceHooks& hooks = {});
  // The same steps for GemmReduceScatter's Impl, which owns this one (fused/reduce_scatter/).
  static std::unique_ptr<Impl> create_impl(comm::Group& g, const GemmAllReduceConfig& config,
                                           const fused::GemmAllReduceHooks& hooks, fused::ArLeg leg);
  // Construction in steps, so several ops can share one window (fused/shared_window.hpp): add this
  // op's regions under `prefix`, then attach the window made from the whole layout.
  fused::GarLayout lay_out(WindowLayout& layout, const std::string& prefix);
  void attach(const std::shared_ptr<comm::OpWindow>& window);
  static std::unique_ptr<GemmAllReduce> wrap(std::unique_ptr<Impl> impl);

  GemmAllReducePlan plan(int64_t m) const;
  GemmPlan tile_plan(int64_t m) const;  // the call's tile GEMM (hooks.tile forces one), made once per m
  mutable fused::TilePlanCache tile_plans;
  fused::ArSchedule schedule(int64_t m, const GemmPlan& tile) const;  // this rank's walk of m rows
  GemmAllReducePlan plan_on(int64_t m, const GemmPlan& tile, const fused::ArSchedule& sched) const;
  using Planned = fused::PlannedCall<fused::ArSchedule, GemmAllReducePlan>;
  const Planned& planned_at(int64_t m) const;
  mutable fused::PerMCache<Planned> planned;
  // One call's decisions for this rank, made once (plan_call) and only carried out by enqueue.
  struct Call {
    GemmAllReducePlan plan;            // the public plan (its mode, grid, chunks, model, reason)
    GemmAllReduceMode mode = GemmAllReduceMode::kAuto;  // what runs: plan.mode, or split-lsa for a decode the GEMV cannot read
    fused::ArSchedule sched;           // this rank's walk (the fused modes)
    GemmPlan gemm;                     // the tile GEMM's plan (every mode but decode)
    const fused::TileKernels<fused::AllReduceParams>* kernels = nullptr;  // its tile's kernels
    fused::MxBf16Route* route = nullptr;  // mxfp8 converted to bf16 for this call (fused/mx_route.hpp)
    fused::MxRouteCall rc;
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
  void run_decode(const GemmProblem& prob, const TensorView& a, const TensorView& b, const GemmScales& s,
                  cudaStream_t stream);
  int decode_split(const GemmProblem& prob) const;  // mode decode's GEMV K split (0: the GEMV's plan)
  // decode_split by m, made once (run() asks every decode call; -1: not made yet).
  mutable std::array<int, detail::kGemvMaxM + 1> decode_splits = make_unset_splits();
  static std::array<int, detail::kGemvMaxM + 1> make_unset_splits() {
    std::array<int, detail::kGemvMaxM + 1> a;
    a.fill(-1);
    return a;
  }
  void run_decode_fused(const GemmProblem& prob, const TensorView& a, const TensorView& b, const GemmScales& s,
                        cudaStream_t stream);
  struct DecodeFusedShapes {
    std::string splits;       // the GEMV's K split per m, comma-separated
    std::string unavailable;  // why the first m that cannot keep its grid in one wave cannot ("" where every m can)
    uint64_t resident_m = 0;  // bit m - 1: m's grid is resident in one wave
    bool hosted = false;      // the op hosts decode-fused's lines (fused::gar_hosts_decode_fused)
  };
  DecodeFusedShapes decode_fused_shapes(const comm::Group& g) const;  // the constructor's residency rule
  void enqueue_pulls(int64_t m, int block_m, const fused::ArSchedule& sched, cudaStream_t stream);
  void init_pull_words();
  char* out_local() const { return rt->window().local() + layout.out; }
  const char* op_name() const { return fused::gar_op_name(leg); }
  // The rows of a call of m rows this rank receives: all m, or its band of m / world (reduce-scatter).
  int64_t out_row0(int64_t m) const;
  int64_t out_rows(int64_t m) const;
  TensorView output(int64_t m) const;
  void check() const;
  std::string describe() const;
  SelfTestReport self_test(int64_t m);  // fused/all_reduce/self_test.cpp (both legs)
};

}  // namespace weave
