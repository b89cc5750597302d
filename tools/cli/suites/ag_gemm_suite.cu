// `weave bench ag-gemm`: weave::AllGatherGemm's modes against each other, against cuBLASLt's GEMM of
// the gathered rows and (--devices) against NCCL's all-gather of A followed by cuBLASLt's GEMM, per m
// rows per rank. Every rank r holds A_r [m, K] and the same B [N, K]; every rank computes
// [A_0; ...; A_{W-1}] B^T, [W m, N]. This file is the operator's trait of the fused-suite engine
// (fused_suite_engine.cu: inputs, timing, checks, rows; gathered_suite.hpp: what it shares with
// gemm-ag) and the subcommand's help, which lists the arms and worlds.
//
// What is ag-gemm's own:
//   arms      gemm-only, cublaslt, weave-gemm (cuBLASLt's GEMM of the W m gathered rows, only this rank's rows
//             there: the GEMM alone), split-lsa, split-ce, fused-ce (W > 1; bf16, ptpc, blockscale
//             with bf16 out), auto; --devices: split-nccl, cublaslt+nccl (ncclAllGather of A's rows
//             and scales, out of place from A_r, then cuBLASLt's GEMM), cublaslt+nccl-sym (the same
//             in place in an NCCL symmetric window); no comm-only arm (so no overlap line);
//   moves     the input: the engine's cuBLASLt arms gather A (gathered_input_row) before the GEMM;
//   checks    as gemm-ag (gathered_suite.hpp): every source's rows against its reference GEMM,
//             gemm-only and cublaslt on this rank's rows only, every gathering mode bit for bit
//             against split-lsa (fused-ce, which runs its own kernel at the planner's tile without a K split, only at an m where
//             split-lsa's GEMM ran that tile too; always within the reference's bound);
//   rows      TFLOPS = 2 W m N K per rank / time; algbw = the gathered A and scales (W m rows) / time,
//             busbw = algbw * (W-1)/W (nccl-tests' all-gather convention); vs_lt = time / cublaslt.
#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/ag_gemm_options.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/fused_options.hpp"
#include "cli/registry.hpp"
#include "cli/suites/fused_suite_trait.hpp"
#include "cli/suites/gathered_suite.hpp"
#include "common/check.hpp"
#include "fused/ag_gemm/impl.hpp"
#include "testing/emulated_world.hpp"
#include "weave/all_gather_gemm.hpp"

namespace weave::cli {
namespace {

using fused_bench::ArmKind;
using fused_bench::SuiteArm;

struct AgmBenchOptions : fused_bench::FusedSuiteOptions {
  AgGemmOptions shape;
};

class AgGemmTrait final : public fused_bench::GatheredSuiteTrait<AllGatherGemm, AllGatherGemmConfig> {
 public:
  AgGemmTrait(const AgmBenchOptions& opt, int world)
      : GatheredSuiteTrait(ag_gemm_config(opt.shape, world), opt.calibration, opt.shape.ms, opt.shape.preset) {
    // The table must be for this op shape (refused before any GPU work); only the auto arm reads it.
    table_ = calibration_option(opt.calibration, /*mode_is_auto=*/true, "ag-gemm", base_.quant, base_.scale_layout,
                                base_.out_dtype, base_.n, base_.k, world);
  }
  const char* name() const override { return "ag-gemm"; }
  const std::vector<std::string>& arm_names() const override {
    static const std::vector<std::string> names = {"gemm-only", "cublaslt",   "weave-gemm",    "split-lsa",
                                                   "split-ce",  "fused-ce",   "auto",          "split-nccl",
                                                   "cublaslt+nccl", "cublaslt+nccl-sym"};
    return names;
  }
  std::vector<SuiteArm> arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                             std::vector<std::string>& notes) const override;
  // The split modes run one GEMM plan over the same gathered bytes: split-lsa's bits. fused-ce runs
  // its own kernel at the planner's tile, unsplit: the same sums only where split-lsa's plan took that
  // tile too (not the decode GEMV, not a K split); elsewhere the reference's bound alone holds it.
  bool equal_to_split(const SuiteArm&, const std::string& ran, fused_bench::SuiteTile tile,
                      fused_bench::SuiteTile split_tile) const override {
    return ran != "fused-ce" || tile == split_tile;
  }
  // cuBLASLt's GEMM writes the output itself (the gather is before it).
  bool out_of_place() const override { return false; }
  InputRow gathered_input_row() const override {
    return {.bytes = static_cast<size_t>(base_.k * fused::agm_elem_bytes(base_)),
            .scale_bytes = static_cast<size_t>(fused::agm_scale_row_bytes(base_))};
  }
  void before_cublaslt(ArmKind kind, const GatheredInput& in, int64_t m, comm::Group& g, cudaStream_t s) const override {
    if (kind == ArmKind::kCublasLt) return;  // the GEMM alone: nothing moves
    // What users run today (torch's all_gather_into_tensor of the activations and of their scales,
    // then the GEMM): both gathers in one NCCL group, as split-nccl runs them; bytes, since a gather
    // copies them (NCCL's symmetric kernels where the buffers lie in a registered window).
    const InputRow row = gathered_input_row();
    WEAVE_CHECK_NCCL(ncclGroupStart());
    WEAVE_CHECK_NCCL(ncclAllGather(in.own_a, in.a, static_cast<size_t>(m) * row.bytes, ncclUint8, g.nccl(), s));
    if (in.sa != nullptr)
      WEAVE_CHECK_NCCL(ncclAllGather(in.own_sa, in.sa, static_cast<size_t>(m) * row.scale_bytes, ncclUint8, g.nccl(), s));
    WEAVE_CHECK_NCCL(ncclGroupEnd());
  }
  void after_cublaslt(ArmKind, void*, void*, int64_t, comm::Group&, cudaStream_t) const override {}
  const char* vs_lt_key() const override { return "ratio_vs_cublaslt"; }
  std::string checked_note(const SuiteArm& arm) const override {
    if (arm.partial) return "own rows only (nothing is gathered by design)";
    if (arm.kind == ArmKind::kCublasLtNccl || arm.kind == ArmKind::kCublasLtNcclSym) {
      if (base_.quant == ScaleMode::kBlockscale)
        return "every source's rows; the scales cuBLASLt reads were converted once from a gather before timing";
      return "every source's rows, from the rows and scales NCCL gathered into NaN-poisoned buffers";
    }
    return "";
  }
  std::vector<std::string> table_notes(int iters, int calls) const override {
    return {fused_bench::fmt("m = rows per rank (the GEMM runs W x m); ratio = time / the best split arm at that m (same "
                             "run); vs_lt = time / cublaslt (cuBLASLt's GEMM of the W x m rows alone); TFLOPS = 2*W*m*N*K "
                             "per rank / time; !=split = elements not bitwise equal to split-lsa's output (by design 0; "
                             "fused-ce only at an m where split-lsa ran its tile unsplit, else -); "
                             "time = per-rank max of medians over %d samples of a %d-call graph",
                             iters, calls)};
  }
  std::string world1_label() const override { return "world 1: one rank on one GPU, nothing gathered"; }

 private:
  std::optional<fused::Calibration> table_;  // --calibration's (the auto arm's)
};

std::vector<SuiteArm> AgGemmTrait::arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                                        std::vector<std::string>& notes) const {
  using Mode = AllGatherGemmMode;
  using fused_bench::op_arm;
  fused_bench::ArmList list(wanted, notes);
  SuiteArm gemm_only = op_arm("gemm-only", Mode::kGemmOnly);
  gemm_only.partial = true;
  list.add(gemm_only);
  list.add({.name = "cublaslt", .kind = ArmKind::kCublasLt, .partial = true});
    list.add({.name = "weave-gemm", .kind = ArmKind::kWeaveGemm, .partial = true});
  const std::string ce_why = emulated ? bench::EmulatedWorld::copy_engine_unsupported_reason(world) : "";
  fused_bench::add_split_arms(list, Mode::kSplitLsa, Mode::kSplitCe, ce_why);
  // Copy engines pull the peers' rows under the GEMM. In the emulated world its kernel waits for
  // its own copies while the suite's per-rank graphs enter the GPU's shared queues as the driver
  // schedules them (seen: a 30 s landed-wait timeout at the first replay, as GemmAllReduce fused-ce).
  const std::string fused_why =
      !fused::agm_fused_ce_quant(base_.quant, base_.out_dtype)
          ? "not run: fused-ce runs quant bf16, ptpc and blockscale with bf16 output, not " +
                std::string(to_string(base_.quant)) + " -> " + std::string(to_string(base_.out_dtype))
      : world == 1 ? "not run at world 1 (nothing to pull)"
      : emulated   ? "not timed in the emulated world (per-rank graphs share one GPU's hardware queues, and its kernel "
                     "waits for its own copy streams: docs/memory_ordering.md \"agm-fused-ce\"); tested in "
                     "EmulatedAllGatherGemm.*, timed on 2+ GPUs"
                   : "";
  SuiteArm fused_ce = op_arm("fused-ce", Mode::kFusedCe);
  fused_ce.auto_takeable = true;  // --calibrate records it where it is fastest
  list.add_unless(fused_ce, fused_why);
  // auto runs fused-ce where its table says so: not in the emulated world, for fused-ce's reason.
  const bool auto_pulls = table_ && fused::agm_auto_hosts_fused_ce(base_, world, &*table_);
  list.add_unless(op_arm("auto", Mode::kAuto),
                  auto_pulls && emulated ? "not timed in the emulated world: --calibration " + table_->source +
                                               " names fused-ce (" + fused_why + ")"
                                         : "");
  fused_bench::add_over_nccl_arms(list, Mode::kSplitNccl, /*gather_baselines=*/true, over_nccl, emulated);
  return list.take();
}

void add_ag_gemm_suite(CLI::App& bench, BenchOptions& common) {
  static AgmBenchOptions options;
  fused_bench::SuiteHelp help;
  help.name = "ag-gemm";
  help.description =
      "weave::AllGatherGemm per m rows per rank: gemm-only, cuBLASLt's GEMM, split-lsa, split-ce, fused-ce and auto "
      "alternating in one process; every arm's rows of every source rank checked (#wrong) and every gathering mode "
      "against split-lsa bit for bit (!=split; fused-ce where split-lsa ran its tile unsplit). --emulate-world W: "
      "W ranks on ONE GPU, labelled as such (not NVLink numbers). "
      "--devices 0,1,...: one rank per GPU over NCCL, with split-nccl and the NCCL all-gather + cuBLASLt baselines. "
      "Every rank r holds A_r [m, K] and the column shard B [N, K]; every rank computes [A_0; ...; A_{W-1}] B^T, "
      "[W m, N]: the activations (e4m3 plus scales in the fp8 modes) are gathered first, then one GEMM of W m rows "
      "(not gemm-ag, which gathers the output).";
  help.auto_modes = "split-lsa, fused-ce";
  help.config = "AllGatherGemmConfig";
  help.world1 = "world 1: one rank on one GPU; nothing is gathered, so the arms show the GEMM of\n"
                "                     this rank's rows and each mode's cost around it (the copy of A into the op's\n"
                "                     window included); cublaslt is the baseline.";
  help.footer =
      "Arms (per m, timed alternating, CUDA graphs of --calls calls per rank, ranks barriered before every\n"
      "sample, per-rank max of medians):\n"
      "  gemm-only   the op in gemm-only mode: A_r copied into its slot, the GEMM of the W m rows with only\n"
      "              this rank's rows there (checked: own rows)\n"
      "  cublaslt    cuBLASLt's GEMM of the W m gathered rows, this rank's rows in place before timing and\n"
      "              nothing moved: the GEMM alone, the strongest GEMM baseline (checked: own rows; no mxfp8\n"
      "              on Hopper; emulated world: not capped to an SM share, as weave's grids are)\n"
      "  weave-gemm  weave::Gemm of the same W m rows as a caller plans it (every SM; K split, decode GEMV\n"
      "              where its planner takes them; emulated world: planned for the rank's SM share, like the\n"
      "              op's grids): what gemm-only is held to; a closing line per m gives\n"
      "              gemm-only / weave-gemm (checked: own rows)\n"
      "  split-lsa   A_r into the op's window, weave's lsa all-gather of the rows, then of the scales, in\n"
      "              place, then the GEMM\n"
      "  split-ce    the same with weave's copy-engine all-gather (emulated world: W <= 2 only, because the\n"
      "              ranks' copy streams would share hardware queues with peers' waiting kernels)\n"
      "  fused-ce    W > 1, bf16 / ptpc / blockscale with bf16 out: copy engines pull the peers' rows and\n"
      "              scales chunk by chunk into the window while the GEMM (the planner's tile, own rows first)\n"
      "              runs, each tile waiting for the chunks it reads (not timed in the emulated world: its\n"
      "              kernel waits for its own copy streams, which per-rank graphs cannot order there)\n"
      "  auto        the op's choice per call (shown as auto(<mode>): split-lsa, gemm-only at world 1;\n"
      "              fused-ce only where --calibration's table measured it fastest, and then not in the\n"
      "              emulated world)\n"
      "  split-nccl  --devices only: ncclAllGather of the rows and the scales in one NCCL group, then the\n"
      "              GEMM (a split arm)\n"
      "  cublaslt+nccl      --devices only: ncclAllGather of A_r's rows and scales into plain buffers (out\n"
      "              of place, one NCCL group), then cuBLASLt's GEMM of the W m rows\n"
      "  cublaslt+nccl-sym  the same in place in an NCCL symmetric window (this rank's rows already in its\n"
      "              slot, as a caller that writes A there has them; NCCL's symmetric kernels): the strongest\n"
      "              baseline; JSON rows carry speedup_vs_cublaslt_nccl[_sym] (> 1: faster). Both NCCL arms'\n"
      "              gathered buffers are NaN-poisoned before every checked call (their own rows re-seeded), so\n"
      "              a gather that brings nothing shows; blockscale: cuBLASLt reads its own scale layout,\n"
      "              converted once from a gather before timing (as the cuBLASLt baselines do everywhere)\n"
      "No comm-only arm and no overlap line (split-lsa minus gemm-only is the gather's cost). --calibrate\n"
      "records split-lsa or fused-ce per m (fused-ce is timed on 2+ GPUs only, so an emulated table holds\n"
      "split-lsa). --preset LAYER.GEMM[,...] takes the\n"
      "column-parallel and replicated GEMMs of the decoder layer table (`weave plan --presets`), each run in turn.\n"
      "Columns: m (rows per rank) n k quant out mode time_us ratio (time / best split arm, same run) vs_lt\n"
      "(time / cublaslt) TFLOPS (2*W*m*N*K per rank / time) noise% #wrong (elements outside the GEMM tolerance\n"
      "against a CUDA-core reference GEMM of each source rank's A, after NaN poison, before and after\n"
      "timing, summed over ranks and sources) !=split (elements of split-ce, auto and split-nccl not bitwise\n"
      "equal to split-lsa's output of the same inputs: 0 by design, the same GEMM over the same bytes; fused-ce's\n"
      "too where split-lsa's plan ran the same tile unsplit, else -: another tile or a K split sums in another order) world\n"
      "(W, or W-emu). JSON rows: algbw = the gathered A and scales (W m rows) / time, busbw = algbw (W-1)/W.\n";
  fused_bench::add_fused_suite<AgGemmTrait>(
      bench, common, options, help,
      [](CLI::App& app, AgGemmOptions& shape) { add_ag_gemm_options(app, shape, /*with_layout=*/false, /*with_mode=*/false, /*many=*/true); },
      ag_gemm_shapes);
}

[[maybe_unused]] const bool kRegistered =
    register_bench_suite({"ag-gemm",
                          "AllGatherGemm modes per m rows per rank (A gathered, then one GEMM of W m rows) against "
                          "cuBLASLt's GEMM (world 1, or --emulate-world W on one GPU: not NVLink numbers; --devices: "
                          "one rank per GPU over NCCL, against ncclAllGather + cuBLASLt)",
                          add_ag_gemm_suite, nullptr});

}  // namespace
}  // namespace weave::cli
