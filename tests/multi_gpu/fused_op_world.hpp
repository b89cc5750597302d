// The four fused operators as the multi-GPU tests that treat them alike see them (graph replays,
// back-to-back calls with a delayed rank, a PDL consumer, the randomised soak): one trait each,
// over real NCCL communicators, bf16 operands. A trait T gives
//   Op, Config, Mode, Hooks   the op, its config, its modes and its internal testing hooks
//   kName, kShort             "GemmAllReduce", "gemm-ar" (test output, not-run lines)
//   kBPerRank                 each rank its own B (the reducing ops) or one B on every rank
//   kSplitLsa                 the mode every other one is held to
//   modes()                   every mode the tests run (gemm-only, which moves nothing, is the
//                             self-tests' control)
//   runs(mode, w, m)          whether `mode` takes a call of m rows at world w
//   out_rows(w, m)            rows of this rank's output of a call of m rows
//   bitwise_to_split(ran, w)  whether a call that ran `ran` gives split-lsa's bits
//   split_gemm_differs(split, ran, m)  (optional) split-lsa's GEMM at m is not the one `ran` runs
//   rows_peers_read(mode, w, m, rank)  rows peers may read after this rank's call ended
//   config(mode, n, k, m_max), make(c, config, hooks = {})
//   reference(c, out, p, a, b, st)  this rank's output against an independent reference: every
//                             rank's CUDA-core GEMM (gpu_reference_gemm), combined by NCCL in fp32
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "fused/ag_gemm/impl.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused/reduce_scatter/impl.hpp"
#include "fused_support.hpp"
#include "support/fused_output_rows.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/all_gather_gemm.hpp"
#include "weave/communicator.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/gemm_reduce_scatter.hpp"
#include "weave/reference.hpp"

namespace weave::test {

// An op with the internal testing hooks (the negative controls, a start near the epoch wrap; the
// defaults make it the public constructor's op), over its own NCCL group, which the op then owns
// as the public constructor's does. Collective.
template <class Op, class Config, class Hooks>
std::unique_ptr<Op> make_with_hooks(Communicator& c, const Config& cfg, const Hooks& hooks) {
  std::shared_ptr<comm::Group> g = comm::nccl_group(c);
  std::unique_ptr<Op> op = Op::Impl::create(*g, cfg, hooks);
  Op::Impl::of(*op).owned_group = std::move(g);
  return op;
}

// The independent references (fused_op_world.cu): `out` (this rank's output of the call of
// p.m rows, bf16) against every rank's gpu_reference_gemm of its own A and B, in fp32 ...
// ... summed by ncclAllReduce (with the terms' magnitudes: reduced_gemm_tolerance's bound);
ref::Comparison all_reduced_reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                      const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st);
// ... reduce-scattered by ncclReduceScatter (this rank's band of p.m / world rows);
ref::Comparison reduce_scattered_reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                           const bench::DeviceOperand& a, const bench::DeviceOperand& b,
                                           cudaStream_t st);
// ... gathered by ncclAllGather (world x p.m rows, rank s's at s x p.m; B the same on every rank).
ref::Comparison gathered_reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                   const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st);

// What every world's trait shares: the op's types, its bf16 config and its construction with hooks.
template <class OpT, class ConfigT, class ModeT, class HooksT>
struct FusedWorldBase {
  using Op = OpT;
  using Config = ConfigT;
  using Mode = ModeT;
  using Hooks = HooksT;
  static Config config(Mode mode, int64_t n, int64_t k, int64_t m_max) {
    return fused_op_config<Config>(ScaleMode::kBF16, mode, n, k, m_max);
  }
  static std::unique_ptr<Op> make(Communicator& c, const Config& cfg, const Hooks& h = {}) {
    return make_with_hooks<Op>(c, cfg, h);
  }
};

struct ArWorld : FusedWorldBase<GemmAllReduce, GemmAllReduceConfig, GemmAllReduceMode, fused::GemmAllReduceHooks> {
  static constexpr const char* kName = "GemmAllReduce";
  static constexpr const char* kShort = "gemm-ar";
  static constexpr bool kBPerRank = true;
  static constexpr Mode kSplitLsa = Mode::kSplitLsa;
  static std::vector<Mode> modes() {
    return {Mode::kFused,   Mode::kFusedRs,   Mode::kFusedCe, Mode::kSplitLsa,     Mode::kSplitCe,
            Mode::kSplitNccl, Mode::kDecode,  Mode::kDecodeFused, Mode::kAuto};
  }
  static bool is_decode(Mode mode) { return mode == Mode::kDecode || mode == Mode::kDecodeFused; }
  static bool runs(Mode mode, int, int64_t m) { return !is_decode(mode) || m <= 32; }
  static int64_t out_rows(int, int64_t m) { return m; }
  // decode's GEMV (decode-fused's too) sums K in another order; NCCL's ring rounds each partial sum
  // to bf16 past two ranks.
  static bool bitwise_to_split(Mode ran, int w) { return !is_decode(ran) && (ran != Mode::kSplitNccl || w <= 2); }
  static RowRange rows_peers_read(Mode mode, int w, int64_t m, int rank) {
    return gemm_all_reduce_rows_peers_read(mode, w, m, rank);
  }
  static ref::Comparison reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                   const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st) {
    return all_reduced_reference(c, out, p, a, b, st);
  }
};

struct AgWorld : FusedWorldBase<GemmAllGather, GemmAllGatherConfig, GemmAllGatherMode, fused::GemmAllGatherHooks> {
  static constexpr const char* kName = "GemmAllGather";
  static constexpr const char* kShort = "gemm-ag";
  static constexpr bool kBPerRank = false;
  static constexpr Mode kSplitLsa = Mode::kSplitLsa;
  static std::vector<Mode> modes() {
    return {Mode::kFusedLsa, Mode::kFusedCe, Mode::kSplitLsa, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto};
  }
  static bool runs(Mode, int, int64_t) { return true; }
  static int64_t out_rows(int w, int64_t m) { return w * m; }
  static bool bitwise_to_split(Mode, int) { return true; }  // a gather moves bytes
  // ... of the same GEMM: at small m split-lsa runs weave::Gemm's GEMV or K split, the fused modes their tile.
  static bool split_gemm_differs(Op& split, Mode ran, int64_t m) {
    const GemmAllGatherPlan sp = split.plan(m);
    return (sp.gemm_gemv || sp.gemm_split_k > 1) && (ran == Mode::kFusedLsa || ran == Mode::kFusedCe);
  }
  static RowRange rows_peers_read(Mode mode, int, int64_t m, int rank) {
    return gemm_all_gather_rows_peers_read(mode, m, rank);
  }
  static ref::Comparison reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                   const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st) {
    return gathered_reference(c, out, p, a, b, st);
  }
};

struct RsWorld : FusedWorldBase<GemmReduceScatter, GemmReduceScatterConfig, GemmReduceScatterMode, fused::GemmAllReduceHooks> {
  static constexpr const char* kName = "GemmReduceScatter";
  static constexpr const char* kShort = "gemm-rs";
  static constexpr bool kBPerRank = true;
  static constexpr Mode kSplitLsa = Mode::kSplitLsa;
  static std::vector<Mode> modes() {
    return {Mode::kFused, Mode::kSplitLsa, Mode::kSplitCe, Mode::kSplitNccl, Mode::kAuto};
  }
  // m a multiple of the world; fused's bands whole tiles (a multiple of world x 128).
  static bool runs(Mode mode, int w, int64_t m) {
    return m % w == 0 && (mode != Mode::kFused || w == 1 || m % (128 * w) == 0);
  }
  static int64_t out_rows(int w, int64_t m) { return m / w; }
  static bool bitwise_to_split(Mode ran, int w) { return ran != Mode::kSplitNccl || w <= 2; }
  static RowRange rows_peers_read(Mode, int, int64_t, int) { return {}; }  // no copy-engine pulls
  static ref::Comparison reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                   const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st) {
    return reduce_scattered_reference(c, out, p, a, b, st);
  }
};

struct AgmWorld : FusedWorldBase<AllGatherGemm, AllGatherGemmConfig, AllGatherGemmMode, fused::AllGatherGemmHooks> {
  static constexpr const char* kName = "AllGatherGemm";
  static constexpr const char* kShort = "ag-gemm";
  static constexpr bool kBPerRank = false;
  static constexpr Mode kSplitLsa = Mode::kSplitLsa;
  static std::vector<Mode> modes() {
    return {Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedCe, Mode::kSplitNccl, Mode::kAuto};
  }
  static bool runs(Mode, int, int64_t) { return true; }
  static int64_t out_rows(int w, int64_t m) { return w * m; }
  // The split modes' gathers move bytes, then one GEMM of the planner's tile: split-lsa's bits.
  // fused-ce runs its own kernel at the planner's tile: held to the reference's bound.
  static bool bitwise_to_split(Mode ran, int) { return ran != Mode::kFusedCe; }
  static RowRange rows_peers_read(Mode, int, int64_t, int) { return {}; }
  // The output is [A_0; ...; A_{W-1}] B^T: every rank's own GEMM, gathered.
  static ref::Comparison reference(Communicator& c, const TensorView& out, const GemmProblem& p,
                                   const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t st) {
    return gathered_reference(c, out, p, a, b, st);
  }
};

}  // namespace weave::test
