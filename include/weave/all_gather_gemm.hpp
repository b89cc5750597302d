// weave::AllGatherGemm: the column-parallel linear layer of sequence parallelism (Megatron SP,
// torchtitan, vLLM async-TP; PyTorch's fused_all_gather_matmul). Every rank r holds its rows of the
// activations A_r [m, K] and the column shard B [N, K]; every rank computes
//   out = [A_0; A_1; ...; A_{W-1}] B^T,  [W m, N], rank s's rows at [s m, (s + 1) m),
// and can keep the gathered A (and its scales) for the backward pass or the next layer.
// Activations travel as the GEMM consumes them: e4m3 plus their scales in the fp8 modes (half the
// bytes of bf16), bf16 in bf16 mode.
//
// Modes (docs/fused.md "AllGatherGemm"):
//   gemm-only   control: the GEMM over the gathered region with only this rank's rows put there;
//               nothing moves (the peers' rows are whatever the region held)
//   split-nccl  ncclAllGather of A's rows and of their scales (one NCCL group), then the GEMM
//               (NCCL communicators only)
//   split-lsa   weave's lsa all-gather of the rows and of the scales, in place in the op's window
//               (its planner's algorithm: LL for small blocks, push above), then the GEMM
//   split-ce    the same with weave's ce all-gather
//   fused-ce    the GEMM consumes the rows as they land: copy engines pull the peers' rows and
//               scales chunk by chunk into the window while the GEMM kernel runs its own rows'
//               tiles first, each tile waiting (bounded) for the chunks it reads. bf16, ptpc and
//               blockscale (raw), bf16 output; the planner's tile, no K split (docs/fused.md "AllGatherGemm")
//   auto        split-lsa (split-nccl when the ranks are not all in one NVLink domain, gemm-only at
//               world 1); with a calibration table (config.calibration, `weave bench ag-gemm
//               --calibrate`), per call the mode the table measured fastest near m: split-lsa or
//               fused-ce. Without a table auto never takes fused-ce (its model is not calibrated on
//               NVLink). The choice and the reason: plan(m)
// In the split modes the GEMM is weave::Gemm's for [world m, N, K] as its planner chooses it
// (tile, grid, the mxfp8 and blockscale routes, its decode route at world x m <= 32; no K split),
// planned for this rank's share of the SMs, so out is bitwise weave::Gemm's output over the
// gathered A. fused-ce runs the planner's tile (plan(m)) over the same rows: bitwise weave::Gemm's output at
// that tile. A mode that cannot run here raises kUnavailable naming the reason.
//
// Operands per rank: A_r [m, K] (1 <= m <= m_max; the same m on every rank), B [N, K] identical on
// every rank, the scales of weave::Gemm's mode `quant` for A_r's m rows and for B. A's scales travel
// with their rows, so they must be per row: ptpc (fp32 [m]), blockscale with scale_layout raw (fp32
// [m, K/128]) and mxfp8 with scale_layout raw (ue8m0 [m, K/32]); blockscale mn-major and mxfp8
// packed interleave the rows of several ranks and are refused (kInvalidArgument naming the layout).
// A and its scales may be anywhere on this rank's GPU (any row stride); the op copies them into
// its window first, unless they already are this rank's slot there (input(m) / input_scales(m):
// then nothing is copied).
//
// Verbs, streams, sharing the GPUs and errors: as weave::GemmAllGather (weave/gemm_all_gather.hpp):
// validate() is pure; the constructor is collective (kMismatch when ranks ask for different ops) and
// allocates the window at capacity; run() only enqueues (graph-capturable); output(m) and
// gathered_a(m) view the window until the next run(); check() raises a recorded timeout or
// mismatch; self_test() moves known values through the real path. Ranks that disagree on m are
// found by the lsa and ce gathers (the gathered slots sit at other window offsets, and the LL
// protocol's lines carry the byte count: kMismatch on every rank); over NCCL (split-nccl) the
// counts must agree, as for any NCCL collective.
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

enum class AllGatherGemmMode : uint8_t { kAuto, kGemmOnly, kSplitNccl, kSplitLsa, kSplitCe, kFusedCe };
std::string_view to_string(AllGatherGemmMode mode) noexcept;
std::optional<AllGatherGemmMode> parse_all_gather_gemm_mode(std::string_view name) noexcept;  // "split-lsa", ...

struct AllGatherGemmConfig {
  std::int64_t n = 0, k = 0;
  std::int64_t m_max = 0;                        // largest m per rank; sizes the window
  ScaleMode quant = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;  // raw only (A's scales travel with their rows)
  DType out_dtype = DType::kBF16;                // bf16 or fp32 (fp32 only for bf16 inputs)
  AllGatherGemmMode mode = AllGatherGemmMode::kAuto;
  MxRoute mx_route = MxRoute::kAuto;             // mxfp8: as GemmPlanOverrides::mx_route (weave::Gemm's routes)
  // auto only: a table of the mode measured fastest per m on this machine (`weave bench ag-gemm
  // --calibrate FILE` writes it; src/fused/calibration.hpp has the format); "" = the model. It must
  // be for this op's quant, out dtype, N, K and world (kInvalidArgument otherwise); every rank must
  // read the same contents (kMismatch). Rows naming fused-ce are taken only where fused-ce can run
  // (its kernel built for the quant, the ranks in one NVLink domain, stream memory operations on
  // every rank): the op then also holds fused-ce's words and copy streams.
  std::string calibration;
  int max_sms = 0;                               // CTAs per rank at most (the gathers' and the GEMM's)
};

// What one call of m rows per rank runs and why (pure; `weave plan ag-gemm` prints it).
struct AllGatherGemmPlan {
  AllGatherGemmMode mode = AllGatherGemmMode::kSplitLsa;  // resolved (never kAuto)
  std::string gemm_kernel;        // the GEMM's kernel (weave::Gemm's planner: an instance, or "gemv")
  std::string gemm_reason;        // why the planner chose it
  int block_m = 0, block_n = 0;   // its tile (0 for the decode GEMV)
  int gemm_split_k = 1;           // its K split (weave::Gemm's, where the tiles leave SMs idle); fused-ce: 1
  std::int64_t rows = 0;          // rows of the GEMM: world x m
  std::int64_t tiles = 0;         // output tiles per rank (0 for the decode GEMV)
  double waves = 0;               // tiles / CTAs
  int grid = 0;                   // CTAs per rank
  std::int64_t bytes_per_peer = 0;  // this rank's rows and scales (m x (K x element + scale bytes)) sent to each peer
  std::int64_t window_bytes = 0;    // the op's window per rank
  double model_gemm_us = 0, model_comm_us = 0, model_split_us = 0;
  double model_fused_us = 0;      // fused-ce: max(GEMM, gather) + one chunk's pull (0 where it cannot run)
  std::string reason;
};

// Window bytes per rank of an op with `config` in a world of `world` ranks (size before allocating;
// auto reads config.calibration: a table naming fused-ce adds fused-ce's words).
std::size_t all_gather_gemm_window_bytes(const AllGatherGemmConfig& config, int world);
// What an op of `config` in a world of `world` ranks would run for m rows per rank on `machine`, and
// why, without an op or a GPU. Throws kInvalidArgument naming the rule (the config's, world,
// 1 <= m <= m_max, num_sms >= 1, a calibration for another op shape).
AllGatherGemmPlan all_gather_gemm_plan(const AllGatherGemmConfig& config, int world, std::int64_t m,
                                       const FusedPlanMachine& machine = {});

class AllGatherGemm {
 public:
  // "" if `config` can run in a world of `world` ranks, else every rule it breaks.
  static std::string validate(const AllGatherGemmConfig& config, int world);
  // Collective: validates (kInvalidArgument), resolves the mode (kUnavailable with the reason),
  // agrees across ranks (kMismatch), creates the window.
  AllGatherGemm(Communicator& comm, const AllGatherGemmConfig& config);
  ~AllGatherGemm();
  AllGatherGemm(const AllGatherGemm&) = delete;
  AllGatherGemm& operator=(const AllGatherGemm&) = delete;

  const AllGatherGemmConfig& config() const noexcept;
  AllGatherGemmPlan plan(std::int64_t m) const;  // pure
  std::string describe() const;

  // Enqueues one call: out = [A_0; ...; A_{W-1}] B^T. a: [m, K] with 1 <= m <= m_max, b: [N, K],
  // scales per quant (scale_a: this rank's m rows). Every rank must call with the same m. Raises a
  // timeout or mismatch an earlier call recorded (check()) before enqueueing.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream);
  // The same with the GEMM storing straight into the caller's `out` (no copy): [world * m, N] of
  // out_dtype on this rank's device, unit column stride, row stride >= N and a multiple of 16
  // bytes, 16-byte aligned base, no byte inside the op's window. output(m) then holds nothing of
  // this call.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out, cudaStream_t stream);
  // The output of the last run of m rows without `out`: [world * m, N] in the op's window.
  TensorView output(std::int64_t m) const;
  // The gathered activations of the last run of m rows: [world * m, K] (bf16 or e4m3) and their
  // scales ([world * m] fp32 for ptpc, [world * m, K/128] fp32 for blockscale, [world * m, K/32]
  // ue8m0 for mxfp8; empty for bf16), in the op's window, valid until the next run(). In gemm-only
  // only this rank's rows are in it.
  TensorView gathered_a(std::int64_t m) const;
  TensorView gathered_scale_a(std::int64_t m) const;
  // This rank's slot of the gathered region for a call of m rows ([m, K] and its scales): a caller
  // that writes A_r there (stream-ordered before run) and passes these views saves the copy. Write
  // it only on the stream of the op's calls, after the previous call was enqueued.
  TensorView input(std::int64_t m) const;
  TensorView input_scales(std::int64_t m) const;
  AllGatherGemmMode last_mode() const noexcept;

  void check() const;
  // Collective and synchronising: m rows of known per-rank values (each rank's A encodes its rank)
  // through the op's mode, every source rank's rows checked on every rank against the closed form;
  // ok = every rank saw every source right. m = 0: the op's choice.
  SelfTestReport self_test(std::int64_t m = 0);

  struct Impl;

 private:
  friend struct Impl;
  explicit AllGatherGemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave
