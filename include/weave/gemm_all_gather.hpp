// weave::GemmAllGather: every rank r computes its rows C_r = A_r * B^T ([M, N], M rows per rank)
// and every rank receives all of them: out [world * M, N] with rank s's rows at [s*M, (s+1)*M).
// A context-parallel layer's projection (DeepSeek's wkv_gate: bf16 in, fp32 out, K = 7168).
//
// Modes (docs/fused.md):
//   gemm-only   control: the GEMM into this rank's rows of the window, nothing moves
//   split-nccl  the GEMM, then ncclAllGather in place on the window (NCCL communicators only)
//   split-lsa   the GEMM into this rank's rows of the window, then weave's lsa all-gather in
//               place (its planner's algorithm: LL for small blocks, push above): zero-copy
//   split-ce    the same with weave's ce all-gather (its stores into peers: a gated SM put kernel)
//   fused-lsa   one kernel: the GEMM's epilogue TMA-stores every finished tile into its rows on
//               this rank and on every peer (peers in rank-rotated order), counts stored tiles per
//               chunk of rows and publishes a flag per chunk; the kernel ends once every peer's
//               chunks have arrived
//   fused-ce    the same kernel storing to this rank's rows only; each chunk's flag triggers the
//               receivers' copy-engine pulls of it while the GEMM runs (stream memory operations,
//               one copy stream per peer): the gather costs no SM time (explicit only; auto does
//               not take it)
//   auto        fused-lsa where the planner says it pays, else split-lsa (split-nccl across NVLink
//               domains, gemm-only at world 1; the choice and the reason: plan(m))
// A mode that cannot run here raises kUnavailable naming the reason; auto then falls back with a
// log line. The GEMM of gemm-only and the split modes is weave::Gemm's where that is not one pass
// of whole tiles (small m, long K: its decode GEMV or its K split; plan(m).gemm_gemv and
// gemm_split_k); elsewhere, and always in the fused modes, the op's tile, so fused and split give
// the same bits there.
//
// Operands: A_r [M, K] (M <= m_max, any M >= 1), B [N, K] identical on every rank, the scales of
// weave::Gemm's mode `quant` (weave/gemm.hpp). Inputs bf16 (output bf16 or fp32) or e4m3 in ptpc,
// blockscale and mxfp8 raw/packed (output bf16).
//
// Verbs (as every weave op): validate() is pure; the constructor is collective (every rank must ask
// for the same op: kMismatch otherwise) and allocates the op's window at capacity; run() only
// enqueues (no allocation, no host sync, graph-capturable); output(m) is a view into the window,
// valid until the next run(), or run() copies it into a caller's `out` (stream-ordered after the
// call); self_test() moves known per-rank values through the real path;
// check() raises a timeout a device wait recorded. One op is used by one host thread at a time.
// Streams: every op of a rank (this one, its collectives, any other weave op on the same
// communicator) runs its calls in the order the host issued them; a call on another stream than
// the rank's previous call waits for it on the GPU (no host sync). Not for calls inside CUDA
// graphs, whose own order applies. Ranks must issue their ops in the same order.
// Sharing the GPUs: a fused call's CTAs stay resident while they wait for the peers' flags
// (bounded by the communicator's timeout). Work the peers must finish before they reach this call
// (an NCCL collective of another communicator, e.g. an EP or DP group, or any kernel queued on a
// peer ahead of the call) may need the SMs this grid holds; where ranks issue such work in
// different orders both sides wait until the timeout and check() raises kTimeout naming the
// peer. Issue cross-communicator work in the same order on every rank, leave it SMs with the
// config's max_sms (the fused grid then holds at most that many per rank), or use a split mode.
// PDL: the fused kernels start only after the previous kernel on the stream completed, and a
// kernel launched after a call with programmatic stream serialization must call
// cudaGridDependencySynchronize() before it reads the output (the split modes' lsa kernels let
// the next grid launch early: docs/memory_ordering.md "pdl").
// Errors: a device wait that gave up (a peer that never came, or gave up itself), ranks that
// disagree on m, or a GEMM pipeline stall inside the op's kernel make check() (and the next run())
// raise; so does an error that escaped a call after its argument checks (kInternal: the op's
// words may be half-advanced); the op is unusable from then on: destroy it on every rank.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "weave/collectives.hpp"
#include "weave/communicator.hpp"
#include "weave/export.hpp"
#include "weave/fused_plan.hpp"
#include "weave/gemm.hpp"
#include "weave/tensor.hpp"
#include "weave/types.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace weave WEAVE_API {

enum class GemmAllGatherMode : uint8_t { kAuto, kGemmOnly, kSplitNccl, kSplitLsa, kSplitCe, kFusedLsa, kFusedCe };
std::string_view to_string(GemmAllGatherMode mode) noexcept;
std::optional<GemmAllGatherMode> parse_gemm_all_gather_mode(std::string_view name) noexcept;  // "fused-lsa", ...

struct GemmAllGatherConfig {
  std::int64_t n = 0, k = 0;
  std::int64_t m_max = 0;                        // largest M per rank; sizes the window
  ScaleMode quant = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;  // mxfp8 only
  DType out_dtype = DType::kBF16;                // bf16 or fp32 (fp32 only for bf16 inputs)
  GemmAllGatherMode mode = GemmAllGatherMode::kAuto;
  // mxfp8: the bf16 route (docs/fused.md "mxfp8 in the fused operators"): A and B converted
  // exactly to bf16 per call, then the bf16 kernel, or the native kernel for a call whose scales
  // the conversion cannot carry (decided on the GPU, per rank, before any tile leaves). auto: per
  // call by the planner's model (fused-ce: always native); native: never (no workspace). The op allocates bf16 copies of A
  // (m_max x K) and B (N x K) at construction unless this is native.
  MxRoute mx_route = MxRoute::kAuto;
  // auto: a table of the mode measured fastest per M on this machine (`weave bench gemm-ag
  // --calibrate FILE` writes it; src/fused/calibration.hpp has the format); "" = the model. The
  // table must be for this op's quant, out dtype, N, K and world (kInvalidArgument otherwise); every
  // rank must read the same contents (kMismatch).
  std::string calibration;
  // CTAs per rank at most (one per SM; 0: every SM, shared among ranks on one GPU). The fused
  // kernel is persistent and its CTAs wait for the peers: set this to leave SMs free for kernels
  // that must run beside it (another communicator's collectives on the same GPUs, header above).
  // Every rank must pass the same value (kMismatch).
  int max_sms = 0;
  // (Testing hooks, the negative controls among them, live in an internal header, not here.)
};

// What one call of M rows runs and why (pure; `weave plan gemm-ag` prints it).
struct GemmAllGatherPlan {
  GemmAllGatherMode mode = GemmAllGatherMode::kSplitLsa;  // resolved (never kAuto)
  int block_m = 128, block_n = 128;
  std::int64_t tiles = 0;        // output tiles per rank
  double waves = 0;              // tiles / CTAs
  int grid = 0;                  // CTAs per rank
  int chunks = 0;                // fused: chunks of rows, one flag each
  std::int64_t bytes_per_peer = 0;  // this rank's rows (M x N x out bytes) sent to each peer
  std::int64_t window_bytes = 0;    // the op's window per rank
  double model_gemm_us = 0, model_comm_us = 0, model_split_us = 0, model_fused_us = 0;
  // The GEMM of gemm-only and the split modes where weave::Gemm would not run one pass of the tile
  // above (small m, long K): its decode GEMV (m <= 8, ranks on GPUs of their own), or its K split
  // over split_k ranges summed in split order. Fused modes never (their epilogue needs final tiles).
  bool gemm_gemv = false;
  int gemm_split_k = 1;
  std::string reason;
};

// Window bytes per rank of an op with `config` in a world of `world` ranks (size before allocating).
std::size_t gemm_all_gather_window_bytes(const GemmAllGatherConfig& config, int world);
// What an op of `config` in a world of `world` ranks would run for m rows on `machine`, and why:
// the planner behind plan(m) without an op or a GPU (`weave plan gemm-ag` and Python's
// plan_gemm_all_gather call it). An explicit mode is planned as asked; whether this machine can run
// it is the constructor's check. Throws kInvalidArgument naming the rule (the config's rules,
// world, 1 <= m <= m_max, num_sms >= 1, a calibration for another op shape).
GemmAllGatherPlan gemm_all_gather_plan(const GemmAllGatherConfig& config, int world, std::int64_t m,
                                       const FusedPlanMachine& machine = {});

class GemmAllGather {
 public:
  // "" if `config` can run in a world of `world` ranks, else every rule it breaks.
  static std::string validate(const GemmAllGatherConfig& config, int world);
  // Collective: validates (kInvalidArgument), resolves the mode (kUnavailable with the reason for
  // an explicit mode that cannot run here), agrees across ranks (kMismatch), creates the window.
  GemmAllGather(Communicator& comm, const GemmAllGatherConfig& config);
  ~GemmAllGather();
  GemmAllGather(const GemmAllGather&) = delete;
  GemmAllGather& operator=(const GemmAllGather&) = delete;

  const GemmAllGatherConfig& config() const noexcept;
  GemmAllGatherPlan plan(std::int64_t m) const;  // pure
  std::string describe() const;

  // Enqueues one call: out = all ranks' A_s B^T. a: [m, K] (1 <= m <= m_max), b: [N, K], scales per
  // quant (rank-0 views for bf16). Every rank must call with the same m. Raises a timeout an
  // earlier call recorded (check()) before enqueueing.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream);
  // The same, then a copy of the output into the caller's `out` on `stream` (one cudaMemcpy2DAsync
  // after the call: still only enqueues, graph-capturable). out: [world * m, N] of out_dtype on this
  // rank's device, unit column stride, row stride >= N, 16-byte aligned base, no byte inside the
  // op's window (any rank's copy as mapped here). Checked with every other argument before any GPU
  // work: kInvalidArgument naming 'out' and the rule. output(m) still views the window. The copy
  // is this rank's own: ranks need not agree on passing `out`.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out, cudaStream_t stream);
  // The output of the last run of m rows: [world * m, N] in the op's window (valid until the next run).
  // m must be that run's m (rank s's rows start at s * m): the op checks only 1 <= m <= m_max,
  // because with CUDA graphs of several M the host cannot know which call ran last.
  TensorView output(std::int64_t m) const;
  // The mode the last run took (auto resolves per call).
  GemmAllGatherMode last_mode() const noexcept;

  void check() const;
  // Collective and synchronising: runs m rows of known per-rank values (each rank's A encodes its
  // rank) through the op's mode and checks every source rank's rows on every rank against a
  // reference computed on the host; ok = every rank saw every source right.
  SelfTestReport self_test(std::int64_t m = 0);
  // The same, then checks that every rank passed the same B (and scale_b, if given: its raw or
  // packed scale tensor): each rank fingerprints its tensors on the GPU, the fingerprints are
  // compared, and ok is false on every rank if any differs, naming the ranks outside the majority
  // (at W = 2 both fingerprints: the odd one cannot be told). Collective and synchronising.
  SelfTestReport self_test(std::int64_t m, TensorView b, TensorView scale_b = {});

  struct Impl;

 private:
  friend struct Impl;
  explicit GemmAllGather(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave
