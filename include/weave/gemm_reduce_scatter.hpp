// weave::GemmReduceScatter: the row-parallel linear layer of sequence parallelism (Megatron SP,
// torchtitan, vLLM async-TP; PyTorch's fused_matmul_reduce_scatter). Every rank r holds A_r [M, K_r]
// and its K shard B_r [N, K_r]; rank r receives rows [r M/W, (r+1) M/W) of sum over ranks of
// A_q B_q^T, [M/W, N] bf16 (M a multiple of the world W). Each element is summed once, in fp32, in
// rank order 0..W-1, from bf16 partials, then rounded to bf16: the same numbers GemmAllReduce gives
// for those rows, bitwise, in every mode but split-nccl.
//
// It is GemmAllReduce without the gather leg (docs/fused.md "GemmReduceScatter"): the same window,
// GEMM kernels, schedule and protocol, so everything said in weave/gemm_all_reduce.hpp about
// verbs, streams, sharing the GPUs, PDL and errors holds here too.
//
// Modes:
//   gemm-only   control: this rank's partial rows in the output, nothing moves
//   split-nccl  the GEMM into the window, then ncclReduceScatter in place (NCCL communicators only;
//               NCCL's own reduction order)
//   split-lsa   the GEMM into the window, then weave's lsa reduce-scatter in place (LL / push)
//   split-ce    the same with weave's ce reduce-scatter
//   fused       one kernel: rows are owned in bands (band d = rank d's M/W rows); a tile of a peer's
//               band is TMA-stored as a bf16 partial straight into the owner's staging; the owner
//               computes its own band one round later and its epilogue adds the peers' partials in
//               rank order. Needs M a multiple of W x 128 (bands of whole 128-row tiles)
//   auto        fused where M allows it and the planner says it pays, else split-lsa (the choice and
//               the reason: plan(m)); gemm-only at world 1; split-nccl when the ranks are not all in
//               one NVLink domain. A calibration table (`weave bench gemm-rs --calibrate FILE`)
//               replaces the model.
// A mode that cannot run here raises kUnavailable naming the reason.
//
// Operands per rank as GemmAllReduce's: A_r [M, K] (1 <= M <= m_max, M % W == 0), B_r [N, K],
// the scales of weave::Gemm's mode `quant` (bf16, or e4m3 in ptpc, blockscale and mxfp8 raw/packed).
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

enum class GemmReduceScatterMode : uint8_t { kAuto, kGemmOnly, kSplitNccl, kSplitLsa, kSplitCe, kFused };
std::string_view to_string(GemmReduceScatterMode mode) noexcept;
std::optional<GemmReduceScatterMode> parse_gemm_reduce_scatter_mode(std::string_view name) noexcept;

struct GemmReduceScatterConfig {
  std::int64_t n = 0, k = 0;                     // k: this rank's K shard (the same on every rank)
  std::int64_t m_max = 0;                        // largest M (all ranks' rows); sizes the window
  ScaleMode quant = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;  // mxfp8 only
  GemmReduceScatterMode mode = GemmReduceScatterMode::kAuto;
  bool exact_own = false;                        // fused: the own term in fp32 (not bitwise == split)
  int chunks = 0;                                // fused: chunks per band (0: the planner's choice)
  MxRoute mx_route = MxRoute::kAuto;             // mxfp8: as GemmAllReduceConfig::mx_route
  std::string calibration;                       // auto: a `weave bench gemm-rs --calibrate` table
  int max_sms = 0;                               // CTAs per rank at most (as GemmAllReduceConfig's)
};

// What one call of M rows runs and why (pure; `weave plan gemm-rs` prints it).
struct GemmReduceScatterPlan {
  GemmReduceScatterMode mode = GemmReduceScatterMode::kSplitLsa;  // resolved (never kAuto)
  int block_m = 128, block_n = 128;
  std::int64_t tiles = 0;         // output tiles per rank (the whole M: every rank computes a partial of every row)
  double waves = 0;               // tiles / CTAs
  int grid = 0;                   // CTAs per rank
  int band_blocks = 0;            // fused: row blocks per band (band d is rank d's)
  int chunks = 0;                 // fused: chunks per band (one flag each)
  int chunk_blocks = 0;           // fused: row blocks per chunk
  int rounds = 0;                 // fused: rounds of this schedule (chunks + 1)
  std::int64_t bytes_rs = 0;      // bytes this rank sends (bf16 partials of the peers' rows)
  std::int64_t window_bytes = 0;  // the op's window per rank
  double model_gemm_us = 0, model_comm_us = 0, model_split_us = 0, model_fused_us = 0;
  std::string reason;
};

// Window bytes per rank of an op with `config` in a world of `world` ranks (size before allocating).
std::size_t gemm_reduce_scatter_window_bytes(const GemmReduceScatterConfig& config, int world);
// What an op of `config` in a world of `world` ranks would run for m rows on `machine`, and why,
// without an op or a GPU. Throws kInvalidArgument naming the rule (the config's, world,
// 1 <= m <= m_max, m % world == 0, num_sms >= 1).
GemmReduceScatterPlan gemm_reduce_scatter_plan(const GemmReduceScatterConfig& config, int world, std::int64_t m,
                                               const FusedPlanMachine& machine = {});

class GemmReduceScatter {
 public:
  // "" if `config` can run in a world of `world` ranks, else every rule it breaks.
  static std::string validate(const GemmReduceScatterConfig& config, int world);
  // Collective: validates (kInvalidArgument), resolves the mode (kUnavailable with the reason),
  // agrees across ranks (kMismatch), creates the window.
  GemmReduceScatter(Communicator& comm, const GemmReduceScatterConfig& config);
  ~GemmReduceScatter();
  GemmReduceScatter(const GemmReduceScatter&) = delete;
  GemmReduceScatter& operator=(const GemmReduceScatter&) = delete;

  const GemmReduceScatterConfig& config() const noexcept;
  GemmReduceScatterPlan plan(std::int64_t m) const;  // pure
  std::string describe() const;

  // Enqueues one call: this rank's M/W rows of sum over ranks of A_q B_q^T. a: [m, K] with
  // 1 <= m <= m_max and m % world == 0 (mode fused: m % (world x 128) == 0), b: [N, K], scales per
  // quant. Every rank must call with the same m. Raises a timeout an earlier call recorded.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, cudaStream_t stream);
  // The same, then a copy of the output into the caller's `out`: [m / world, N] bf16 on this
  // rank's device, unit column stride, row stride >= N, 16-byte aligned, outside the op's window.
  void run(std::int64_t m, TensorView a, TensorView b, GemmScales scales, TensorView out, cudaStream_t stream);
  // This rank's rows of the last run of m rows: [m / world, N] bf16 in the op's window (valid
  // until the next run; m must be that run's m).
  TensorView output(std::int64_t m) const;
  GemmReduceScatterMode last_mode() const noexcept;

  void check() const;
  // Collective and synchronising: m rows of known per-rank values through the op's mode; every
  // element of every rank's rows checked against the closed-form sum, errors attributed to the
  // source rank whose term is missing (as GemmAllReduce::self_test). m = 0: the op's choice.
  SelfTestReport self_test(std::int64_t m = 0);

  struct Impl;

 private:
  friend struct Impl;
  explicit GemmReduceScatter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weave
