// `weave bench gemm-ar`: weave::GemmAllReduce's modes against each other, against cuBLASLt's GEMM
// and (--devices) against cuBLASLt + NCCL, per M. Every rank r holds A_r [M, K_r] and its own
// B_r [N, K_r]; every rank receives sum_r A_r B_r^T, [M, N] bf16. This file is the operator's
// trait of the fused-suite engine (fused_suite_engine.cu: inputs, timing, checks, rows;
// row_parallel_suite.hpp: what it shares with gemm-rs) and the subcommand's help, which lists the
// arms and worlds.
//
// What is gemm-ar's own:
//   arms      gemm-only, cublaslt, weave-gemm, comm-only (lsa all-reduce), split-lsa, split-ce, decode (m <= 32,
//             GEMV + LL all-reduce), decode-fused (the same in one kernel), fused, fused-rs (MORI's
//             structure, a control), fused-ce, auto;
//             --devices: split-nccl, cublaslt+nccl, cublaslt+nccl-sym;
//   checks    gemm-only and cublaslt against this rank's reference GEMM (bench::gemm_tolerance);
//             every reducing arm against the sum over ranks of the references within
//             bench::reduced_gemm_tolerance (bounded by the terms' magnitudes: terms may cancel; one
//             more bf16 half-ulp per step where NCCL summed); fused, fused-rs, fused-ce, split-ce and
//             auto bit for bit against split-lsa (the same tiles, the same fp32 sum of bf16
//             partials in rank order), except decode and decode-fused (the GEMV sums K in another
//             order; the GPU tests hold decode-fused bitwise equal to decode),
//             split-nccl (NCCL's order) and fused under --exact-own (the own term kept in fp32);
//   rows      busbw = algbw * 2(W-1)/W (nccl-tests' all-reduce convention); vs_lt = time / cublaslt.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/fused_options.hpp"
#include "cli/gemm_ar_options.hpp"
#include "cli/registry.hpp"
#include "cli/suites/fused_suite_trait.hpp"
#include "cli/suites/row_parallel_suite.hpp"
#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/impl.hpp"
#include "gemv/gemv.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave::cli {
namespace {

using fused_bench::ArmKind;
using fused_bench::kEmulatedLabel;
using fused_bench::SuiteArm;

struct GarBenchOptions : fused_bench::FusedSuiteOptions {
  GemmArOptions shape;
};

const std::string kCommOnlyEmulatedNote = fused_bench::comm_only_emulated_note(
    "seen with gemm-ag's lsa all-gather on the device, 2026-12-01; the all-reduce's lsa calls chain the same way");

class GemmArTrait final : public fused_bench::RowParallelSuiteTrait<GemmAllReduce, GemmAllReduceConfig> {
 public:
  GemmArTrait(const GarBenchOptions& opt, int world)
      : RowParallelSuiteTrait(gemm_ar_config(opt.shape, world), "gemm-ar", opt.calibration, opt.shape.ms,
                              opt.shape.preset, world) {}
  const char* name() const override { return "gemm-ar"; }
  const std::vector<std::string>& arm_names() const override {
    static const std::vector<std::string> names = {"gemm-only", "cublaslt", "weave-gemm", "cublaslt+nccl",
                                                   "cublaslt+nccl-sym", "comm-only", "split-lsa", "split-ce",
                                                   "split-nccl", "decode",
                                                   "decode-fused", "fused", "fused-rs", "fused-ce", "auto"};
    return names;
  }
  std::vector<SuiteArm> arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                             std::vector<std::string>& notes) const override;
  CollectiveConfig comm_only_config() const override {
    CollectiveConfig cc;
    cc.op = CollectiveOp::kAllReduce;
    cc.dtype = DType::kBF16;
    cc.transport = Transport::kLsa;
    cc.algorithm = Algorithm::kAuto;
    cc.max_count = static_cast<size_t>(base_.m_max) * static_cast<size_t>(base_.n);
    return cc;
  }
  std::string unavailable_at(const SuiteArm& arm, int64_t m) const override {
    if (arm.kind != ArmKind::kOp || !fused::gar_decode_mode(static_cast<GemmAllReduceMode>(arm.mode))) return "";
    return m > detail::kGemvMaxM ? std::string(to_string(static_cast<GemmAllReduceMode>(arm.mode))) + " runs m <= " +
                                       std::to_string(detail::kGemvMaxM) + " (the decode GEMV)"
                                 : "";
  }
  bool out_of_place() const override { return false; }
  bool equal_to_split(const SuiteArm&, const std::string& ran, fused_bench::SuiteTile,
                      fused_bench::SuiteTile) const override {
    if (ran == "decode" || ran == "decode-fused" || ran == "split-nccl") return false;  // another K order; NCCL's
    return !(base_.exact_own && (ran == "fused" || ran == "fused-ce"));
  }
  void* comm_only_input(Collective& coll, int64_t, int) const override { return coll.window_input(); }
  void run_comm_only(Collective& coll, int64_t m, int, cudaStream_t s) const override {
    coll.run(coll.window_input(), coll.window_output(), static_cast<size_t>(m) * static_cast<size_t>(base_.n), s);
  }
  void after_cublaslt(ArmKind kind, void* c, void*, int64_t m, comm::Group& g, cudaStream_t s) const override {
    // What users run today: the GEMM, then NCCL's all-reduce in place (its symmetric kernels where
    // the buffer lies in a registered window).
    if (kind == ArmKind::kCublasLt) return;
    WEAVE_CHECK_NCCL(ncclAllReduce(c, c, static_cast<size_t>(m) * static_cast<size_t>(base_.n), ncclBfloat16, ncclSum,
                                   g.nccl(), s));
  }
  double busbw_factor(int world) const override { return 2.0 * (world - 1) / world; }
  std::string checked_note(const SuiteArm& arm) const override {
    return arm.partial ? "this rank's partial against its reference GEMM (nothing is reduced)"
                       : "the sum over ranks of their reference GEMMs (bound: bench::reduced_gemm_tolerance)";
  }
  std::vector<std::string> table_notes(int iters, int calls) const override {
    std::vector<std::string> lines = {
        fused_bench::fmt("ratio = time / the best split arm at that M (same run); vs_lt = time / cublaslt (the GEMM "
                         "alone); TFLOPS = the GEMM's 2*M*N*K_r per rank / time; !=split = elements not bitwise equal "
                         "to split-lsa's output (by design 0); time = per-rank max of medians over %d samples of a "
                         "%d-call graph",
                         iters, calls),
        "rel_l2 (progress lines and JSON rel_l2_vs_reference): each arm's relative L2 error against the sum of the "
        "ranks' reference GEMMs of the same quantised operands (fp64-accumulated slices; gemm-only and cublaslt: "
        "against this rank's own reference)"};
    add_exact_own_note(lines);
    return lines;
  }
};

std::vector<SuiteArm> GemmArTrait::arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                                        std::vector<std::string>& notes) const {
  using Mode = GemmAllReduceMode;
  using fused_bench::op_arm;
  fused_bench::ArmList list(wanted, notes);
  add_opening_arms<Mode>(list, world, emulated, over_nccl, kCommOnlyEmulatedNote);
  // decode (GEMV + the lsa all-reduce) is a split arm of its own rows, m <= 32 (unavailable_at).
  SuiteArm decode = op_arm("decode", Mode::kDecode);
  decode.split = decode.auto_takeable = true;
  if (world > 1) list.add(decode);
  // decode-fused (the same in one kernel): auto takes it only from a calibration that measured it
  // fastest (its op then hosts the lines); not a split arm (the GPU tests compare it with decode
  // bit for bit, not here).
  SuiteArm decode_fused = op_arm("decode-fused", Mode::kDecodeFused);
  decode_fused.auto_takeable = true;
  if (world > 1) list.add(decode_fused);
  SuiteArm fused = op_arm("fused", Mode::kFused);
  fused.auto_takeable = fused.fused = fused.overlap_line = true;
  list.add(fused);
  list.add(op_arm("fused-rs", Mode::kFusedRs));
  SuiteArm fused_ce = op_arm("fused-ce", Mode::kFusedCe);
  fused_ce.fused = true;
  // In the emulated world its kernel waits for its own copies while the suite's per-rank graphs
  // enter the GPU's shared queues as the driver schedules them, so a rank's copy wait can sit
  // ahead of its peer's kernel (seen in the op's graph test).
  list.add_unless(fused_ce,
                  world == 1  ? "not run at world 1 (nothing to copy: it runs as fused)"
                  : emulated ? "not timed in the emulated world (per-rank graphs share one GPU's hardware queues, and its "
                               "kernel waits for its own copy streams: docs/memory_ordering.md \"ar-fused-ce\"); tested in "
                               "EmulatedGemmAllReduce.FusedCe*, timed on 2+ GPUs"
                             : "");
  list.add(op_arm("auto", Mode::kAuto));
  fused_bench::add_over_nccl_arms(list, Mode::kSplitNccl, /*gather_baselines=*/false, over_nccl, emulated);
  return list.take();
}

void add_gemm_ar_suite(CLI::App& bench, BenchOptions& common) {
  static GarBenchOptions options;
  fused_bench::SuiteHelp help;
  help.name = "gemm-ar";
  help.description = "weave::GemmAllReduce per M: gemm-only, cuBLASLt's GEMM, comm-only, split-lsa, split-ce, decode, decode-fused, fused, fused-rs, "
                 "fused-ce and auto alternating in one process; every arm checked against a reference (#wrong) and fused against "
                 "split-lsa bit for bit (!=split). --emulate-world W: W ranks on ONE GPU, labelled as such (not NVLink numbers). "
                 "--devices 0,1,...: one rank per GPU over NCCL, with split-nccl and cuBLASLt + NCCL baselines. Every rank r holds "
                 "A_r [M, K_r] and B_r [N, K_r] (-k is K_r); every rank receives sum_r A_r B_r^T, [M, N] bf16.";
  help.auto_modes = "split-lsa, fused, decode, decode-fused";
  help.config = "GemmAllReduceConfig";
  help.world1 = "world 1: one rank on one GPU; nothing is reduced, so gemm-only, split-lsa and\n"
                 "                     split-ce are the same GEMM into the op's window, fused runs with no peer and auto\n"
                 "                     resolves to gemm-only: the arms show the GEMM and each mode's cost around it.";
  help.footer =
      "Arms (per M, timed alternating, CUDA graphs of --calls calls per rank, ranks barriered before every\n"
      "sample, per-rank max of medians):\n"
      "  gemm-only   the op in gemm-only mode: this rank's partial alone at the planner's tile (T_gemm)\n"
      "  cublaslt    cuBLASLt's GEMM of this rank's shard, the strongest GEMM baseline (no mxfp8 on Hopper;\n"
      "              emulated world: not capped to an SM share, as weave's grids are)\n"
      "  weave-gemm  weave::Gemm of the same shard as a caller plans it (every SM; K split, decode GEMV where\n"
      "              its planner takes them; emulated world: planned for the rank's SM share, like the op's\n"
      "              grids): what gemm-only is held to; a closing line per M gives gemm-only / weave-gemm\n"
      "              (checked as cublaslt)\n"
      "  comm-only   weave's lsa all-reduce alone, M x N bf16 from its window input to its window output\n"
      "              (W > 1; T_comm). Emulated world: only when --arms names it, and then with an empty\n"
      "              kernel after each call (included in its time): lsa kernels let the next call's grid\n"
      "              become resident at once (PDL), so a graph of calls from one rank can hold the SMs the\n"
      "              peer's call needs (seen with gemm-ag: a timeout, W = 2)\n"
      "  split-lsa   GEMM, then weave's lsa all-reduce in place\n"
      "  split-ce    GEMM, then weave's copy-engine all-reduce (emulated world: W <= 2 only, because the\n"
      "              ranks' copy streams would share hardware queues with peers' waiting kernels)\n"
      "  decode      W > 1, m <= 32 only: weave's decode GEMV into the window, then the lsa all-reduce (LL\n"
      "              at these sizes); counts as a split arm; not compared bit for bit (the GEMV sums K in\n"
      "              another order than the tile)\n"
      "  decode-fused W > 1, m <= 32 only: decode as one kernel (the GEMV's clusters send their rows as LL\n"
      "              lines as each band is reduced, then sum the peers'); bitwise equal to decode (the GPU\n"
      "              tests); where a rank's GEMV grid cannot be resident beside its peers' it is not run\n"
      "  fused       one kernel: peers' bands sent as bf16 partials, the own band summed with them and\n"
      "              stored to every rank (--chunks, --exact-own set it up)\n"
      "  fused-rs    MORI's structure (control arm): the GEMM kernel scatters every tile as a bf16 partial to\n"
      "              its owner as chunks finish; a tail kernel reduces the own band and gathers it\n"
      "  fused-ce    W > 1: the fused schedule with both legs on copy engines: every tile stored to this rank's\n"
      "              rows, each peer's copy stream pulls the partials and the final chunks as their flags\n"
      "              arrive (not timed in the emulated world: its kernel waits for its own copy streams,\n"
      "              and this suite's per-rank graphs share one GPU's hardware queues; see the GPU tests)\n"
      "  auto        the op's choice per call (shown as auto(<mode>))\n"
      "  split-nccl  --devices only: weave's GEMM into the window, then ncclAllReduce in place (a split arm)\n"
      "  cublaslt+nccl      --devices only: cuBLASLt's GEMM, then ncclAllReduce in place on a plain buffer\n"
      "  cublaslt+nccl-sym  the same on a buffer in an NCCL symmetric window (NCCL's symmetric kernels): the\n"
      "              strongest baseline; JSON rows carry speedup_vs_cublaslt_nccl[_sym] (> 1: faster)\n"
      "Columns: m n k (K_r) quant out mode time_us ratio (time / best split arm, same run) vs_lt (time /\n"
      "cublaslt) TFLOPS (2*M*N*K_r per rank / time) noise% #wrong (elements outside the bound against a\n"
      "CUDA-core reference GEMM: this rank's for gemm-only and cublaslt, the sum over ranks for the rest,\n"
      "bounded by the terms' sizes; after NaN poison, before and after timing, summed over ranks) !=split\n"
      "(elements of fused, fused-rs, fused-ce, split-ce and auto not bitwise equal to split-lsa's output of the same inputs;\n"
      "0 by design; fused is not compared under --exact-own) world (W, or W-emu). The overlap efficiency\n"
      "(T_gemm + T_comm - T_fused) / min(T_gemm, T_comm) is printed where all three were measured.\n";
  fused_bench::add_fused_suite<GemmArTrait>(
      bench, common, options, help,
      [](CLI::App& app, GemmArOptions& shape) { add_gemm_ar_options(app, shape, /*with_layout=*/false, /*with_mode=*/false, /*many=*/true); },
      gemm_ar_shapes);
}

[[maybe_unused]] const bool kRegistered =
    register_bench_suite({"gemm-ar",
                          "GemmAllReduce modes per M against cuBLASLt's GEMM (world 1, or --emulate-world W on one "
                          "GPU: not NVLink numbers; --devices: one rank per GPU over NCCL)",
                          add_gemm_ar_suite, nullptr});

}  // namespace
}  // namespace weave::cli
