// `weave bench gemm-ar`: weave::GemmAllReduce's modes against each other and against cuBLASLt's
// GEMM in one process, per M (every rank r: A_r [M, K_r], B_r [N, K_r]; out = sum_r A_r B_r^T).
//
// Worlds (as `weave bench gemm-ag`; the shared parts are in fused_suite.hpp):
//   world 1 (the default)      one rank on one GPU (a one-rank group): nothing is reduced, so
//                              gemm-only, split-lsa and split-ce are the same GEMM into the op's
//                              window, fused is the fused kernel with no peer, auto resolves to
//                              gemm-only; the arms show the GEMM and each mode's machinery around it.
//   --emulate-world W (1..8)   W ranks as W host threads on ONE GPU (bench::EmulatedWorld): the
//                              op code and kernels are the ones that run over NCCL windows, but a
//                              "peer" store lands in the same GPU's L2/HBM, the W ranks share the
//                              GPU's SMs (each rank's grid is SMs / W - 1) and its HBM. Every row
//                              and the header say: kEmulatedLabel. Protocol and overlap numbers,
//                              never NVLink numbers.
//   --devices D0[,D1,...]      one rank per listed GPU over real NCCL communicators (one host
//                              thread each; world 1 with one ordinal): NVLink numbers at W >= 2,
//                              and split-nccl plus the baselines users run today (below).
//
// Arms per M, all timed alternating under CUDA graphs of --calls calls per rank, after warm-up,
// every rank replaying its graph at the same time, ranks barriered before every sample; median
// per rank, then the per-rank maximum of medians:
//   gemm-only   the op in gemm-only mode: this rank's partial alone (weave's 128x128 GEMM, the one
//               the split modes run): T_gemm
//   cublaslt    cuBLASLt's GEMM of this rank's shard into a buffer of its own, the strongest GEMM
//               baseline (none for mxfp8 on Hopper). In the emulated world the W ranks' cuBLASLt
//               GEMMs are not capped to an SM share as weave's grids are
//   comm-only   weave's lsa all-reduce alone (a Collective, zero-copy: its window input -> its
//               window output, M x N bf16), W > 1: T_comm. In the emulated world only when --arms
//               names it, and then with an empty kernel after each call (gemm-ag's reason)
//   split-lsa   GEMM into the window, then weave's lsa all-reduce in place
//   split-ce    the same with weave's copy-engine all-reduce (emulated world: W <= 2 only)
//   decode      W > 1, m <= 32: weave's decode GEMV into the window, then weave's lsa all-reduce
//               (LL at these sizes) in place; a split arm (it counts toward the best split)
//   fused       one kernel: peers' bands out as bf16 partials, own band summed with them, results
//               stored to every rank
//   fused-rs    MORI's structure (control arm): the GEMM kernel scatters every tile as a partial to
//               its owner, a tail kernel reduces the own band and gathers it
//   fused-ce    the fused schedule with copy-engine legs: every tile stored locally, each peer's
//               copy stream pulls partials and final chunks as their flags arrive (not timed in
//               the emulated world: its kernel waits for its own copies, and per-rank graphs share
//               the GPU's queues; the note says so)
//   auto        the op's own choice per call (the row says which mode it took and why)
//   split-nccl  --devices only: weave's GEMM into the window, then ncclAllReduce in place (a split arm)
//   cublaslt+nccl, cublaslt+nccl-sym   --devices only: cuBLASLt's GEMM of this rank's shard, then
//               ncclAllReduce in place, on a plain cudaMalloc buffer / on a buffer in an NCCL
//               symmetric window (NCCL's symmetric kernels): what users run today, the baselines
//               every row's speedup_vs_* is against
// ratio = time / the best split arm (split-lsa, split-ce, decode) at that M in the same run; vs_lt = time /
// cublaslt. TFLOPS = 2*M*N*K_r per rank over the arm's time; algbw = M*N*2 bytes / time, busbw =
// algbw * 2(W-1)/W (nccl-tests' all-reduce convention). Overlap efficiency (T_gemm + T_comm -
// T_fused) / min(T_gemm, T_comm) where gemm-only, comm-only and fused were all measured.
//
// Inputs: every rank s has its own random A_s and B_s (bench::random_operand, quantised by the
// host reference); cold weights by default: every rank rotates through its own identical copies of
// B_s (together past 3 x L2). Correctness of every arm, before and after timing: the output is
// filled with NaN, every rank barriers, one call runs (after timing: no call; the output the timed
// graph replays left, poisoned before the timing), and on the GPU
//   - gemm-only and cublaslt are compared with bench::gpu_reference_gemm of this rank's A_r, B_r
//     (a plain CUDA-core GEMM, not weave's kernel) within bench::gemm_tolerance;
//   - every reducing arm with the sum over ranks of those references within
//     bench::reduced_gemm_tolerance (bounded by the terms' magnitudes: terms may cancel);
//     comm-only's input is this rank's reference rounded to bf16;
//   - fused, fused-rs, fused-ce, split-ce and auto are compared bit for bit with split-lsa's output of the same call
//     (equal by design: the same tiles, the same fp32 sum of bf16 partials in rank order); not
//     fused under --exact-own, which keeps the own term in fp32, nor decode (and auto where it
//     took decode), whose GEMV sums K in another order.
// #wrong sums elements outside the bound over ranks and both checks, !=split the elements that
// differ from split-lsa; a row with either > 0 (or an arm that failed) makes the exit status 1.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "bench/harness.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/fused_options.hpp"
#include "cli/gemm_ar_options.hpp"
#include "cli/registry.hpp"
#include "cli/suites/fused_suite.hpp"
#include "comm/collective_impl.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "fused/calibration.hpp"
#include "fused/all_reduce/impl.hpp"
#include "gemv/gemv.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/collectives.hpp"
#include "weave/communicator.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/presets.hpp"
#include "weave/quant.hpp"

namespace weave::cli {
namespace {

using fused_bench::ArmResult;
using fused_bench::kEmulatedLabel;
using fused_bench::num;

struct GarBenchOptions : fused_bench::WorldOptions {
  GemmArOptions shape;
  std::string calibrate;  // write the fastest auto-takeable mode per M to this file
  std::string calibration;  // the auto arm consults this table (a --calibrate output)
};

using fused_bench::ArmKind;

struct ArmSpec {
  std::string name;
  ArmKind kind = ArmKind::kOp;
  GemmAllReduceMode mode = GemmAllReduceMode::kGemmOnly;
  bool split = false;  // counts toward "best split"
};

const std::string kCommOnlyEmulatedNote = fused_bench::comm_only_emulated_note(
    "seen with gemm-ag's lsa all-gather on the device, 2026-12-01; the all-reduce's lsa calls chain the same way");

const std::vector<std::string> kArmNames = {"gemm-only", "cublaslt", "cublaslt+nccl", "cublaslt+nccl-sym", "comm-only",
                                            "split-lsa", "split-ce", "split-nccl", "decode", "fused", "fused-rs",
                                            "fused-ce", "auto"};

// The arms of this world (in timing order) and a note for every arm left out.
std::vector<ArmSpec> arms_for(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                              std::vector<std::string>& notes) {
  auto want = [&](const std::string& n) {
    return wanted.empty() || std::find(wanted.begin(), wanted.end(), n) != wanted.end();
  };
  std::vector<ArmSpec> arms;
  auto add = [&](ArmSpec a) {
    if (want(a.name)) arms.push_back(std::move(a));
  };
  add({"gemm-only", ArmKind::kOp, GemmAllReduceMode::kGemmOnly, false});
  add({"cublaslt", ArmKind::kCublasLt, GemmAllReduceMode::kAuto, false});
  if (over_nccl) {
    add({"cublaslt+nccl", ArmKind::kCublasLtNccl, GemmAllReduceMode::kAuto, false});
    add({"cublaslt+nccl-sym", ArmKind::kCublasLtNcclSym, GemmAllReduceMode::kAuto, false});
  } else {
    for (const char* b : {"cublaslt+nccl", "cublaslt+nccl-sym"})
      if (want(b)) notes.push_back(std::string(b) + ": not run (needs --devices: real NCCL communicators)");
  }
  const bool comm_named = std::find(wanted.begin(), wanted.end(), "comm-only") != wanted.end();
  if (world == 1) {
    if (want("comm-only")) notes.push_back("comm-only: not run at world 1 (nothing to reduce)");
  } else if (emulated && !comm_named) {
    notes.push_back(kCommOnlyEmulatedNote);
  } else {
    add({"comm-only", ArmKind::kCommOnly, GemmAllReduceMode::kAuto, false});
  }
  add({"split-lsa", ArmKind::kOp, GemmAllReduceMode::kSplitLsa, true});
  const std::string ce_why = emulated ? bench::EmulatedWorld::copy_engine_unsupported_reason(world) : "";
  if (!ce_why.empty()) {
    if (want("split-ce")) notes.push_back("split-ce: " + ce_why);
  } else {
    add({"split-ce", ArmKind::kOp, GemmAllReduceMode::kSplitCe, true});
  }
  // decode (GEMV + the lsa all-reduce) is a split arm of its own rows, m <= 32 (per-M note below).
  if (world > 1) add({"decode", ArmKind::kOp, GemmAllReduceMode::kDecode, true});
  add({"fused", ArmKind::kOp, GemmAllReduceMode::kFused, false});
  add({"fused-rs", ArmKind::kOp, GemmAllReduceMode::kFusedRs, false});
  if (world == 1) {
    if (want("fused-ce")) notes.push_back("fused-ce: not run at world 1 (nothing to copy: it runs as fused)");
  } else if (emulated) {
    // Its kernel waits for its own copies; this suite times per-rank graphs, which enter the GPU's
    // shared queues as the driver schedules them, so a rank's copy wait can sit ahead of its
    // peer's kernel (seen in the op's graph test). Its correctness and a one-graph time of both
    // ranks are in the GPU tests (EmulatedGemmAllReduce.FusedCe*).
    if (want("fused-ce"))
      notes.push_back("fused-ce: not timed in the emulated world (per-rank graphs share one GPU's hardware queues, "
                      "and its kernel waits for its own copy streams: docs/memory_ordering.md \"ar-fused-ce\"); "
                      "tested in EmulatedGemmAllReduce.FusedCe*, timed on 2+ GPUs");
  } else if (!ce_why.empty()) {
    if (want("fused-ce")) notes.push_back("fused-ce: " + ce_why);
  } else {
    add({"fused-ce", ArmKind::kOp, GemmAllReduceMode::kFusedCe, false});
  }
  add({"auto", ArmKind::kOp, GemmAllReduceMode::kAuto, false});
  if (over_nccl) {
    add({"split-nccl", ArmKind::kOp, GemmAllReduceMode::kSplitNccl, true});
  } else if (want("split-nccl")) {
    notes.push_back(std::string("split-nccl: not run (") +
                    (emulated ? "the emulated world has no NCCL communicator" : "this world 1 is a one-rank group without NCCL") +
                    "; --devices runs over real NCCL communicators)");
  }
  return arms;
}

// Whether an arm's output must equal split-lsa's bit for bit (the header's reasons), given the
// mode it ran.
bool equal_to_split_by_design(const ArmSpec& spec, GemmAllReduceMode ran, bool exact_own) {
  if (spec.kind != ArmKind::kOp || spec.name == "gemm-only" || spec.name == "split-lsa") return false;
  if (ran == GemmAllReduceMode::kDecode) return false;  // the GEMV sums K in another order than the tile
  if (ran == GemmAllReduceMode::kSplitNccl) return false;  // NCCL sums in its own order
  return !(exact_own && (ran == GemmAllReduceMode::kFused || ran == GemmAllReduceMode::kFusedCe));
}

// One rank's object of one arm (made once; cuBLASLt per M).
struct RankArm {
  std::unique_ptr<GemmAllReduce> op;
  std::unique_ptr<Collective> coll;
  std::unique_ptr<bench::CublasLtGemm> lt;
  std::vector<bench::CublasLtScales> lt_scales;
  bench::DeviceBuffer lt_c;  // cuBLASLt's C [m, n] bf16
  std::unique_ptr<SymmetricWindow> sym;  // cublaslt+nccl-sym: C in an NCCL symmetric window [m_max, n] bf16
  std::string unavailable;   // the reason, when the arm cannot run here (every rank the same)
};

using RankState = fused_bench::RankState<RankArm>;

int run_gemm_ar_suite(const BenchOptions& common, const GarBenchOptions& opt) {
  // Every option first: nothing below may probe a GPU or wait for one before the input is known good.
  check_bench_options(common);
  fused_bench::check_world_options(common, opt.emulate_world, "gemm-ar");
  check_output_file("--calibrate", opt.calibrate);
  const bool emulated = opt.emulate_world > 1;
  const bool over_nccl = !common.devices.empty();
  const int world = fused_bench::world_of(common, opt.emulate_world);
  for (const auto& a : opt.arms)
    WEAVE_EXPECT_ARG(std::find(kArmNames.begin(), kArmNames.end(), a) != kArmNames.end(),
                     "--arms: '" << a << "' is not one of gemm-only, cublaslt, comm-only, split-lsa, split-ce, "
                                 << "split-nccl, decode, fused, fused-rs, fused-ce, auto");
  const GemmArOptions& shape = opt.shape;  // mxfp8: raw scales (the suite has no --scale-layout)
  const GemmAllReduceConfig base = gemm_ar_config(shape, world);
  // The table must be for this op shape (refused before any GPU work); only the auto arm reads it.
  calibration_option(opt.calibration, /*mode_is_auto=*/true, "gemm-ar", base.quant, base.scale_layout, DType::kBF16, base.n,
                     base.k, world);
  WEAVE_EXPECT_ARG(opt.timeout_s >= 0.1 && opt.timeout_s <= 600, "--timeout " << opt.timeout_s << ": must be in 0.1..600 s");
  std::vector<std::string> notes;
  const std::vector<ArmSpec> specs = arms_for(world, emulated, over_nccl, opt.arms, notes);
  std::string left_out;
  for (const auto& note : notes) left_out += "; " + note;
  WEAVE_EXPECT_ARG(!specs.empty(), "--arms: none of the arms named runs at world " << world << left_out);

  const fused_bench::SuiteDevice gpu(common, "gemm-ar");
  if (!shape.preset.empty()) {  // which layer this run is (after every check and the GPU probe)
    const ModelPreset& preset = model_preset(shape.preset);
    std::printf("# %s\n", preset_line(preset, shard_model_preset(preset, world, base.quant)).c_str());
  }
  const int device = gpu.device;
  cudaStream_t main_stream = gpu.main_stream;

  const int64_t n = base.n, k = base.k;
  const std::string quant(to_string(base.quant)), out_name = "bf16";
  const bench::Tolerance own_tol = bench::gemm_tolerance(base.quant, DType::kBF16);
  const bench::Tolerance sum_tol = bench::reduced_gemm_tolerance(base.quant, world);
  // An NCCL all-reduce of bf16 partials may round each of its W - 1 partial sums (ring): one more
  // bf16 half-ulp (2^-9 of the terms' magnitude) per step on top of sum_tol.
  bench::Tolerance nccl_sum_tol = sum_tol;
  nccl_sum_tol.rtol += (world - 1) * std::ldexp(1.0, -9);
  const std::string world_tag = emulated ? std::to_string(world) + "-emu" : std::to_string(world);
  int split_lsa = -1;  // the arm every by-design-equal arm is compared with
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == "split-lsa") split_lsa = static_cast<int>(i);

  std::printf("# weave bench gemm-ar: n=%lld k=%lld (K_r, per rank) %s -> bf16, world %d%s, cuda:%d\n",
              static_cast<long long>(n), static_cast<long long>(k), quant.c_str(), world,
              emulated    ? (" (" + std::string(kEmulatedLabel) + ")").c_str()
              : over_nccl ? (world > 1 ? " (one rank per GPU over NCCL)" : " (one rank over a real NCCL communicator: nothing reduced)")
                          : " (one rank, one GPU: nothing reduced; gemm-only, split-lsa and split-ce are the same GEMM)",
              device);
  if (emulated) {
    fused_bench::print_emulated_share(world);
    std::printf("# %s; cublaslt: the %d ranks' cuBLASLt GEMMs are not capped to an SM share (weave's grids are)\n",
                kEmulatedLabel, world);
  }
  std::fflush(stdout);

  // Weights: every source rank's B_s (the reference's copy) and, per rank, cold copies of its own.
  std::fprintf(stderr, "weave bench gemm-ar: generating B_s [%lld, %lld] %s of %d rank(s)\n", static_cast<long long>(n),
               static_cast<long long>(k), quant.c_str(), world);
  // The world first: the ranks' ops point into it, so it must outlive them (destroyed after states).
  fused_bench::SuiteWorld ew(common, opt.emulate_world, device, opt.timeout_s);
  std::vector<bench::DeviceOperand> bs;  // B_s on rank s's GPU
  for (int s = 0; s < world; ++s)
    bs.push_back(bench::upload_operand(
        bench::quantize_parallel(bench::random_operand(opt.seed * 1000003 + 1 + 104729 * static_cast<uint64_t>(s), n, k),
                                 n, k, base.quant, ref::Operand::kB),
        ew.device_of(s)));
  // Cold weights: a rank's copies together past 3 x L2 of its GPU (the ranks of the emulated world
  // share one L2, so there the copies of every rank count).
  const size_t b_bytes_per_l2 = bs[0].bytes() * static_cast<size_t>(over_nccl ? 1 : world);
  const int copies = common.hot ? 1 : bench::cold_copies(b_bytes_per_l2, static_cast<size_t>(gpu.l2_bytes));
  std::vector<std::unique_ptr<RankState>> states;
  const fused_bench::FreeStatesPerRank<RankState> free_states(ew, states);
  for (int r = 0; r < world; ++r) {
    states.push_back(std::make_unique<RankState>());
    WEAVE_CHECK_CUDA(cudaSetDevice(ew.device_of(r)));
    for (int c = 0; c < copies; ++c) states[r]->b.push_back(bench::clone_operand(bs[r]));
  }
  WEAVE_CHECK_CUDA(cudaSetDevice(device));
  const int calls = std::max(common.calls_per_graph, copies);

  // The ops, once per rank (collective: every rank builds the same ones).
  ew.run([&](comm::Group& g) {
    RankState& st = *states[g.rank()];
    WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
    uint64_t mask = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
      RankArm arm;
      try {
        if (specs[i].kind == ArmKind::kOp) {
          GemmAllReduceConfig c = base;
          c.mode = specs[i].mode;
          if (c.mode == GemmAllReduceMode::kAuto) c.calibration = opt.calibration;
          arm.op = GemmAllReduce::Impl::create(g, c);
        } else if (specs[i].kind == ArmKind::kCublasLtNcclSym) {
          WindowLayout layout;
          layout.add("c", RegionKind::kData, static_cast<size_t>(base.m_max) * static_cast<size_t>(n) * 2);
          arm.sym = std::make_unique<SymmetricWindow>(ew.communicator(g.rank()), std::move(layout));
        } else if (specs[i].kind == ArmKind::kCommOnly) {
          CollectiveConfig cc;
          cc.op = CollectiveOp::kAllReduce;
          cc.dtype = DType::kBF16;
          cc.transport = Transport::kLsa;
          cc.algorithm = Algorithm::kAuto;
          cc.max_count = static_cast<size_t>(base.m_max) * static_cast<size_t>(n);
          arm.coll = Collective::Impl::create(g, cc);
        }
      } catch (const Error& e) {
        if (e.status() != Status::kUnavailable && e.status() != Status::kUnsupported) throw;
        arm.unavailable = e.message();
      }
      if (arm.unavailable.empty()) mask |= uint64_t{1} << i;
      st.arms.push_back(std::move(arm));
    }
    g.agree(mask, "the gemm-ar arms available on every rank");
  });

  bench::Report report("gemm-ar");
  bool failed = false;
  fused::Calibration calibration = fused_bench::calibration_of(  // --calibrate: rows added per M below
      "gemm-ar", base.quant, base.scale_layout, DType::kBF16, n, k, world, world_tag, emulated);
  std::vector<std::string> summary_lines;
  for (size_t mi = 0; mi < shape.ms.size(); ++mi) {
    const int64_t m = shape.ms[mi];
    const size_t elems = static_cast<size_t>(m) * static_cast<size_t>(n);
    const size_t out_bytes = elems * 2;
    const std::string shape_name = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
    const GemmProblem prob{.m = m, .n = n, .k = k, .mode = base.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
    std::fprintf(stderr, "weave bench gemm-ar: m=%lld (%zu/%zu): inputs and reference GEMMs of %d source rank(s)\n",
                 static_cast<long long>(m), mi + 1, shape.ms.size(), world);
    // Per source rank: A_s and its reference GEMM; their sum and the sum of their magnitudes.
    std::vector<ref::QuantMatrix> qa;
    for (int s = 0; s < world; ++s)
      qa.push_back(bench::quantize_parallel(
          bench::random_operand(opt.seed * 1000003 + 7919 * static_cast<uint64_t>(m) + 17 * s + 2, m, k), m, k, base.quant,
          ref::Operand::kA));
    std::vector<bench::DeviceOperand> as(world);  // A_s on rank s's GPU
    std::vector<bench::DeviceBuffer> refs(world);  // rank s's reference GEMM (fp32), on its GPU
    // The sum over ranks of the references and of their magnitudes: one copy on the shared GPU (the
    // emulated world and world 1), or each rank's own, summed by ncclAllReduce (--devices).
    std::vector<bench::DeviceBuffer> sums(over_nccl ? world : 1), mags(over_nccl ? world : 1);
    if (!over_nccl) {
      sums[0] = bench::DeviceBuffer(elems * sizeof(float));
      mags[0] = bench::DeviceBuffer(elems * sizeof(float));
      WEAVE_CHECK_CUDA(cudaMemsetAsync(sums[0].get(), 0, sums[0].bytes(), main_stream));
      WEAVE_CHECK_CUDA(cudaMemsetAsync(mags[0].get(), 0, mags[0].bytes(), main_stream));
      for (int s = 0; s < world; ++s) {
        as[s] = bench::upload_operand(qa[s], device);
        refs[s] = bench::DeviceBuffer(elems * sizeof(float));
        bench::gpu_reference_gemm(prob, as[s].view, bs[s].view, {as[s].scale_view, bs[s].scale_view},
                                  refs[s].as<float>(), main_stream);
        bench::gpu_add_term(sums[0].as<float>(), mags[0].as<float>(), refs[s].as<float>(), static_cast<int64_t>(elems),
                            main_stream);
      }
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(main_stream));
    } else {
      ew.run([&](comm::Group& g) {
        const int r = g.rank();
        cudaStream_t st = states[r]->stream;
        as[r] = bench::upload_operand(qa[r], g.device());
        refs[r] = bench::DeviceBuffer(elems * sizeof(float));
        bench::gpu_reference_gemm(prob, as[r].view, bs[r].view, {as[r].scale_view, bs[r].scale_view},
                                  refs[r].as<float>(), st);
        sums[r] = bench::DeviceBuffer(elems * sizeof(float));
        mags[r] = bench::DeviceBuffer(elems * sizeof(float));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(sums[r].get(), 0, sums[r].bytes(), st));
        WEAVE_CHECK_CUDA(cudaMemsetAsync(mags[r].get(), 0, mags[r].bytes(), st));
        bench::gpu_add_term(sums[r].as<float>(), mags[r].as<float>(), refs[r].as<float>(), static_cast<int64_t>(elems), st);
        WEAVE_CHECK_NCCL(ncclAllReduce(sums[r].get(), sums[r].get(), elems, ncclFloat32, ncclSum, g.nccl(), st));
        WEAVE_CHECK_NCCL(ncclAllReduce(mags[r].get(), mags[r].get(), elems, ncclFloat32, ncclSum, g.nccl(), st));
        comm::sync_stream_bounded(st, opt.timeout_s, "gemm-ar: the reference's sum over ranks (ncclAllReduce)");
      });
    }
    const auto sum_of = [&](int r) { return sums[over_nccl ? r : 0].as<float>(); };
    const auto mag_of = [&](int r) { return mags[over_nccl ? r : 0].as<float>(); };
    std::vector<std::vector<ArmResult>> res(world, std::vector<ArmResult>(specs.size()));
    std::string error;
    try {
      ew.run([&](comm::Group& g) {
        const int r = g.rank(), w = g.world_size(), dev = g.device();
        RankState& st = *states[r];
        cudaStream_t stream = st.stream;
        std::vector<ArmResult>& rr = res[r];
        // cuBLASLt: per M, since its descriptors and algorithm are per shape.
        for (size_t i = 0; i < specs.size(); ++i) {
          if (!fused_bench::is_cublaslt(specs[i].kind)) continue;
          RankArm& a = st.arms[i];
          a.lt.reset();
          a.lt_scales.clear();
          a.unavailable = bench::CublasLtGemm::supports(prob);
          if (!a.unavailable.empty()) continue;
          try {
            a.lt = std::make_unique<bench::CublasLtGemm>(prob, dev);
          } catch (const Error& e) {
            if (e.status() != Status::kUnsupported) throw;
            a.unavailable = e.message();
            continue;
          }
          for (const auto& b : st.b) a.lt_scales.push_back(a.lt->prepare_scales({as[r].scale_view, b.scale_view}, stream));
          if (!a.sym) a.lt_c = bench::DeviceBuffer(out_bytes);
        }
        auto enqueue = [&, r](size_t i, cudaStream_t s, int call) {
          RankArm& a = st.arms[i];
          const bench::DeviceOperand& b = st.b[static_cast<size_t>(call) % st.b.size()];
          switch (specs[i].kind) {
            case ArmKind::kOp: a.op->run(m, as[r].view, b.view, GemmScales{as[r].scale_view, b.scale_view}, s); break;
            case ArmKind::kCommOnly:
              a.coll->run(a.coll->window_input(), a.coll->window_output(), elems, s);
              if (w > 1 && g.ranks_per_device() > 1) fused_bench::end_pdl_chain(s);
              break;
            case ArmKind::kCublasLt:
            case ArmKind::kCublasLtNccl:
            case ArmKind::kCublasLtNcclSym: {
              void* c = a.sym ? static_cast<void*>(a.sym->region("c")) : a.lt_c.get();
              a.lt->run(as[r].view, b.view, a.lt_scales[static_cast<size_t>(call) % st.b.size()],
                        TensorView::matrix(c, DType::kBF16, m, n, dev), s);
              // What users run today: the GEMM, then NCCL's all-reduce in place (its symmetric
              // kernels where the buffer lies in a registered window).
              if (specs[i].kind != ArmKind::kCublasLt)
                WEAVE_CHECK_NCCL(ncclAllReduce(c, c, elems, ncclBfloat16, ncclSum, g.nccl(), s));
              break;
            }
          }
        };
        auto output_of = [&](size_t i) -> void* {
          RankArm& a = st.arms[i];
          if (a.op) return a.op->output(m).data;
          if (a.coll) return a.coll->window_output();
          if (a.sym) return a.sym->region("c");
          return a.lt_c.get();
        };
        // NCCL sums bf16 partials step by step (its ring rounds W - 1 times): nccl_sum_tol.
        auto summed_by_nccl = [&](size_t i) {
          if (specs[i].kind == ArmKind::kCublasLtNccl || specs[i].kind == ArmKind::kCublasLtNcclSym) return true;
          return st.arms[i].op && st.arms[i].op->last_mode() == GemmAllReduceMode::kSplitNccl;
        };
        // Fresh poison, every rank barriered, one call, the output against its reference.
        // fresh_call = false: no call of its own; the output the timed graph replays left (poisoned
        // before the timing, so a replay that wrote nothing shows as NaN).
        auto check = [&](size_t i, const char* when, bool fresh_call) {
          RankArm& a = st.arms[i];
          void* o = output_of(i);
          if (fresh_call) {
            bench::poison_nan(o, out_bytes, DType::kBF16, stream);
            if (specs[i].kind == ArmKind::kCommOnly)
              bench::gpu_round_reference(refs[r].as<float>(), a.coll->window_input(), elems, DType::kBF16, stream);
            WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
            g.barrier();
            enqueue(i, stream, calls - 1);
          }
          comm::sync_stream_bounded(stream, opt.timeout_s, std::string("gemm-ar ") + specs[i].name + " check " + when);
          if (a.op) a.op->check();
          if (a.coll) a.coll->check();
          // gemm-only and cuBLASLt compute this rank's partial; every other arm the sum.
          const bool partial = specs[i].kind == ArmKind::kCublasLt || specs[i].mode == GemmAllReduceMode::kGemmOnly;
          const TensorView out = TensorView::matrix(o, DType::kBF16, m, n, dev);
          const ref::Comparison cmp =
              partial ? bench::gpu_compare(out, refs[r].as<float>(), own_tol, stream)
                      : bench::gpu_compare(out, sum_of(r), summed_by_nccl(i) ? nccl_sum_tol : sum_tol, stream, mag_of(r));
          ArmResult& ar = rr[i];
          ar.wrong_from.resize(1, -1);  // this rank's output (a sum has no single source)
          ar.wrong_from[0] = std::max<int64_t>(ar.wrong_from[0], 0) + cmp.wrong;
          ar.rel_l2 = std::max(ar.rel_l2, cmp.rel_l2);
          if (a.op && specs[i].mode == GemmAllReduceMode::kAuto) {
            ar.resolved = std::string(to_string(a.op->last_mode()));
            ar.reason = a.op->plan(m).reason;
          }
          g.barrier();
        };
        // After every arm's check of one round, each output still holds that call's result.
        auto compare_with_split = [&](const std::vector<size_t>& runnable) {
          if (split_lsa < 0 || !st.arms[split_lsa].unavailable.empty()) return;
          for (size_t i : runnable) {
            const GemmAllReduceMode ran = st.arms[i].op ? st.arms[i].op->last_mode() : GemmAllReduceMode::kAuto;
            if (!equal_to_split_by_design(specs[i], ran, base.exact_own)) continue;
            const int64_t d = bench::gpu_count_differing(output_of(i), output_of(split_lsa), elems, DType::kBF16, stream);
            rr[i].differing = std::max<int64_t>(rr[i].differing, 0) + d;
          }
          g.barrier();  // nobody's next call writes into an output before every rank compared
        };
        std::vector<size_t> runnable;
        for (size_t i = 0; i < specs.size(); ++i) {
          rr[i].unavailable = st.arms[i].unavailable;
          if (rr[i].unavailable.empty() && specs[i].mode == GemmAllReduceMode::kDecode && m > detail::kGemvMaxM)
            rr[i].unavailable = "decode runs m <= " + std::to_string(detail::kGemvMaxM) + " (the decode GEMV)";
          if (rr[i].unavailable.empty()) runnable.push_back(i);
        }
        if (runnable.empty()) return;
        for (size_t i : runnable) check(i, "before timing", true);
        compare_with_split(runnable);
        // The replays' own output is what is checked after the timing (issue 36 item 10): NaN first.
        for (size_t i : runnable) bench::poison_nan(output_of(i), out_bytes, DType::kBF16, stream);
        WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
        g.barrier();
        std::vector<bench::Arm> timed;
        for (size_t i : runnable)
          timed.push_back({specs[i].name, [&enqueue, i](cudaStream_t s, int call) { enqueue(i, s, call); }});
        const std::vector<bench::Timing> t = fused_bench::time_rank_arms(g, timed, common, calls, stream);
        for (size_t j = 0; j < runnable.size(); ++j) {
          rr[runnable[j]].timing = t[j];
          rr[runnable[j]].ran = true;
        }
        for (size_t i : runnable) check(i, "after timing (the timed replays' output)", false);
        compare_with_split(runnable);
      });
    } catch (const Error& e) {
      error = e.what();
    }
    if (!error.empty()) {
      failed = true;
      fused_bench::add_error_row(report, "gemm-ar", shape_name, quant + "->bf16", m, error, world, emulated);
      break;
    }

    // Rows: per arm, the per-rank maximum of medians; wrong and differing summed over ranks.
    const std::vector<bench::Timing> per_arm = fused_bench::max_over_ranks(res, specs.size());
    double best_split = bench::kNaN, lt_us = bench::kNaN, gemm_us = bench::kNaN, comm_us = bench::kNaN,
           fused_us = bench::kNaN, lt_nccl_us = bench::kNaN, lt_sym_us = bench::kNaN;
    std::string best_split_name;
    // --calibrate: the fastest of the modes auto can take (split-lsa, fused, decode) that ran right.
    const std::string best_auto_mode = fused_bench::fastest_right_arm(
        per_arm, res,
        [&](size_t i) {
          return specs[i].kind == ArmKind::kOp &&
                 (specs[i].mode == GemmAllReduceMode::kSplitLsa || specs[i].mode == GemmAllReduceMode::kFused ||
                  specs[i].mode == GemmAllReduceMode::kDecode);
        },
        [&](size_t i) { return std::string(to_string(specs[i].mode)); },
        [&](size_t i) { return specs[i].kind == ArmKind::kOp && specs[i].mode == GemmAllReduceMode::kSplitLsa; });
    for (size_t i = 0; i < specs.size(); ++i) {
      const double t = per_arm[i].median_us;
      if (std::isnan(t)) continue;
      if (specs[i].split && (std::isnan(best_split) || t < best_split)) best_split = t, best_split_name = specs[i].name;
      if (specs[i].kind == ArmKind::kCublasLt) lt_us = t;
      if (specs[i].kind == ArmKind::kCublasLtNccl) lt_nccl_us = t;
      if (specs[i].kind == ArmKind::kCublasLtNcclSym) lt_sym_us = t;
      if (specs[i].name == "gemm-only") gemm_us = t;
      if (specs[i].name == "comm-only") comm_us = t;
      if (specs[i].name == "fused") fused_us = t;
    }
    std::string progress;
    for (size_t i = 0; i < specs.size(); ++i) {
      bench::Row row;
      row.shape = shape_name;
      row.quant = quant + "->bf16";
      row.mode = specs[i].name;
      int64_t wrong = 0, differing = -1;
      double rel_l2 = -1;  // the worst rank's, against the reference the row says it was checked against
      nlohmann::json on_rank = nlohmann::json::array();
      for (int r = 0; r < world; ++r) {
        rel_l2 = std::max(rel_l2, res[r][i].rel_l2);
        const int64_t v = res[r][i].wrong_from.empty() ? -1 : res[r][i].wrong_from[0];
        on_rank.push_back(v);
        wrong += std::max<int64_t>(v, 0);
        if (res[r][i].differing >= 0) differing = std::max<int64_t>(differing, 0) + res[r][i].differing;
      }
      const std::string unavailable = res[0][i].unavailable;
      row.wrong = unavailable.empty() ? wrong : 0;
      row.extra = {{"world", world},
                   {"emulated", emulated},
                   {"m", m},
                   {"n", n},
                   {"k_per_rank", k},
                   {"quant", quant},
                   {"out", out_name},
                   {"wrong_on_rank", on_rank},
                   {"weight_copies_per_rank", copies},
                   {"calls_per_graph", calls},
                   {"chunks", base.chunks},
                   {"exact_own", base.exact_own},
                   {"over_nccl", over_nccl}};
      if (over_nccl) row.extra["devices"] = common.devices;
      if (emulated) row.extra["label"] = kEmulatedLabel;
      if (!unavailable.empty()) row.extra["unavailable"] = unavailable;
      if (!res[0][i].resolved.empty()) {
        row.extra["auto_resolved"] = res[0][i].resolved;
        row.extra["auto_reason"] = res[0][i].reason;
      }
      const bool partial = specs[i].kind == ArmKind::kCublasLt || specs[i].mode == GemmAllReduceMode::kGemmOnly;
      row.extra["checked"] = partial ? "this rank's partial against its reference GEMM (nothing is reduced)"
                                     : "the sum over ranks of their reference GEMMs (bound: bench::reduced_gemm_tolerance)";
      if (differing >= 0) row.extra["differing_from_split_lsa"] = differing;
      if (rel_l2 >= 0) row.extra["rel_l2_vs_reference"] = rel_l2;
      if (specs[i].kind == ArmKind::kCublasLt && emulated)
        row.extra["note"] = "the ranks' cuBLASLt GEMMs are not capped to an SM share (weave's grids are)";
      if (specs[i].kind == ArmKind::kCommOnly && emulated)
        row.extra["note"] = "includes one empty kernel per call (ends the PDL chain of lsa calls; see --help)";
      if (unavailable.empty() && per_arm[i].samples > 0) {
        row.time_us = per_arm[i].median_us;
        row.noise_pct = per_arm[i].noise_pct;
        if (specs[i].kind != ArmKind::kCommOnly) row.tflops = 2.0 * double(m) * double(n) * double(k) / (row.time_us * 1e6);
        if (world > 1 && !partial) {
          row.algbw_gbps = double(out_bytes) / (row.time_us * 1e3);
          row.busbw_gbps = row.algbw_gbps * 2.0 * double(world - 1) / double(world);
        }
        if (!std::isnan(best_split)) {
          row.baseline = "best-split:" + best_split_name;
          row.baseline_us = best_split;
          row.ratio = row.time_us / best_split;
        }
        if (!std::isnan(lt_us)) row.extra["ratio_vs_cublaslt"] = row.time_us / lt_us;
        // Against what users run today (> 1: this arm is faster).
        if (!std::isnan(lt_nccl_us)) row.extra["speedup_vs_cublaslt_nccl"] = lt_nccl_us / row.time_us;
        if (!std::isnan(lt_sym_us)) row.extra["speedup_vs_cublaslt_nccl_sym"] = lt_sym_us / row.time_us;
        if ((specs[i].name == "fused" || specs[i].name == "fused-ce") && !std::isnan(gemm_us) && !std::isnan(comm_us))
          row.extra["overlap_efficiency"] = fused_bench::overlap_efficiency(gemm_us, comm_us, row.time_us);
      }
      if (row.wrong != 0 || differing > 0) failed = true;
      progress += " " + specs[i].name +
                  (unavailable.empty() ? " " + num(row.time_us, 1) + " us (#wrong " + std::to_string(row.wrong) +
                                             (differing >= 0 ? ", !=split " + std::to_string(differing) : "") +
                                             (rel_l2 >= 0 ? ", rel_l2 " + num(rel_l2, 5) : "") + ")"
                                       : " unavailable");
      report.add(std::move(row));
    }
    std::fprintf(stderr, "weave bench gemm-ar: m=%lld:%s\n", static_cast<long long>(m), progress.c_str());
    if (!best_auto_mode.empty()) calibration.rows.push_back({m, best_auto_mode});
    if (!std::isnan(gemm_us) && !std::isnan(comm_us) && !std::isnan(fused_us))
      summary_lines.push_back(fused_bench::overlap_line(m, gemm_us, comm_us, fused_us, emulated));
  }

  // The table (nccl-tests style; every emulated row carries the label).
  fused_bench::print_table(report, {.n = n, .k = k, .quant = quant, .out = out_name, .world_tag = world_tag,
                                    .emulated = emulated, .vs_lt_key = "ratio_vs_cublaslt", .extra_header = "!=split",
                                    .extra_key = "differing_from_split_lsa"});
  std::printf("# ratio = time / the best split arm at that M (same run); vs_lt = time / cublaslt (the GEMM alone); "
              "TFLOPS = the GEMM's 2*M*N*K_r per rank / time; !=split = elements not bitwise equal to split-lsa's "
              "output (by design 0); time = per-rank max of medians over %d samples of a %d-call graph\n",
              common.iters, calls);
  std::printf("# rel_l2 (progress lines and JSON rel_l2_vs_reference): each arm's relative L2 error against the sum of "
              "the ranks' reference GEMMs of the same quantised operands (fp64-accumulated slices; gemm-only and "
              "cublaslt: against this rank's own reference)\n");
  if (base.exact_own) std::printf("# --exact-own: fused keeps its own term in fp32, so it is not compared bit for bit\n");
  const std::string busy_after =
      fused_bench::print_closing(report, summary_lines, notes, device, common.idle_threshold);
  if (!common.json_path.empty()) {
    const fused_bench::RunFacts facts{
        .device = device, .gate = gpu.gate, .busy_after = busy_after, .world = world, .emulated = emulated,
        .world1_label = "world 1: one rank on one GPU, nothing reduced (gemm-only, split-lsa and split-ce are the same GEMM)",
        .copies = copies, .calls = calls, .seed = opt.seed, .m_max = base.m_max, .notes = notes};
    report.write_json(common.json_path, fused_bench::run_meta(common, facts));
  }
  if (failed) {
    std::fprintf(stderr, "weave bench gemm-ar: FAILED: a row has #wrong > 0, differs from split-lsa, or an arm failed\n");
    if (!opt.calibrate.empty()) std::fprintf(stderr, "weave bench gemm-ar: --calibrate: nothing written (the run failed)\n");
    return 1;
  }
  if (!opt.calibrate.empty()) fused_bench::write_calibration(calibration, opt.calibrate, "gemm-ar");
  return 0;
}

int run_gemm_ar_presets(const BenchOptions& common, const GarBenchOptions& opt) {
  return fused_bench::run_each_preset(common, opt, "gemm-ar", gemm_ar_shapes, run_gemm_ar_suite);
}

GarBenchOptions& suite_options() {
  static GarBenchOptions o;
  return o;
}

void add_gemm_ar_suite(CLI::App& bench, BenchOptions& common) {
  GarBenchOptions& o = suite_options();
  auto* app = bench.add_subcommand(
      "gemm-ar",
      "weave::GemmAllReduce per M: gemm-only, cuBLASLt's GEMM, comm-only, split-lsa, split-ce, decode, fused, fused-rs, fused-ce and "
      "auto alternating in one process; every arm checked against a reference (#wrong) and fused against split-lsa bit for "
      "bit (!=split). --emulate-world W: W ranks on ONE GPU, labelled as such (not NVLink numbers). --devices 0,1,...: one rank "
      "per GPU over NCCL, with split-nccl and cuBLASLt + NCCL baselines.");
  add_common_bench_options(*app, common);
  add_gemm_ar_options(*app, o.shape, /*with_layout=*/false, /*with_mode=*/false, /*many=*/true);
  fused_bench::add_world_options(*app, o);
  app->add_option("--calibrate", o.calibrate,
                  "after the run, write per M the fastest mode auto may take (split-lsa, fused, decode; split-lsa unless another is more than 3% faster, so noise does not pick) to FILE: a "
                  "calibration table for GemmAllReduceConfig::calibration / weave plan gemm-ar --calibration (checked "
                  "before any GPU work)");
  app->add_option("--calibration", o.calibration,
                  "the auto arm takes the mode measured fastest per M in FILE (a --calibrate output of this shape, quant "
                  "and world; checked before any GPU work): shows auto against the best split with its table");
  app->footer(std::string(
      "Every rank r holds A_r [M, K_r] and B_r [N, K_r] (-k is K_r); every rank receives sum_r A_r B_r^T, [M, N] bf16.\n"
      "Worlds:\n"
      "  default            world 1: one rank on one GPU; nothing is reduced, so gemm-only, split-lsa and\n"
      "                     split-ce are the same GEMM into the op's window, fused runs with no peer and auto\n"
      "                     resolves to gemm-only: the arms show the GEMM and each mode's cost around it.\n"
      "  --emulate-world W  W ranks as threads on ONE GPU (the op's real code and kernels; peers' windows are\n"
      "                     allocations on the same GPU). Every row and the header are labelled\n"
      "                     '") + kEmulatedLabel + "'.\n"
      "                     The ranks share the GPU's SMs and HBM: per-rank TFLOPS is about 1/W of the GPU's.\n"
      "                     Sets CUDA_DEVICE_MAX_CONNECTIONS=32 (unless set) so the ranks' streams get queues.\n"
      "  --devices D0,D1,.. one rank per listed GPU over real NCCL communicators (one ordinal: world 1 over a\n"
      "                     one-rank communicator); adds split-nccl, cublaslt+nccl and cublaslt+nccl-sym.\n"
      "Arms (per M, timed alternating, CUDA graphs of --calls calls per rank, ranks barriered before every\n"
      "sample, per-rank max of medians):\n"
      "  gemm-only   the op in gemm-only mode: this rank's partial alone, weave's 128x128 GEMM (T_gemm)\n"
      "  cublaslt    cuBLASLt's GEMM of this rank's shard, the strongest GEMM baseline (no mxfp8 on Hopper;\n"
      "              emulated world: not capped to an SM share, as weave's grids are)\n"
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
      "              another order than the 128x128 tile)\n"
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
      "(T_gemm + T_comm - T_fused) / min(T_gemm, T_comm) is printed where all three were measured.\n"
      "Not part of a bare `weave bench`.\n");
  app->callback([&common] { exit_code() = run_gemm_ar_presets(common, suite_options()); });
}

[[maybe_unused]] const bool kRegistered =
    register_bench_suite({"gemm-ar",
                          "GemmAllReduce modes per M against cuBLASLt's GEMM (world 1, or --emulate-world W on one "
                          "GPU: not NVLink numbers; --devices: one rank per GPU over NCCL)",
                          add_gemm_ar_suite, nullptr});

}  // namespace
}  // namespace weave::cli
