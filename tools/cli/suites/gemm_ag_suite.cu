// `weave bench gemm-ag`: weave::GemmAllGather's modes against each other and (--devices) against
// cuBLASLt + NCCL, per M rows per rank. Every rank r holds A_r [M, K] and the same B [N, K]; every
// rank receives [A_0; ...; A_{W-1}] B^T, [W M, N]. This file is the operator's trait of the
// fused-suite engine (fused_suite_engine.cu: inputs, timing, checks, rows; gathered_suite.hpp:
// what it shares with ag-gemm) and the subcommand's help, which lists the arms and worlds.
//
// What is gemm-ag's own:
//   arms      gemm-only, weave-gemm, comm-only (lsa all-gather in place), split-lsa, split-ce, fused-lsa,
//             fused-ce, auto; world 1: cublaslt+copy (cuBLASLt's GEMM, then a copy into the output:
//             what an out-of-place gather costs there); --devices: split-nccl, cublaslt+nccl,
//             cublaslt+nccl-sym;
//   checks    the rows of EVERY source rank against bench::gpu_reference_gemm of that source's A
//             within bench::gemm_tolerance (rows a call never wrote still hold NaN and count);
//             gemm-only on its own rows only (it moves nothing by design); every gathering arm
//             bit for bit against split-lsa (the same tiles; a gather copies bytes: NCCL's too);
//   rows      busbw = algbw * (W-1)/W (nccl-tests' all-gather convention); vs_lt = time /
//             cublaslt+copy (world 1).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/fused_options.hpp"
#include "cli/gemm_ag_options.hpp"
#include "cli/registry.hpp"
#include "cli/suites/fused_suite_trait.hpp"
#include "cli/suites/gathered_suite.hpp"
#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "fused/all_gather/impl.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gpu_reference.hpp"
#include "weave/gemm_all_gather.hpp"

namespace weave::cli {
namespace {

using fused_bench::ArmKind;
using fused_bench::kEmulatedLabel;
using fused_bench::SuiteArm;

struct GagBenchOptions : fused_bench::FusedSuiteOptions {
  GemmAgOptions shape;
};

// comm-only in the emulated world: fused_bench::comm_only_emulated_note (seen on the device,
// 2026-12-01: both ranks timed out at the first graph replay of comm-only, W = 2).
const std::string kCommOnlyEmulatedNote = fused_bench::comm_only_emulated_note(
    "both ranks timed out at its first graph replay on the device, 2026-12-01");

class GemmAgTrait final : public fused_bench::GatheredSuiteTrait<GemmAllGather, GemmAllGatherConfig> {
 public:
  GemmAgTrait(const GagBenchOptions& opt, int world)
      : GatheredSuiteTrait(gemm_ag_config(opt.shape, world), opt.calibration, opt.shape.ms, opt.shape.preset) {
    // The table must be for this op shape (refused before any GPU work); only the auto arm reads it.
    calibration_option(opt.calibration, /*mode_is_auto=*/true, "gemm-ag", base_.quant, base_.scale_layout,
                       base_.out_dtype, base_.n, base_.k, world);
  }
  const char* name() const override { return "gemm-ag"; }
  const std::vector<std::string>& arm_names() const override {
    static const std::vector<std::string> names = {"gemm-only", "weave-gemm", "comm-only",     "split-lsa",
                                                   "split-ce",  "split-nccl", "fused-lsa",     "fused-ce",
                                                   "auto",      "cublaslt+copy", "cublaslt+nccl", "cublaslt+nccl-sym"};
    return names;
  }
  std::vector<SuiteArm> arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                             std::vector<std::string>& notes) const override;
  CollectiveConfig comm_only_config() const override {
    CollectiveConfig cc;  // bytes (no dtype): the gather moves the output rows as they are
    cc.op = CollectiveOp::kAllGather;
    cc.transport = Transport::kLsa;
    cc.algorithm = Algorithm::kAuto;
    cc.max_count = static_cast<size_t>(base_.m_max) * static_cast<size_t>(base_.n) * dtype_bytes(base_.out_dtype);
    return cc;
  }
  bool out_of_place() const override { return true; }
  void* comm_only_input(Collective& coll, int64_t m, int rank) const override {
    return static_cast<char*>(coll.window_output()) + static_cast<size_t>(rank) * rows_bytes(m);
  }
  void run_comm_only(Collective& coll, int64_t m, int rank, cudaStream_t s) const override {
    char* o = static_cast<char*>(coll.window_output());
    coll.run(o + static_cast<size_t>(rank) * rows_bytes(m), o, rows_bytes(m), s);
  }
  void after_cublaslt(ArmKind kind, void* c, void* out, int64_t m, comm::Group& g, cudaStream_t s) const override {
    if (kind == ArmKind::kCublasLt) {  // world 1: the copy an out-of-place gather makes
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(out, c, rows_bytes(m), cudaMemcpyDeviceToDevice, s));
      return;
    }
    // What users run today: the GEMM of the own rows, then NCCL's all-gather (its symmetric
    // kernels where both buffers lie in a registered window).
    WEAVE_CHECK_NCCL(ncclAllGather(c, out, static_cast<size_t>(m) * static_cast<size_t>(base_.n),
                                   base_.out_dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat32, g.nccl(), s));
  }
  const char* vs_lt_key() const override { return "ratio_vs_cublaslt_copy"; }
  std::string checked_note(const SuiteArm& arm) const override {
    return arm.kind == ArmKind::kOp && arm.partial ? "own rows only (gemm-only moves nothing by design)" : "";
  }
  std::vector<std::string> table_notes(int iters, int calls) const override {
    return {fused_bench::fmt("ratio = time / the best split arm at that M (same run); vs_lt = time / cublaslt+copy; "
                             "TFLOPS = the GEMM's 2*M*N*K per rank / time; !=split = elements not bitwise equal to "
                             "split-lsa's output (by design 0); time = per-rank max of medians over %d samples of a "
                             "%d-call graph",
                             iters, calls)};
  }
  std::string world1_label() const override { return "world 1: one rank on one GPU, nothing gathered"; }

 private:
  size_t rows_bytes(int64_t m) const {
    return static_cast<size_t>(m) * static_cast<size_t>(base_.n) * dtype_bytes(base_.out_dtype);
  }
};

std::vector<SuiteArm> GemmAgTrait::arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                                        std::vector<std::string>& notes) const {
  using Mode = GemmAllGatherMode;
  using fused_bench::op_arm;
  fused_bench::ArmList list(wanted, notes);
  SuiteArm gemm_only = op_arm("gemm-only", Mode::kGemmOnly);
  gemm_only.partial = true;
  list.add(gemm_only);
    list.add({.name = "weave-gemm", .kind = ArmKind::kWeaveGemm, .partial = true});
  list.add_comm_only(world, emulated, "nothing to gather", kCommOnlyEmulatedNote);
  const std::string ce_why = emulated ? bench::EmulatedWorld::copy_engine_unsupported_reason(world) : "";
  fused_bench::add_split_arms(list, Mode::kSplitLsa, Mode::kSplitCe, ce_why);
  SuiteArm fused_lsa = op_arm("fused-lsa", Mode::kFusedLsa);
  fused_lsa.auto_takeable = fused_lsa.fused = fused_lsa.overlap_line = true;
  list.add(fused_lsa);
  SuiteArm fused_ce = op_arm("fused-ce", Mode::kFusedCe);
  fused_ce.fused = true;
  list.add_unless(fused_ce, !ce_why.empty() ? ce_why : world == 1 ? "not run at world 1 (nothing to pull)" : "");
  list.add(op_arm("auto", Mode::kAuto));
  list.add_unless({.name = "cublaslt+copy", .kind = ArmKind::kCublasLt, .partial = true},
                  world == 1 ? "" : "world 1 only (with W > 1 ranks the GEMM-then-gather arms are split-lsa and, over NCCL, "
                                    "cublaslt+nccl)");
  fused_bench::add_over_nccl_arms(list, Mode::kSplitNccl, /*gather_baselines=*/true, over_nccl, emulated);
  return list.take();
}

void add_gemm_ag_suite(CLI::App& bench, BenchOptions& common) {
  static GagBenchOptions options;
  fused_bench::SuiteHelp help;
  help.name = "gemm-ag";
  help.description = "weave::GemmAllGather per M: gemm-only, comm-only, split-lsa, split-ce, fused-lsa, fused-ce and auto alternating in "
                 "one process (world 1: also cuBLASLt + copy); every arm's rows of every source rank checked (#wrong) and every "
                 "gathering arm against split-lsa bit for bit (!=split). --emulate-world W: W ranks on ONE GPU, labelled as such "
                 "(not NVLink numbers). --devices 0,1,...: one rank per GPU over NCCL, with split-nccl and cuBLASLt + NCCL "
                 "baselines.";
  help.auto_modes = "split-lsa, fused-lsa";
  help.config = "GemmAllGatherConfig";
  help.world1 = "world 1: one rank on one GPU; nothing is gathered, so the arms show the GEMM into\n"
                 "                     the op's window and each mode's cost around it; cublaslt+copy is the baseline.";
  help.footer =
      "Arms (per M, timed alternating, CUDA graphs of --calls calls per rank, ranks barriered before every\n"
      "sample, per-rank max of medians):\n"
      "  gemm-only      the op in gemm-only mode: the GEMM alone into this rank's rows (checked: own rows)\n"
      "  weave-gemm     weave::Gemm of this rank's rows as a caller plans it (every SM; K split, decode GEMV\n"
      "                 where its planner takes them; emulated world: planned for the rank's SM share, like\n"
      "                 the op's grids) into its own C: what gemm-only is held to; a closing line per M\n"
      "                 gives gemm-only / weave-gemm (checked: own rows)\n"
      "  comm-only      weave's lsa all-gather alone, in place (W > 1). Emulated world: only when --arms\n"
      "                 names it, and then with an empty kernel after each call (included in its time): lsa\n"
      "                 kernels let the next call's grid become resident at once (PDL), so a graph of calls\n"
      "                 from one rank can hold the SMs the peer's call needs (seen: a timeout, W = 2)\n"
      "  split-lsa      GEMM, then weave's lsa all-gather in place\n"
      "  split-ce       GEMM, then weave's copy-engine all-gather (emulated world: W <= 2 only, because the\n"
      "                 ranks' copy streams would share hardware queues with peers' waiting kernels)\n"
      "  fused-lsa      one kernel: every tile stored to its rows here and at every peer\n"
      "  fused-ce       the same kernel storing to its own rows only; every chunk's flag triggers the peers'\n"
      "                 copy-engine pulls of it while the GEMM runs (W > 1; emulated world: W <= 2, as split-ce)\n"
      "  auto           the op's choice per call (shown as auto(<mode>))\n"
      "  cublaslt+copy  world 1 only: cuBLASLt GEMM, then a copy into the output (no NCCL in the emulated\n"
      "                 world, so no cuBLASLt + NCCL baseline there)\n"
      "  split-nccl     --devices only: weave's GEMM into the window, then ncclAllGather in place (a split arm)\n"
      "  cublaslt+nccl  --devices only: cuBLASLt's GEMM of the own rows, then ncclAllGather (plain buffers)\n"
      "  cublaslt+nccl-sym  the same with both buffers in an NCCL symmetric window: the strongest baseline;\n"
      "                 JSON rows carry speedup_vs_cublaslt_nccl[_sym] (> 1: faster)\n"
      "Columns: m n k quant out mode time_us ratio (time / best split arm, same run) vs_lt (time /\n"
      "cublaslt+copy) TFLOPS (2*M*N*K per rank / time) noise% #wrong (elements outside the GEMM tolerance\n"
      "against a CUDA-core reference GEMM of each source rank's A, after NaN poison, before and after\n"
      "timing, summed over ranks and sources) !=split (elements of every gathering arm not bitwise equal to\n"
      "split-lsa's output of the same inputs: 0 by design, a gather copies bytes) world (W, or W-emu).\n";
  fused_bench::add_fused_suite<GemmAgTrait>(
      bench, common, options, help,
      [](CLI::App& app, GemmAgOptions& shape) { add_gemm_ag_options(app, shape, /*with_layout=*/false, /*with_mode=*/false, /*many=*/true); },
      gemm_ag_shapes);
}

[[maybe_unused]] const bool kRegistered =
    register_bench_suite({"gemm-ag",
                          "GemmAllGather modes per M (world 1, or --emulate-world W on one GPU: not NVLink "
                          "numbers; --devices: one rank per GPU over NCCL)",
                          add_gemm_ag_suite, nullptr});

}  // namespace
}  // namespace weave::cli
