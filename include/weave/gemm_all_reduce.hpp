// weave::GemmAllReduce: the row-parallel linear layer. Every rank r holds A_r [M, K_r] and its K
// shard B_r [N, K_r]; every rank receives out = sum over r of A_r B_r^T, [M, N] bf16, bitwise
// identical on every rank (the sum is formed once per element, in fp32, in rank order 0..world-1,
// from bf16 partials, then rounded to bf16).
//
// Modes (docs/fused.md):
//   gemm-only   control: this rank's partial A_r B_r^T in the output, nothing moves
//   split-nccl  the GEMM into the window, then ncclAllReduce in place (NCCL communicators only;
//               NCCL's own reduction order)
//   split-lsa   the GEMM into the window, then weave's lsa all-reduce (LL / one-shot / two-shot by
//               size), zero-copy
//   split-ce    the same with weave's ce all-reduce (its stores into peers: a gated SM put kernel)
//   fused       one kernel, both legs under the GEMM: rows are owned in bands (band d by rank d);
//               a tile of a peer's band is TMA-stored as a bf16 partial straight into the owner's
//               staging; the owner computes its own band one round later, its epilogue adds the
//               peers' partials in rank order and stores the final tile to itself and every peer
//   fused-rs    MORI's structure, kept as a control arm: the GEMM kernel's epilogue sends every
//               tile (own band too) as a bf16 partial to its owner's staging as chunks finish; a
//               tail kernel then reduces the own band and gathers it to every rank. Bitwise equal
//               to split-lsa. Never chosen by auto; at world 1 it runs (and reports) fused
//   fused-ce    the fused schedule with copy-engine legs: every tile is TMA-stored to this rank's
//               own output rows (a peer band's as a bf16 partial); each peer's copy stream pulls
//               them chunk by chunk into the owner's staging as the chunk flags arrive, and pulls
//               the owner's final chunks back, so no SM stores a byte into a peer. Needs stream
//               memory operations (kUnavailable naming the reason). Bitwise equal to fused; mxfp8
//               runs its native kernel (mx_route bf16 is refused: the route's either/or cannot
//               fork the copy streams from the kernel that runs). Never
//               chosen by auto (the copy chains only pay where SMs matter more than ~10 us per
//               chunk, docs/fused.md); at world 1 it runs (and reports) fused
//   decode      M <= 32 only: weave's decode GEMV forced (the GEMV kernels, memory-bound on
//               B_r) into the window, then weave's lsa all-reduce in place (the low-latency LL
//               protocol at these sizes). Not bitwise equal to split-lsa (the GEMV sums K in
//               another order); bitwise identical on every rank. Needs dense scales (as the GEMV)
//   decode-fused M <= 32 only: decode's two kernels as one (explicit, or auto where its calibration
//               table measured it fastest; the model never chooses it):
//               the GEMV's clusters send their reduced rows as LL lines to every peer as each
//               band finishes, then sum the peers' lines in rank order. Bitwise equal to decode
//               (whose GEMV runs decode-fused's K split wherever decode-fused could run).
//               Runs where every rank's GEMV grid is resident at once (one wave of clusters;
//               kUnavailable at construction otherwise; auto takes the model's choice at the M
//               that do not fit); the window holds
//               2 x world x 32 x N x 4 bytes of LL lines beside the output (auto: only when its
//               table names decode-fused)
//   auto        decode where it was measured faster than split-lsa (bf16 and mxfp8, M <= 16; the
//               ptpc / blockscale GEMV is slower than the tile GEMM there), else fused where the planner says it pays,
//               else split-lsa (the choice and the reason: plan(m)); at world 1 (nothing to
//               reduce) weave::Gemm's route: decode (the GEMV alone) where weave::Gemm takes its
//               GEMV (m <= 8; mxfp8 to 32), else gemm-only;
//               split-nccl when the ranks are not all in one NVLink domain
// A mode that cannot run here raises kUnavailable naming the reason; auto falls back with a log line.
//
// Numerics: fused is bitwise equal to split-lsa and split-ce (same tiles, the own term rounded to
// bf16 as the split path's partial is). exact_own keeps the own term in fp32 (smaller error, then
// no longer equal to split).
//
// Operands per rank: A_r [M, K] (1 <= M <= m_max, any M), B_r [N, K], the scales of weave::Gemm's
// mode `quant` (weave/gemm.hpp): bf16, or e4m3 in ptpc, blockscale and mxfp8 raw/packed. K = K_r is
// the per-rank shard and must be the same on every rank, as N (checked at construction).
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

enum class GemmAllReduceMode : uint8_t {
  kAuto, kGemmOnly, kSplitNccl, kSplitLsa, kSplitCe, kFused, kDecode, kFusedRs, kFusedCe, kDecodeFused
};
std::string_view to_string(GemmAllReduceMode mode) noexcept;
std::optional<GemmAllReduceMode> parse_gemm_all_reduce_mode(std::string_view name) noexcept;  // "fused", ...

struct GemmAllReduceConfig {
  std::int64_t n = 0, k = 0;                     // k: this rank's K shard (the same on every rank)
  std::int64_t m_max = 0;                        // largest M; sizes the window
  ScaleMode quant = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;  // mxfp8 only
  GemmAllReduceMode mode = GemmAllReduceMode::kAuto;
  bool exact_own = false;                        // fused: the own term in fp32 (not bitwise == split)
  int chunks = 0;                                // fused: chunks per band (0: the planner's choice)
  // mxfp8: the bf16 route (docs/fused.md "mxfp8 in the fused operators"): A and B converted
  // exactly to bf16 per call, then the bf16 kernel, or the native kernel for a call whose scales
  // the conversion cannot carry (decided on the GPU, per rank, before any tile leaves). auto: per
  // call by the planner's model; native: never (no workspace). The op allocates bf16 copies of A
  // (m_max x K) and B (N x K) at construction unless this is native.
  MxRoute mx_route = MxRoute::kAuto;
  // auto: a table of the mode measured fastest per M on this machine (`weave bench gemm-ar
  // --calibrate FILE` writes it; src/fused/calibration.hpp has the format); "" = the model. The
  // table must be for this op's quant, N, K_r and world (kInvalidArgument otherwise); every rank
  // must read the same contents (kMismatch).
  std::string calibration;
  // CTAs per rank at most (one per SM; 0: every SM, shared among ranks on one GPU). The fused
  // kernel is persistent and its CTAs wait for the peers: set this to leave SMs free for kernels
  // that must run beside it (another communicator's collectives on the same GPUs, header above).
  // Every rank must pass the same value (kMismatch).
  int max_sms = 0;
  // Modes decode and decode-fused (and auto where it takes decode): the GEMV launched with programmatic dependent
  // launch, under weave::Gemm::set_allow_pdl's contract (no kernel right before the call on its
  // stream writes B). This rank's launch only: ranks need not agree. Off by default.
  bool allow_pdl = false;
  // (Testing hooks, the negative controls among them, live in an internal header, not here.)
};

// What one call of M rows runs and why (pure; `weave plan gemm-ar` prints it).
struct GemmAllReducePlan {
  GemmAllReduceMode mode = GemmAllReduceMode::kSplitLsa;  // resolved (never kAuto)
  int block_m = 128, block_n = 128;
  std::int64_t tiles = 0;         // output tiles per rank
  double waves = 0;               // tiles / CTAs
  int grid = 0;                   // CTAs per rank
  int band_blocks = 0;            // fused: row blocks per band (band d is rank d's)
  int chunks = 0;                 // fused: chunks of the largest band (one flag each per leg)
  int chunk_blocks = 0;           // fused: row blocks per chunk
  int rounds = 0;                 // fused: rounds of this schedule (chunks + 1)
  std::int64_t bytes_rs = 0;      // bytes this rank sends on the reduce-scatter leg (bf16 partials)
  std::int64_t bytes_ag = 0;      // bytes this rank sends on the all-gather leg (final tiles)
  std::int64_t window_bytes = 0;  // the op's window per rank
  double model_gemm_us = 0, model_comm_us = 0, model_split_us = 0, model_fused_us = 0;
  std::string reason;
};

// Window bytes per rank of an op with `config` in a world of `world` ranks (size before allocating).
std::size_t gemm_all_reduce_window_bytes(const GemmAllReduceConfig& config, int world);
// What an op of `config` in a world of `world` ranks would run for m rows on `machine`, and why:
// the planner behind plan(m) without an op or a GPU (`weave plan gemm-ar` and Python's
// plan_gemm_all_reduce call it). An explicit mode is planned as asked; whether this machine can run
// it is the constructor's check. Throws kInvalidArgument naming the rule (the config's rules,
// world, 1 <= m <= m_max, num_sms >= 1, a calibration for another op shape).
GemmAllReducePlan gemm_all_reduce_plan(const GemmAllReduceConfig& config, int world, std::int64_t m,
                                       const FusedPlanMachine& machine = {});

class GemmAllReduce {
 public:
  // "" if `config` can run in a world of `world` ranks, else every rule it breaks.
  static std::string validate(const GemmAllReduceConfig& config, int world);
  // Collective: validates (kInvalidArgument), resolves the mode (kUnavailable with the reason for
  // an explicit mode that cannot run here), agrees across ranks (kMismatch: N, K_r, m_max, quant
  // and mode must be equal everywhere), creates the window.
  GemmAllReduce(Communicator& comm, const GemmAllReduceConfig& config);
  ~GemmAllReduce();
  GemmAllReduce(const GemmAllReduce&) = delete;
  GemmAllReduce& operator=(const GemmAllReduce&) = delete;

  const GemmAllReduceConfig& config() const noexcept;
  GemmAllReducePlan plan(std::int64_t m) const;  // pure
  std::string describe() const;

  // Enqueues one call: out = sum over ranks of A_r B_r^T. a: [m, K] (1 <= m <= m_max; mode decode:
  // m <= 32), b: [N, K], scales per quant (auto at m <= 32 with padded blockscale / mxfp8 scales,
  // which the GEMV cannot read, runs split-lsa). Every rank must call with the same m. Raises a timeout an earlier call
  // recorded (check()) before enqueueing.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream);
  // The same, then a copy of the output into the caller's `out` on `stream` (one cudaMemcpy2DAsync
  // after the call: still only enqueues, graph-capturable). out: [m, N] bf16 on this rank's device,
  // unit column stride, row stride >= N, 16-byte aligned base, no byte inside the op's window (any
  // rank's copy as mapped here). Checked with every other argument before any GPU work:
  // kInvalidArgument naming 'out' and the rule. output(m) still views the window. The copy is
  // this rank's own: ranks need not agree on passing `out`.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out, cudaStream_t stream);
  // The output of the last run of m rows: [m, N] bf16 in the op's window (valid until the next run).
  // m must be that run's m: the op checks only 1 <= m <= m_max, because with CUDA graphs of several
  // M the host cannot know which call ran last (rows past the last call's m are an older call's).
  TensorView output(std::int64_t m) const;
  // The mode the last run took (auto resolves per call).
  GemmAllReduceMode last_mode() const noexcept;

  void check() const;
  // Collective and synchronising: runs m rows of known per-rank values through the op's mode
  // (rank s's A row i is one-hot at a column of its own, so every output element is a sum of one
  // known term per rank) and checks every element on every rank against the closed-form sum; a
  // wrong element whose error is exactly one rank's term is attributed to that source rank.
  SelfTestReport self_test(std::int64_t m = 0);

  struct Impl;

 private:
  friend struct Impl;
  explicit GemmAllReduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave
