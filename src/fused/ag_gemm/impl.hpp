// The state behind weave::AllGatherGemm (internal). Built on a comm::Group, so the same code runs
// over an NCCL communicator and in the test-only emulated world (Impl::create). The window's
// regions: fused/ag_gemm/plan.hpp. A call (rank r, m rows per rank):
//   1. A_r and its scales -> rows [r m, (r + 1) m) of agm.a / agm.sa (skipped where the caller's
//      views are that slot already: input(m));
//   2. the gathers in place: split-lsa / split-ce weave's all-gather of agm.a, then of agm.sa;
//      split-nccl both ncclAllGathers in one NCCL group; gemm-only none;
//   3. the GEMM of [world m, K] x [N, K]^T from agm.a / agm.sa into agm.out or the caller's out:
//      weave::Gemm with the plan fused::agm_gemm makes for this rank's share of the SMs.
// fused-ce (docs/memory_ordering.md "agm-fused-ce"): 1 as a gated SM copy; the ce pull enter
// kernel (ready flags, triggers); copy stream s - 1 pulls peer r + s's scales, then its rows chunk
// by chunk, setting a landed word after each; the fused-ce GEMM kernel (own rows first, each tile
// waiting for the chunks it reads) beside them; join; the arrive kernel ("done reading").
// Ordering (docs/memory_ordering.md "agm-split"): everything is on the caller's stream, so a call's
// copy into its slot follows the previous call's GEMM, which read the slots the peers overwrite
// next; the peers' stores into this rank's slots wait for this rank's credit of the same call,
// which its gathers give only when they run, after the copy (the hosted collective's "credit").
#pragma once
#include <map>
#include <memory>
#include <optional>

#include "comm/collective_impl.hpp"
#include "comm/copy_streams.hpp"
#include "comm/stream_mem_ops.hpp"
#include "comm/group.hpp"
#include "comm/op_runtime.hpp"
#include "fused/ag_gemm/plan.hpp"
#include "fused/tile_choice.hpp"
#include "fused/tile_kernels.hpp"
#include "common/cuda_owned.hpp"
#include "gemm/operands.hpp"
#include "weave/gemm.hpp"
#include "weave/all_gather_gemm.hpp"

namespace weave {

// The tests' controls (defaults everywhere else): the hosted gathers' protocol knobs, as the other
// fused ops' hooks carry them (fused/split_collective.hpp).
namespace fused {
struct AllGatherGemmHooks {
  bool flow_control = true;        // credits on (off: a negative control)
  uint32_t initial_epoch = 0;      // the epoch wrap tests start near 2^32
  uint32_t stale_slot_lag = 0;
  bool skip_scale_gather = false;  // the scales' gather left out (the negative control of its wait)
  bool skip_landed_wait = false;   // fused-ce: the GEMM reads peers' rows without waiting for them (negative control)
  uint64_t delay_pull_ns = 0;      // fused-ce: each copy stream starts this much later (a slow puller)
  int pull_chunks = 0;             // fused-ce: at most this many chunks per peer (0: the op's; a measurement knob)
  FusedTile tile;                  // fused-ce: every call runs this tile (one of the op's candidates)
};
}  // namespace fused

struct AllGatherGemm::Impl {
  std::shared_ptr<comm::Group> owned_group;
  comm::Group* group = nullptr;
  AllGatherGemmConfig cfg;
  fused::AllGatherGemmHooks hooks;
  int num_sms = 0;
  int grid_cap = 1;                 // CTAs per rank: SMs / ranks sharing the GPU (at most max_sms)
  size_t out_bytes = 2;             // bytes per output element
  size_t elem_bytes = 2;            // bytes per element of A
  size_t scale_row_bytes = 0;       // bytes of one row of A's scales (0: bf16)
  fused::AgmLayout gl;
  std::unique_ptr<comm::OpRuntime> rt;
  fused::AgmCapabilities caps;
  std::optional<fused::Calibration> calibration;  // cfg.calibration's table (auto's measured choices)
  // fused-ce can run its calls here: mode fused-ce, or auto whose table names it (caps.hosts_fused)
  // where every rank has the NVLink domain, the kernel and stream memory operations.
  bool fused_ce_runs = false;
  std::unique_ptr<Collective::Impl> gather_a, gather_sa;  // split-lsa / split-ce
  // fused-ce: its GEMM kernel, one copy stream per peer step, the stream memory operations they wait with.
  // (fused/tile_choice.hpp: the tiles it may run, and their fused-ce kernels)
  std::vector<gemm::TileCandidate> tiles;
  std::vector<fused::TileKernels<fused::AgmRowsParams>> kernels;
  comm::CopyStreams pulls;
  std::unique_ptr<comm::StreamMemOps> mem_ops;
  // The GEMM of each m met so far (weave::Gemm on the window's gathered rows, planned by
  // fused::agm_gemm), re-pointed per call to the call's B, scales and output; one workspace, sized
  // at construction for the largest call's routes.
  // The views each was last pointed at: a call with the same B, scales and output (the usual
  // case: one layer's weights, the window's output) skips set_operands' descriptor encoding.
  // The per-m caches below hold at most kMaxCachedM entries (a bound on the host memory; a
  // dropped m is rebuilt).
  static constexpr std::size_t kMaxCachedM = 64;
  struct CallViews {
    TensorView b, scale_b, c;
    bool same_as(const TensorView& b2, const GemmScales& s, const TensorView& c2) const;
  };
  struct CachedGemm {
    std::unique_ptr<Gemm> gemm;
    CallViews views;
  };
  std::map<int64_t, CachedGemm> gemms;
  // auto with a table naming fused-ce: each m's mode (the table's lookup), made once per m.
  fused::PerMCache<AllGatherGemmMode> call_modes;
  AllGatherGemmMode call_mode(int64_t m);
  // fused-ce: its kernel's arguments for each m met so far (the TMA maps of the gathered rows, B
  // and the output, the grid), re-encoded only when the call's B, scales or output differ from
  // those they were built for; enqueue_fused_ce fills the per-call fields of a copy.
  struct CachedFusedArgs {
    gemm::KernelArgs<fused::AgmRowsParams> args{};
    int grid = 0;
    int block_m = 0;  // the planner's tile (fused/tile_choice.hpp)
    const gemm::GemmKernelEntry<fused::AgmRowsParams>* kernel = nullptr;
    CallViews views;
  };
  std::map<int64_t, CachedFusedArgs> fused_args;
  const CachedFusedArgs& fused_args_for(int64_t m, const TensorView& b, const GemmScales& s, const TensorView& c);
  std::unique_ptr<OwnedDeviceMemory> workspace;
  std::size_t workspace_bytes = 0;
  AllGatherGemmMode last = AllGatherGemmMode::kAuto;
  uint64_t self_test_seed = 0x5eed;

  // Validates, agrees with the other ranks and builds the hosted gathers; no window yet: lay_out
  // adds the op's regions under `prefix` (its own window: "agm"; a shared one: "agm<i>"), then
  // attach takes the window made from the whole layout.
  Impl(comm::Group& g, const AllGatherGemmConfig& config, const fused::AllGatherGemmHooks& hooks = {});
  void lay_out(WindowLayout& layout, const std::string& prefix);
  void attach(const std::shared_ptr<comm::OpWindow>& window);
  static Impl& of(AllGatherGemm& op) { return *op.impl_; }  // tests reach the state through it
  // The op in a window of its own (the public constructor's path), over any group.
  static std::unique_ptr<Impl> create_impl(comm::Group& g, const AllGatherGemmConfig& config,
                                           const fused::AllGatherGemmHooks& hooks = {});
  static std::unique_ptr<AllGatherGemm> create(comm::Group& g, const AllGatherGemmConfig& config,
                                               const fused::AllGatherGemmHooks& hooks = {});
  static std::unique_ptr<AllGatherGemm> wrap(std::unique_ptr<Impl> im);

  AllGatherGemmPlan plan(int64_t m) const;
  void run(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s, const TensorView* out,
           cudaStream_t stream);
  // The same inside a call guard the caller holds (the self-test: its output poison is part of the call).
  void run_in(comm::OpRuntime::CallGuard& guard, int64_t m, const TensorView& a, const TensorView& b,
              const GemmScales& s, const TensorView* out, cudaStream_t stream);
  // The call's GEMM, re-pointed at b, the scales and `c` (checked by weave::Gemm: before any GPU work).
  Gemm& gemm_for(int64_t m, const TensorView& b, const GemmScales& s, const TensorView& c);
  // A call of a gathering mode (every mode but fused-ce): staging, the gathers, the GEMM.
  void enqueue(AllGatherGemmMode mode, int64_t m, const TensorView& a, const GemmScales& s, Gemm& gemm,
               cudaStream_t stream);
  // 1. of every mode: A_r and its scales into this rank's slot (gated: an SM copy that stores
  // nothing once the op gave up, where a slow peer may still be pulling the slot).
  void stage_own_rows(int64_t m, const TensorView& a, const GemmScales& s, bool gated, cudaStream_t stream);
  // fused-ce's call for checked operands: out into `c`.
  void enqueue_fused_ce(int64_t m, const TensorView& a, const TensorView& b, const GemmScales& s, const TensorView& c,
                        cudaStream_t stream);
  char* local(uint64_t off) const { return rt->window().local() + off; }
  // The views' rule for m ("AllGatherGemm::<view>: m must be in 1..m_max, got m").
  void check_view_m(const char* view, int64_t m) const;
  TensorView gathered_a(int64_t m) const;
  TensorView gathered_scale_a(int64_t m) const;
  TensorView slot_a(int64_t m) const;
  TensorView slot_scales(int64_t m) const;
  TensorView output(int64_t m) const;
  void check() const;
  std::string describe() const;
};

}  // namespace weave
