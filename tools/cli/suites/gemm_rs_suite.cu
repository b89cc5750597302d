// `weave bench gemm-rs`: weave::GemmReduceScatter's modes against each other, against cuBLASLt's
// GEMM and (--devices) against cuBLASLt + NCCL, per M (the total rows). Every rank r holds
// A_r [M, K_r] and its own B_r [N, K_r]; rank r receives rows [r M/W, (r+1) M/W) of
// sum_q A_q B_q^T, [M/W, N] bf16. This file is the operator's trait of the fused-suite engine
// (fused_suite_engine.cu: inputs, timing, checks, rows; row_parallel_suite.hpp: what it shares
// with gemm-ar) and the subcommand's help, which lists the arms and worlds.
//
// What is gemm-rs's own:
//   arms      gemm-only, cublaslt, weave-gemm, comm-only (lsa reduce-scatter), split-lsa, split-ce, fused (M a
//             multiple of W x 128; unavailable at other M), auto; --devices: split-nccl,
//             cublaslt+nccl, cublaslt+nccl-sym (cuBLASLt's GEMM, then ncclReduceScatter);
//   checks    gemm-only on this rank's band of its own reference GEMM, cublaslt on all of it
//             (bench::gemm_tolerance); every reducing arm on this rank's rows [r M/W, (r+1) M/W) of
//             the sum over ranks of the references (bench::reduced_gemm_tolerance); fused, split-ce
//             and auto bit for bit against split-lsa, except split-nccl (NCCL's order) and fused
//             under --exact-own;
//   rows      busbw = algbw * (W-1)/W (nccl-tests' reduce-scatter convention, algbw of the M x N
//             input); vs_lt = time / cublaslt.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/gemm_rs_options.hpp"
#include "cli/registry.hpp"
#include "cli/suites/fused_suite_trait.hpp"
#include "cli/suites/row_parallel_suite.hpp"
#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/plan.hpp"
#include "fused/reduce_scatter/impl.hpp"
#include "testing/emulated_world.hpp"
#include "weave/gemm_reduce_scatter.hpp"

namespace weave::cli {
namespace {

using fused_bench::ArmKind;
using fused_bench::SuiteArm;

struct GrsBenchOptions : fused_bench::FusedSuiteOptions {
  GemmRsOptions shape;
};

const std::string kCommOnlyEmulatedNote = fused_bench::comm_only_emulated_note(
    "seen with gemm-ag's lsa all-gather on the device, 2026-12-01; the reduce-scatter's lsa calls chain the same way");

class GemmRsTrait final : public fused_bench::RowParallelSuiteTrait<GemmReduceScatter, GemmReduceScatterConfig> {
 public:
  GemmRsTrait(const GrsBenchOptions& opt, int world)
      : RowParallelSuiteTrait(gemm_rs_config(opt.shape, world), "gemm-rs", opt.calibration, opt.shape.ms,
                              opt.shape.preset, world),
        world_(world) {}
  const char* name() const override { return "gemm-rs"; }
  const std::vector<std::string>& arm_names() const override {
    static const std::vector<std::string> names = {"gemm-only", "cublaslt", "weave-gemm", "cublaslt+nccl",
                                                   "cublaslt+nccl-sym", "comm-only", "split-lsa", "split-ce",
                                                   "split-nccl", "fused", "auto"};
    return names;
  }
  std::vector<SuiteArm> arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                             std::vector<std::string>& notes) const override;
  CollectiveConfig comm_only_config() const override {
    CollectiveConfig cc;
    cc.op = CollectiveOp::kReduceScatter;
    cc.dtype = DType::kBF16;
    cc.transport = Transport::kLsa;
    cc.algorithm = Algorithm::kAuto;
    cc.max_count = static_cast<size_t>(base_.m_max / world_) * static_cast<size_t>(base_.n);  // per rank's output
    return cc;
  }
  std::string unavailable_at(const SuiteArm& arm, int64_t m) const override {
    if (arm.kind != ArmKind::kOp || static_cast<GemmReduceScatterMode>(arm.mode) != GemmReduceScatterMode::kFused ||
        world_ == 1 || fused::grs_fused_fits(m, world_))
      return "";
    return "fused runs M a multiple of world x " + std::to_string(fused::kGrsFusedRows) + " = " +
           std::to_string(world_ * fused::kGrsFusedRows) + " (its bands are whole tiles)";
  }
  // Rank r's rows of the sum: its band [r m/W, (r+1) m/W).
  OwnRows own_rows(int64_t m, int rank, int world) const override { return {rank * (m / world), m / world}; }
  bool out_of_place() const override { return true; }  // the baselines reduce M rows into M / W
  bool equal_to_split(const SuiteArm&, const std::string& ran, fused_bench::SuiteTile,
                      fused_bench::SuiteTile) const override {
    if (ran == "split-nccl") return false;  // NCCL's own order
    return !(base_.exact_own && ran == "fused");
  }
  void* comm_only_input(Collective& coll, int64_t, int) const override { return coll.window_input(); }
  void run_comm_only(Collective& coll, int64_t m, int, cudaStream_t s) const override {
    coll.run(coll.window_input(), coll.window_output(), rows_elems(m / world_), s);
  }
  void after_cublaslt(ArmKind kind, void* c, void* out, int64_t m, comm::Group& g, cudaStream_t s) const override {
    // What users run today: the GEMM, then NCCL's reduce-scatter into this rank's rows (its
    // symmetric kernels where both buffers lie in a registered window).
    if (kind == ArmKind::kCublasLt) return;
    WEAVE_CHECK_NCCL(ncclReduceScatter(c, out, rows_elems(m / world_), ncclBfloat16, ncclSum, g.nccl(), s));
  }
  double busbw_factor(int world) const override { return double(world - 1) / world; }
  std::string checked_note(const SuiteArm& arm) const override {
    if (arm.kind == ArmKind::kCublasLt) return "this rank's whole partial GEMM against its reference (nothing is reduced)";
    return arm.partial ? "this rank's band of its partial against its reference GEMM (nothing is reduced)"
                       : "this rank's rows [r M/W, (r+1) M/W) of the sum over ranks of their reference GEMMs (bound: "
                         "bench::reduced_gemm_tolerance)";
  }
  std::vector<std::string> table_notes(int iters, int calls) const override {
    std::vector<std::string> lines = {
        fused_bench::fmt("m = the total rows (each rank receives m / W); ratio = time / the best split arm at that M "
                         "(same run); vs_lt = time / cublaslt (the GEMM alone); TFLOPS = the GEMM's 2*M*N*K_r per rank "
                         "/ time; !=split = elements not bitwise equal to split-lsa's output (by design 0); time = "
                         "per-rank max of medians over %d samples of a %d-call graph",
                         iters, calls),
        "rel_l2 (progress lines and JSON rel_l2_vs_reference): each arm's relative L2 error against this rank's rows "
        "of the sum of the ranks' reference GEMMs of the same quantised operands (gemm-only and cublaslt: against "
        "this rank's own reference)"};
    add_exact_own_note(lines);
    return lines;
  }

 private:
  size_t rows_elems(int64_t rows) const { return static_cast<size_t>(rows) * static_cast<size_t>(base_.n); }
  int world_;
};

std::vector<SuiteArm> GemmRsTrait::arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                                        std::vector<std::string>& notes) const {
  using Mode = GemmReduceScatterMode;
  using fused_bench::op_arm;
  fused_bench::ArmList list(wanted, notes);
  add_opening_arms<Mode>(list, world, emulated, over_nccl, kCommOnlyEmulatedNote);
  SuiteArm fused = op_arm("fused", Mode::kFused);
  fused.auto_takeable = fused.fused = fused.overlap_line = true;
  // The op refuses mode fused unless m_max holds one band of whole tiles per rank.
  const int64_t band_rows = int64_t{world} * fused::kGrsFusedRows;
  list.add_unless(fused, world > 1 && base_.m_max < band_rows
                             ? "not run (m_max " + std::to_string(base_.m_max) + " < world x " +
                                   std::to_string(fused::kGrsFusedRows) + " = " + std::to_string(band_rows) +
                                   ": fused runs only M that are multiples of it)"
                             : "");
  list.add(op_arm("auto", Mode::kAuto));
  fused_bench::add_over_nccl_arms(list, Mode::kSplitNccl, /*gather_baselines=*/false, over_nccl, emulated);
  return list.take();
}

void add_gemm_rs_suite(CLI::App& bench, BenchOptions& common) {
  static GrsBenchOptions options;
  fused_bench::SuiteHelp help;
  help.name = "gemm-rs";
  help.description =
      "weave::GemmReduceScatter per M: gemm-only, cuBLASLt's GEMM, comm-only, split-lsa, split-ce, fused and auto "
      "alternating in one process; every arm checked against a reference (#wrong: this rank's M / W rows of the sum) "
      "and fused against split-lsa bit for bit (!=split). M is the total rows and must be a multiple of the world W "
      "(fused runs M a multiple of W x 128; other M show it unavailable). --emulate-world W: W ranks on ONE GPU, "
      "labelled as such (not NVLink numbers). --devices 0,1,...: one rank per GPU over NCCL, with split-nccl and "
      "cuBLASLt + NCCL baselines. Every rank r holds A_r [M, K_r] and B_r [N, K_r] (-k is K_r); rank r receives rows "
      "[r M/W, (r+1) M/W) of sum_q A_q B_q^T, [M/W, N] bf16.";
  help.auto_modes = "split-lsa, fused";
  help.config = "GemmReduceScatterConfig";
  help.world1 = "world 1: one rank on one GPU; nothing is reduced, so gemm-only, split-lsa and\n"
                "                     split-ce are the same GEMM into the op's window, fused runs with no peer and auto\n"
                "                     resolves to gemm-only: the arms show the GEMM and each mode's cost around it.";
  help.footer =
      "M (-m) is the total rows: every rank computes a partial of all M rows and receives M / W of them, so every\n"
      "M must be a multiple of W (the default list is rounded up per W; a --preset's M list too).\n"
      "Arms (per M, timed alternating, CUDA graphs of --calls calls per rank, ranks barriered before every\n"
      "sample, per-rank max of medians):\n"
      "  gemm-only   the op in gemm-only mode: this rank's partial alone at the planner's tile (T_gemm;\n"
      "              checked: its band of the partial)\n"
      "  cublaslt    cuBLASLt's GEMM of this rank's shard, the strongest GEMM baseline (no mxfp8 on Hopper;\n"
      "              emulated world: not capped to an SM share, as weave's grids are)\n"
      "  weave-gemm  weave::Gemm of the same shard as a caller plans it (every SM; K split, decode GEMV where\n"
      "              its planner takes them; emulated world: planned for the rank's SM share, like the op's\n"
      "              grids): what gemm-only is held to; a closing line per M gives gemm-only / weave-gemm\n"
      "              (checked as cublaslt)\n"
      "  comm-only   weave's lsa reduce-scatter alone, M x N bf16 from its window input into this rank's\n"
      "              M / W rows (W > 1; T_comm). Emulated world: only when --arms names it, and then with an\n"
      "              empty kernel after each call (included in its time): lsa kernels let the next call's grid\n"
      "              become resident at once (PDL), so a graph of calls from one rank can hold the SMs the\n"
      "              peer's call needs (seen with gemm-ag: a timeout, W = 2)\n"
      "  split-lsa   GEMM, then weave's lsa reduce-scatter in place\n"
      "  split-ce    GEMM, then weave's copy-engine reduce-scatter (emulated world: W <= 2 only, because the\n"
      "              ranks' copy streams would share hardware queues with peers' waiting kernels)\n"
      "  fused       one kernel: peers' bands sent as bf16 partials into their owners' staging, the own band\n"
      "              summed with them one round later (--chunks, --exact-own set it up); M a multiple of\n"
      "              W x 128 only (unavailable at other M)\n"
      "  auto        the op's choice per call (shown as auto(<mode>))\n"
      "  split-nccl  --devices only: weave's GEMM into the window, then ncclReduceScatter in place (a split arm)\n"
      "  cublaslt+nccl      --devices only: cuBLASLt's GEMM, then ncclReduceScatter into this rank's rows\n"
      "              (plain buffers)\n"
      "  cublaslt+nccl-sym  the same with both buffers in an NCCL symmetric window (NCCL's symmetric kernels):\n"
      "              the strongest baseline; JSON rows carry speedup_vs_cublaslt_nccl[_sym] (> 1: faster)\n"
      "Columns: m (total rows) n k (K_r) quant out mode time_us ratio (time / best split arm, same run) vs_lt\n"
      "(time / cublaslt) TFLOPS (2*M*N*K_r per rank / time) noise% #wrong (elements outside the bound against\n"
      "a CUDA-core reference GEMM: this rank's for gemm-only and cublaslt, this rank's M / W rows of the sum\n"
      "over ranks for the rest, bounded by the terms' sizes; after NaN poison, before and after timing, summed\n"
      "over ranks) !=split (elements of fused, split-ce and auto not bitwise equal to split-lsa's output of the\n"
      "same inputs; 0 by design; fused is not compared under --exact-own) world (W, or W-emu). The overlap\n"
      "efficiency (T_gemm + T_comm - T_fused) / min(T_gemm, T_comm) is printed where all three were measured.\n";
  fused_bench::add_fused_suite<GemmRsTrait>(
      bench, common, options, help,
      [](CLI::App& app, GemmRsOptions& shape) {
        add_gemm_rs_options(app, shape, /*with_layout=*/false, /*with_mode=*/false, /*many=*/true);
      },
      gemm_rs_shapes);
}

[[maybe_unused]] const bool kRegistered =
    register_bench_suite({"gemm-rs",
                          "GemmReduceScatter modes per M (the total rows, a multiple of the world) against cuBLASLt's "
                          "GEMM (world 1, or --emulate-world W on one GPU: not NVLink numbers; --devices: one rank per "
                          "GPU over NCCL)",
                          add_gemm_rs_suite, nullptr});

}  // namespace
}  // namespace weave::cli
