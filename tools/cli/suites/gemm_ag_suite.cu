// `weave bench gemm-ag`: weave::GemmAllGather's modes against each other in one process, per M
// rows per rank (and, at world 1, against cuBLASLt plus the copy an out-of-place gather makes).
//
// Worlds:
//   world 1 (the default)      one rank on one GPU (a one-rank group): nothing is gathered, so the
//                              arms measure the GEMM into the op's window and what each mode's
//                              machinery costs around it; cublaslt+copy is the baseline.
//   --emulate-world W (1..8)   W ranks as W host threads on ONE GPU (bench::EmulatedWorld): the
//                              op code and kernels are the ones that run over NCCL windows, but a
//                              "peer" store lands in the same GPU's L2/HBM, the W ranks share the
//                              GPU's SMs (each rank's grid is SMs / W - 1) and its HBM. Every row
//                              and the header say: kEmulatedLabel. These are protocol and overlap
//                              numbers, never NVLink numbers.
//   --devices D0[,D1,...]      one rank per listed GPU over real NCCL communicators (one host
//                              thread each; world 1 with one ordinal): NVLink numbers at W >= 2,
//                              and split-nccl, cublaslt+nccl (cuBLASLt GEMM, then ncclAllGather on
//                              plain buffers) and cublaslt+nccl-sym (the same in an NCCL symmetric
//                              window: NCCL's fastest kernels), the baselines users run today.
//
// Arms per M, all timed alternating (A B C ... A B C ...) under CUDA graphs of --calls calls per
// rank (at least one call per weight copy), after warm-up, every rank replaying its graph at the
// same time, ranks aligned by Group::barrier() before every sample; median per rank, then the
// per-rank maximum of medians:
//   gemm-only      the op in gemm-only mode: the GEMM alone into this rank's rows of the window
//   comm-only      weave's lsa all-gather alone (in place, the same bytes), W > 1; in the emulated
//                  world only when --arms names it, and then with an empty kernel after each call
//                  (kCommOnlyEmulatedNote says why)
//   split-lsa      GEMM, then weave's lsa all-gather in place
//   split-ce       GEMM, then weave's copy-engine all-gather; in the emulated world only at W <= 2
//                  (the ranks' copy streams share the GPU's hardware queues with peers' waiting
//                  kernels there: false dependencies a real multi-GPU run does not have)
//   fused-lsa      one kernel: every tile stored to its rows here and at every peer
//   fused-ce       the same kernel storing to its own rows only; each chunk's flag triggers the
//                  peers' copy-engine pulls (emulated world: W <= 2, as split-ce)
//   auto           the op's own choice per call (the row says which mode it resolved to)
//   cublaslt+copy  world 1 only: cuBLASLt's GEMM into a buffer, then a copy into the output (what a
//                  GEMM followed by an out-of-place gather costs at world 1). The emulated world
//                  has no NCCL, so there is no cuBLASLt + NCCL baseline there.
// ratio = time / the best split arm (split-lsa, split-ce) at that M in the same run; vs_lt = time /
// cublaslt+copy (world 1). TFLOPS = the GEMM's 2*M*N*K per rank over the arm's time.
//
// Inputs: every source rank s has its own random A_s (bench::random_operand, quantised by the host
// reference), B is the same on every rank; cold weights by default: every rank rotates through its
// own identical copies of B (together past 3 x L2). Correctness of every arm, before and after
// timing: the output is filled with NaN, every rank barriers (no peer writes before that), one
// call runs (after timing: no call; the output the timed graph replays left, poisoned before the
// timing), and the rows of EVERY source rank are compared on the GPU against
// bench::gpu_reference_gemm of that source's A (a plain CUDA-core GEMM, not weave's kernel) within
// bench::gemm_tolerance; rows a call never wrote still hold poison and count as wrong. gemm-only is
// checked on its own rows only (it moves nothing by design); comm-only's input (its own rows) is
// the reference rounded to the output dtype. #wrong sums over ranks, sources and both checks; a
// row with #wrong > 0 (or an arm that failed) makes the exit status 1.
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
#include "cli/gemm_ag_options.hpp"
#include "cli/registry.hpp"
#include "cli/suites/fused_suite.hpp"
#include "comm/collective_impl.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "fused/all_gather/impl.hpp"
#include "testing/emulated_world.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/collectives.hpp"
#include "weave/communicator.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/presets.hpp"
#include "weave/quant.hpp"

namespace weave::cli {
namespace {

using fused_bench::ArmResult;
using fused_bench::fmt;
using fused_bench::kEmulatedLabel;
using fused_bench::num;

struct GagBenchOptions : fused_bench::WorldOptions {
  GemmAgOptions shape;
  std::string calibrate;  // write the fastest auto-takeable mode per M to this file
  std::string calibration;  // the auto arm consults this table (a --calibrate output)
};

using fused_bench::ArmKind;

struct ArmSpec {
  std::string name;
  ArmKind kind = ArmKind::kOp;
  GemmAllGatherMode mode = GemmAllGatherMode::kGemmOnly;
  bool split = false;  // counts toward "best split"
};

// comm-only in the emulated world: fused_bench::comm_only_emulated_note (seen on the device,
// 2026-12-01: both ranks timed out at the first graph replay of comm-only, W = 2).
const std::string kCommOnlyEmulatedNote = fused_bench::comm_only_emulated_note(
    "both ranks timed out at its first graph replay on the device, 2026-12-01");

const std::vector<std::string> kArmNames = {"gemm-only", "comm-only",  "split-lsa",     "split-ce",         "split-nccl",
                                            "fused-lsa", "fused-ce",   "auto",          "cublaslt+copy",    "cublaslt+nccl",
                                            "cublaslt+nccl-sym"};

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
  add({"gemm-only", ArmKind::kOp, GemmAllGatherMode::kGemmOnly, false});
  const bool comm_named = std::find(wanted.begin(), wanted.end(), "comm-only") != wanted.end();
  if (world == 1) {
    if (want("comm-only")) notes.push_back("comm-only: not run at world 1 (nothing to gather)");
  } else if (emulated && !comm_named) {
    notes.push_back(kCommOnlyEmulatedNote);
  } else {
    add({"comm-only", ArmKind::kCommOnly, GemmAllGatherMode::kAuto, false});
  }
  add({"split-lsa", ArmKind::kOp, GemmAllGatherMode::kSplitLsa, true});
  const std::string ce_why = emulated ? bench::EmulatedWorld::copy_engine_unsupported_reason(world) : "";
  if (!ce_why.empty()) {
    if (want("split-ce")) notes.push_back("split-ce: " + ce_why);
  } else {
    add({"split-ce", ArmKind::kOp, GemmAllGatherMode::kSplitCe, true});
  }
  add({"fused-lsa", ArmKind::kOp, GemmAllGatherMode::kFusedLsa, false});
  if (!ce_why.empty()) {
    if (want("fused-ce")) notes.push_back("fused-ce: " + ce_why);
  } else if (world > 1) {
    add({"fused-ce", ArmKind::kOp, GemmAllGatherMode::kFusedCe, false});
  }
  add({"auto", ArmKind::kOp, GemmAllGatherMode::kAuto, false});
  if (world == 1) add({"cublaslt+copy", ArmKind::kCublasLt, GemmAllGatherMode::kAuto, false});
  else if (want("cublaslt+copy"))
    notes.push_back("cublaslt+copy: world 1 only (the emulated world has no NCCL to gather cuBLASLt's output with; "
                    "split-lsa is the GEMM-then-gather arm there)");
  if (over_nccl) {
    add({"split-nccl", ArmKind::kOp, GemmAllGatherMode::kSplitNccl, true});
    add({"cublaslt+nccl", ArmKind::kCublasLtNccl, GemmAllGatherMode::kAuto, false});
    add({"cublaslt+nccl-sym", ArmKind::kCublasLtNcclSym, GemmAllGatherMode::kAuto, false});
  } else {
    for (const char* a : {"split-nccl", "cublaslt+nccl", "cublaslt+nccl-sym"})
      if (want(a))
        notes.push_back(std::string(a) + ": not run (" +
                        (emulated ? "the emulated world has no NCCL communicator" : "this world 1 has no NCCL communicator") +
                        "; --devices runs over real NCCL communicators)");
  }
  return arms;
}

// One rank's object of one arm (made once; cuBLASLt per M).
struct RankArm {
  std::unique_ptr<GemmAllGather> op;
  std::unique_ptr<Collective> coll;
  std::unique_ptr<bench::CublasLtGemm> lt;
  std::vector<bench::CublasLtScales> lt_scales;
  bench::DeviceBuffer lt_c, lt_out;  // cuBLASLt's C [m, n]; the copy's (gather's) destination [W m, n]
  std::unique_ptr<SymmetricWindow> sym;  // cublaslt+nccl-sym: "c" [m_max, n] and "out" [W m_max, n] in an NCCL window
  std::string unavailable;           // the reason, when the arm cannot run here (every rank the same)
};

using RankState = fused_bench::RankState<RankArm>;

int run_gemm_ag_suite(const BenchOptions& common, const GagBenchOptions& opt) {
  // Every option first: nothing below may probe a GPU or wait for one before the input is known good.
  check_bench_options(common);
  fused_bench::check_world_options(common, opt.emulate_world, "gemm-ag");
  check_output_file("--calibrate", opt.calibrate);
  const bool emulated = opt.emulate_world > 1;
  const bool over_nccl = !common.devices.empty();
  const int world = fused_bench::world_of(common, opt.emulate_world);
  for (const auto& a : opt.arms)
    WEAVE_EXPECT_ARG(std::find(kArmNames.begin(), kArmNames.end(), a) != kArmNames.end(),
                     "--arms: '" << a << "' is not one of gemm-only, comm-only, split-lsa, split-ce, split-nccl, fused-lsa, "
                                 << "fused-ce, auto, cublaslt+copy, cublaslt+nccl, cublaslt+nccl-sym");
  const GemmAgOptions& shape = opt.shape;  // mxfp8: raw scales (the suite has no --scale-layout)
  const GemmAllGatherConfig base = gemm_ag_config(shape, world);
  // The table must be for this op shape (refused before any GPU work); only the auto arm reads it.
  calibration_option(opt.calibration, /*mode_is_auto=*/true, "gemm-ag", base.quant, base.scale_layout, base.out_dtype, base.n,
                     base.k, world);
  WEAVE_EXPECT_ARG(opt.timeout_s >= 0.1 && opt.timeout_s <= 600, "--timeout " << opt.timeout_s << ": must be in 0.1..600 s");
  std::vector<std::string> notes;
  const std::vector<ArmSpec> specs = arms_for(world, emulated, over_nccl, opt.arms, notes);
  std::string left_out;
  for (const auto& note : notes) left_out += "; " + note;
  WEAVE_EXPECT_ARG(!specs.empty(), "--arms: none of the arms named runs at world " << world << left_out);

  const fused_bench::SuiteDevice gpu(common, "gemm-ag");
  if (!shape.preset.empty()) {  // which layer this run is (after every check and the GPU probe)
    const ModelPreset& preset = model_preset(shape.preset);
    std::printf("# %s\n", preset_line(preset, shard_model_preset(preset, world, base.quant)).c_str());
  }
  const int device = gpu.device, l2 = gpu.l2_bytes;
  cudaStream_t main_stream = gpu.main_stream;

  const int64_t n = base.n, k = base.k;
  const DType out_dtype = base.out_dtype;
  const size_t ob = dtype_bytes(out_dtype);
  const std::string quant(to_string(base.quant)), out_name(to_string(out_dtype));
  const bench::Tolerance tol = bench::gemm_tolerance(base.quant, out_dtype);
  const std::string world_tag = emulated ? std::to_string(world) + "-emu" : std::to_string(world);

  std::printf("# weave bench gemm-ag: n=%lld k=%lld %s -> %s, world %d%s, cuda:%d\n", static_cast<long long>(n),
              static_cast<long long>(k), quant.c_str(), out_name.c_str(), world,
              emulated    ? (" (" + std::string(kEmulatedLabel) + ")").c_str()
              : over_nccl ? (world > 1 ? " (one rank per GPU over NCCL)" : " (one rank over a real NCCL communicator: nothing gathered)")
                          : " (one rank, one GPU: nothing gathered)",
              device);
  if (emulated) fused_bench::print_emulated_share(world);
  std::fflush(stdout);

  // Weights: B (the reference's copy) and, per rank, its cold copies (together past 3 x L2).
  std::fprintf(stderr, "weave bench gemm-ag: generating B [%lld, %lld] %s\n", static_cast<long long>(n),
               static_cast<long long>(k), quant.c_str());
  // The world first: the ranks' ops point into it, so it must outlive them (destroyed after states).
  fused_bench::SuiteWorld ew(common, opt.emulate_world, device, opt.timeout_s);
  const ref::QuantMatrix qb =
      bench::quantize_parallel(bench::random_operand(opt.seed * 1000003 + 1, n, k), n, k, base.quant, ref::Operand::kB);
  std::vector<bench::DeviceOperand> bs;  // B (the same on every rank) on rank r's GPU
  for (int r = 0; r < world; ++r) bs.push_back(bench::upload_operand(qb, ew.device_of(r)));
  const bench::DeviceOperand& b0 = bs[0];
  // Cold weights: a rank's copies together past 3 x L2 of its GPU (the emulated world's ranks share one).
  const int copies =
      common.hot ? 1 : bench::cold_copies(b0.bytes() * static_cast<size_t>(over_nccl ? 1 : world), static_cast<size_t>(l2));
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
          GemmAllGatherConfig c = base;
          c.mode = specs[i].mode;
          if (c.mode == GemmAllGatherMode::kAuto) c.calibration = opt.calibration;
          arm.op = GemmAllGather::Impl::create(g, c);
        } else if (specs[i].kind == ArmKind::kCublasLtNcclSym) {
          const size_t own = static_cast<size_t>(base.m_max) * static_cast<size_t>(n) * ob;
          WindowLayout layout;
          layout.add("c", RegionKind::kData, own);
          layout.add("out", RegionKind::kData, own * static_cast<size_t>(g.world_size()));
          arm.sym = std::make_unique<SymmetricWindow>(ew.communicator(g.rank()), std::move(layout));
        } else if (specs[i].kind == ArmKind::kCommOnly) {
          CollectiveConfig cc;
          cc.op = CollectiveOp::kAllGather;
          cc.transport = Transport::kLsa;
          cc.algorithm = Algorithm::kAuto;
          cc.max_count = static_cast<size_t>(base.m_max) * static_cast<size_t>(n) * ob;
          arm.coll = Collective::Impl::create(g, cc);
        }
      } catch (const Error& e) {
        if (e.status() != Status::kUnavailable && e.status() != Status::kUnsupported) throw;
        arm.unavailable = e.message();
      }
      if (arm.unavailable.empty()) mask |= uint64_t{1} << i;
      st.arms.push_back(std::move(arm));
    }
    g.agree(mask, "the gemm-ag arms available on every rank");
  });

  bench::Report report("gemm-ag");
  fused::Calibration calibration = fused_bench::calibration_of(  // --calibrate: rows added per M below
      "gemm-ag", base.quant, base.scale_layout, base.out_dtype, n, k, world, world_tag, emulated);
  bool failed = false;
  std::vector<std::string> summary_lines;
  for (size_t mi = 0; mi < shape.ms.size(); ++mi) {
    const int64_t m = shape.ms[mi];
    const size_t rows_bytes = static_cast<size_t>(m) * static_cast<size_t>(n) * ob;
    const GemmProblem prob{.m = m, .n = n, .k = k, .mode = base.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = out_dtype};
    std::fprintf(stderr, "weave bench gemm-ag: m=%lld (%zu/%zu): inputs and reference GEMMs of %d source rank(s)\n",
                 static_cast<long long>(m), mi + 1, shape.ms.size(), world);
    const size_t own_elems = static_cast<size_t>(m) * static_cast<size_t>(n);
    std::vector<ref::QuantMatrix> qa;
    for (int s = 0; s < world; ++s)
      qa.push_back(bench::quantize_parallel(
          bench::random_operand(opt.seed * 1000003 + 7919 * static_cast<uint64_t>(m) + 17 * s + 2, m, k), m, k, base.quant,
          ref::Operand::kA));
    std::vector<bench::DeviceOperand> as(world);  // A_s on rank s's GPU
    // Every source's reference rows where each rank checks them: one set on the shared GPU (the
    // emulated world and world 1), or on each rank's GPU, its own computed there and gathered by
    // ncclAllGather (--devices).
    std::vector<bench::DeviceBuffer> refs(world), gathered(over_nccl ? world : 0);
    if (!over_nccl) {
      for (int s = 0; s < world; ++s) {
        as[s] = bench::upload_operand(qa[s], device);
        refs[s] = bench::DeviceBuffer(own_elems * sizeof(float));
        bench::gpu_reference_gemm(prob, as[s].view, b0.view, {as[s].scale_view, b0.scale_view}, refs[s].as<float>(),
                                  main_stream);
      }
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(main_stream));
    } else {
      ew.run([&](comm::Group& g) {
        const int r = g.rank();
        cudaStream_t st = states[r]->stream;
        as[r] = bench::upload_operand(qa[r], g.device());
        refs[r] = bench::DeviceBuffer(own_elems * sizeof(float));
        bench::gpu_reference_gemm(prob, as[r].view, bs[r].view, {as[r].scale_view, bs[r].scale_view},
                                  refs[r].as<float>(), st);
        gathered[r] = bench::DeviceBuffer(own_elems * sizeof(float) * static_cast<size_t>(world));
        WEAVE_CHECK_NCCL(ncclAllGather(refs[r].get(), gathered[r].get(), own_elems, ncclFloat32, g.nccl(), st));
        comm::sync_stream_bounded(st, opt.timeout_s, "gemm-ag: the reference rows of every rank (ncclAllGather)");
      });
    }
    // Source s's reference rows as rank r sees them.
    const auto ref_of = [&](int r, int s) -> const float* {
      return over_nccl ? gathered[r].as<float>() + static_cast<size_t>(s) * own_elems : refs[s].as<float>();
    };
    std::vector<std::vector<ArmResult>> res(world, std::vector<ArmResult>(specs.size()));
    std::string error;
    try {
      ew.run([&](comm::Group& g) {
        const int r = g.rank(), w = g.world_size(), dev = g.device();
        RankState& st = *states[r];
        cudaStream_t stream = st.stream;
        std::vector<ArmResult>& rr = res[r];
        // cuBLASLt (world 1): per M, since its descriptors and algorithm are per shape.
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
          if (!a.sym) {
            a.lt_c = bench::DeviceBuffer(rows_bytes);
            a.lt_out = bench::DeviceBuffer(specs[i].kind == ArmKind::kCublasLt ? rows_bytes : rows_bytes * static_cast<size_t>(w));
          }
        }
        auto enqueue = [&, r](size_t i, cudaStream_t s, int call) {
          RankArm& a = st.arms[i];
          const bench::DeviceOperand& b = st.b[static_cast<size_t>(call) % st.b.size()];
          switch (specs[i].kind) {
            case ArmKind::kOp: a.op->run(m, as[r].view, b.view, GemmScales{as[r].scale_view, b.scale_view}, s); break;
            case ArmKind::kCommOnly: {
              char* o = static_cast<char*>(a.coll->window_output());
              a.coll->run(o + static_cast<size_t>(r) * rows_bytes, o, rows_bytes, s);
              if (w > 1 && g.ranks_per_device() > 1) fused_bench::end_pdl_chain(s);
              break;
            }
            case ArmKind::kCublasLt:
              a.lt->run(as[r].view, b.view, a.lt_scales[static_cast<size_t>(call) % st.b.size()],
                        TensorView::matrix(a.lt_c.get(), out_dtype, m, n, dev), s);
              WEAVE_CHECK_CUDA(cudaMemcpyAsync(a.lt_out.get(), a.lt_c.get(), rows_bytes, cudaMemcpyDeviceToDevice, s));
              break;
            case ArmKind::kCublasLtNccl:
            case ArmKind::kCublasLtNcclSym: {
              // What users run today: the GEMM of the own rows, then NCCL's all-gather (its symmetric
              // kernels where both buffers lie in a registered window).
              void* c = a.sym ? static_cast<void*>(a.sym->region("c")) : a.lt_c.get();
              void* out = a.sym ? static_cast<void*>(a.sym->region("out")) : a.lt_out.get();
              a.lt->run(as[r].view, b.view, a.lt_scales[static_cast<size_t>(call) % st.b.size()],
                        TensorView::matrix(c, out_dtype, m, n, dev), s);
              WEAVE_CHECK_NCCL(ncclAllGather(c, out, static_cast<size_t>(m) * static_cast<size_t>(n),
                                             out_dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat32, g.nccl(), s));
              break;
            }
          }
        };
        auto output_of = [&](size_t i) -> char* {
          RankArm& a = st.arms[i];
          if (a.op) return static_cast<char*>(a.op->output(m).data);
          if (a.coll) return static_cast<char*>(a.coll->window_output());
          if (a.sym) return a.sym->region("out");
          return static_cast<char*>(a.lt_out.get());
        };
        // Fresh poison, every rank barriered, one call, every source's rows against its reference.
        auto out_bytes_of = [&](size_t i) {
          return specs[i].kind == ArmKind::kCublasLt ? rows_bytes : static_cast<size_t>(w) * rows_bytes;
        };
        // NaN over the arm's output; comm-only's input (this rank's rows, in place) seeded again.
        auto poison = [&](size_t i) {
          char* o = output_of(i);
          bench::poison_nan(o, out_bytes_of(i), out_dtype, stream);
          if (specs[i].kind == ArmKind::kCommOnly) {
            const size_t elems = static_cast<size_t>(m) * static_cast<size_t>(n);
            bench::gpu_round_reference(ref_of(r, r), o + static_cast<size_t>(r) * rows_bytes, elems, out_dtype,
                                       stream);
          }
        };
        // fresh_call = false: no call of its own; the output the timed graph replays left (poisoned
        // before the timing, so a replay that wrote nothing shows as NaN).
        auto check = [&](size_t i, const char* when, bool fresh_call) {
          RankArm& a = st.arms[i];
          char* o = output_of(i);
          if (fresh_call) {
            poison(i);
            WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
            g.barrier();
            enqueue(i, stream, calls - 1);
          }
          comm::sync_stream_bounded(stream, opt.timeout_s, std::string("gemm-ag ") + specs[i].name + " check " + when);
          if (a.op) a.op->check();
          if (a.coll) a.coll->check();
          ArmResult& ar = rr[i];
          ar.wrong_from.resize(w, -1);
          for (int s = 0; s < w; ++s) {
            if (specs[i].mode == GemmAllGatherMode::kGemmOnly && specs[i].kind == ArmKind::kOp && s != r) continue;
            if (specs[i].kind == ArmKind::kCublasLt && s != 0) continue;
            const TensorView rows = TensorView::matrix(o + static_cast<size_t>(s) * rows_bytes, out_dtype, m, n, dev);
            const ref::Comparison cmp = bench::gpu_compare(rows, ref_of(r, s), tol, stream);
            ar.wrong_from[s] = std::max<int64_t>(ar.wrong_from[s], 0) + cmp.wrong;
          }
          if (a.op && specs[i].mode == GemmAllGatherMode::kAuto) {
            ar.resolved = std::string(to_string(a.op->last_mode()));
            ar.reason = a.op->plan(m).reason;
          }
          g.barrier();
        };
        std::vector<size_t> runnable;
        for (size_t i = 0; i < specs.size(); ++i) {
          rr[i].unavailable = st.arms[i].unavailable;
          if (st.arms[i].unavailable.empty()) runnable.push_back(i);
        }
        if (runnable.empty()) return;
        for (size_t i : runnable) check(i, "before timing", true);
        // The replays' own output is what is checked after the timing (issue 36 item 10): NaN first.
        for (size_t i : runnable) poison(i);
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
      });
    } catch (const Error& e) {
      error = e.what();
    }
    if (!error.empty()) {
      failed = true;
      fused_bench::add_error_row(report, "gemm-ag", std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k),
                                 quant + "->" + out_name, m, error, world, emulated);
      break;
    }

    // Rows: per arm, the per-rank maximum of medians; wrong summed over ranks and sources.
    const std::vector<bench::Timing> per_arm = fused_bench::max_over_ranks(res, specs.size());
    double best_split = bench::kNaN, lt_us = bench::kNaN, gemm_us = bench::kNaN, comm_us = bench::kNaN,
           fused_us = bench::kNaN, lt_nccl_us = bench::kNaN, lt_sym_us = bench::kNaN;
    std::string best_split_name;
    // --calibrate: the fastest of the modes auto can take (split-lsa, fused-lsa) that ran right.
    const std::string best_auto_mode = fused_bench::fastest_right_arm(
        per_arm, res,
        [&](size_t i) {
          return specs[i].kind == ArmKind::kOp &&
                 (specs[i].mode == GemmAllGatherMode::kSplitLsa || specs[i].mode == GemmAllGatherMode::kFusedLsa);
        },
        [&](size_t i) { return std::string(to_string(specs[i].mode)); },
        [&](size_t i) { return specs[i].kind == ArmKind::kOp && specs[i].mode == GemmAllGatherMode::kSplitLsa; });
    if (!best_auto_mode.empty()) calibration.rows.push_back({m, best_auto_mode});
    for (size_t i = 0; i < specs.size(); ++i) {
      const double t = per_arm[i].median_us;
      if (std::isnan(t)) continue;
      if (specs[i].split && (std::isnan(best_split) || t < best_split)) best_split = t, best_split_name = specs[i].name;
      if (specs[i].kind == ArmKind::kCublasLt) lt_us = t;
      if (specs[i].kind == ArmKind::kCublasLtNccl) lt_nccl_us = t;
      if (specs[i].kind == ArmKind::kCublasLtNcclSym) lt_sym_us = t;
      if (specs[i].name == "gemm-only") gemm_us = t;
      if (specs[i].name == "comm-only") comm_us = t;
      if (specs[i].name == "fused-lsa") fused_us = t;
    }
    std::string progress;
    for (size_t i = 0; i < specs.size(); ++i) {
      bench::Row row;
      row.shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
      row.quant = quant + "->" + out_name;
      row.mode = specs[i].name;
      int64_t wrong = 0;
      nlohmann::json from = nlohmann::json::array();
      std::vector<int64_t> per_source(world, -1);
      for (int r = 0; r < world; ++r)
        for (size_t s = 0; s < res[r][i].wrong_from.size(); ++s)
          if (res[r][i].wrong_from[s] >= 0) {
            per_source[s] = std::max<int64_t>(per_source[s], 0) + res[r][i].wrong_from[s];
            wrong += res[r][i].wrong_from[s];
          }
      for (int64_t v : per_source) from.push_back(v);
      const std::string unavailable = res[0][i].unavailable;
      row.wrong = unavailable.empty() ? wrong : 0;
      row.extra = {{"world", world},
                   {"emulated", emulated},
                   {"m", m},
                   {"n", n},
                   {"k", k},
                   {"quant", quant},
                   {"out", out_name},
                   {"wrong_from_source", from},
                   {"weight_copies_per_rank", copies},
                   {"calls_per_graph", calls}};
      row.extra["over_nccl"] = over_nccl;
      if (over_nccl) row.extra["devices"] = common.devices;
      if (emulated) row.extra["label"] = kEmulatedLabel;
      if (!unavailable.empty()) row.extra["unavailable"] = unavailable;
      if (!res[0][i].resolved.empty()) {
        row.extra["auto_resolved"] = res[0][i].resolved;
        row.extra["auto_reason"] = res[0][i].reason;
      }
      if (specs[i].name == "gemm-only") row.extra["checked"] = "own rows only (gemm-only moves nothing by design)";
      if (specs[i].kind == ArmKind::kCommOnly && emulated)
        row.extra["note"] = "includes one empty kernel per call (ends the PDL chain of lsa calls; see --help)";
      if (unavailable.empty() && per_arm[i].samples > 0) {
        row.time_us = per_arm[i].median_us;
        row.noise_pct = per_arm[i].noise_pct;
        if (specs[i].kind != ArmKind::kCommOnly) row.tflops = 2.0 * double(m) * double(n) * double(k) / (row.time_us * 1e6);
        if (specs[i].kind == ArmKind::kCommOnly || (world > 1 && specs[i].name != "gemm-only")) {
          row.algbw_gbps = double(world) * double(rows_bytes) / (row.time_us * 1e3);
          row.busbw_gbps = row.algbw_gbps * double(world - 1) / double(world);
        }
        if (!std::isnan(best_split)) {
          row.baseline = "best-split:" + best_split_name;
          row.baseline_us = best_split;
          row.ratio = row.time_us / best_split;
        }
        if (!std::isnan(lt_us)) row.extra["ratio_vs_cublaslt_copy"] = row.time_us / lt_us;
        // Against what users run today (> 1: this arm is faster).
        if (!std::isnan(lt_nccl_us)) row.extra["speedup_vs_cublaslt_nccl"] = lt_nccl_us / row.time_us;
        if (!std::isnan(lt_sym_us)) row.extra["speedup_vs_cublaslt_nccl_sym"] = lt_sym_us / row.time_us;
        if ((specs[i].name == "fused-lsa" || specs[i].name == "fused-ce") && !std::isnan(gemm_us) && !std::isnan(comm_us))
          row.extra["overlap_efficiency"] = fused_bench::overlap_efficiency(gemm_us, comm_us, row.time_us);
      }
      if (row.wrong != 0) failed = true;
      progress += " " + specs[i].name + (unavailable.empty() ? " " + num(row.time_us, 1) + " us (#wrong " + std::to_string(row.wrong) + ")"
                                                             : " unavailable");
      report.add(std::move(row));
    }
    std::fprintf(stderr, "weave bench gemm-ag: m=%lld:%s\n", static_cast<long long>(m), progress.c_str());
    if (!std::isnan(gemm_us) && !std::isnan(comm_us) && !std::isnan(fused_us))
      summary_lines.push_back(fused_bench::overlap_line(m, gemm_us, comm_us, fused_us, emulated));
  }

  // The table (nccl-tests style; every emulated row carries the label).
  fused_bench::print_table(report, {.n = n, .k = k, .quant = quant, .out = out_name, .world_tag = world_tag,
                                    .emulated = emulated, .vs_lt_key = "ratio_vs_cublaslt_copy"});
  std::printf("# ratio = time / the best split arm at that M (same run); vs_lt = time / cublaslt+copy; TFLOPS = the "
              "GEMM's 2*M*N*K per rank / time; time = per-rank max of medians over %d samples of a %d-call graph\n",
              common.iters, calls);
  const std::string busy_after =
      fused_bench::print_closing(report, summary_lines, notes, device, common.idle_threshold);
  if (!common.json_path.empty()) {
    const fused_bench::RunFacts facts{.device = device, .gate = gpu.gate, .busy_after = busy_after, .world = world,
                                      .emulated = emulated,
                                      .world1_label = "world 1: one rank on one GPU, nothing gathered",
                                      .copies = copies, .calls = calls, .seed = opt.seed, .m_max = base.m_max,
                                      .notes = notes};
    report.write_json(common.json_path, fused_bench::run_meta(common, facts));
  }
  if (failed) {
    std::fprintf(stderr, "weave bench gemm-ag: FAILED: a row has #wrong > 0 or an arm failed\n");
    if (!opt.calibrate.empty()) std::fprintf(stderr, "weave bench gemm-ag: --calibrate: nothing written (the run failed)\n");
    return 1;
  }
  if (!opt.calibrate.empty()) fused_bench::write_calibration(calibration, opt.calibrate, "gemm-ag");
  return 0;
}

int run_gemm_ag_presets(const BenchOptions& common, const GagBenchOptions& opt) {
  return fused_bench::run_each_preset(common, opt, "gemm-ag", gemm_ag_shapes, run_gemm_ag_suite);
}

GagBenchOptions& suite_options() {
  static GagBenchOptions o;
  return o;
}

void add_gemm_ag_suite(CLI::App& bench, BenchOptions& common) {
  GagBenchOptions& o = suite_options();
  auto* app = bench.add_subcommand(
      "gemm-ag",
      "weave::GemmAllGather per M: gemm-only, comm-only, split-lsa, split-ce, fused-lsa, fused-ce and auto alternating in one "
      "process (world 1: also cuBLASLt + copy); every arm's rows of every source rank checked (#wrong). "
      "--emulate-world W: W ranks on ONE GPU, labelled as such (not NVLink numbers). --devices 0,1,...: one rank per GPU over "
      "NCCL, with split-nccl and cuBLASLt + NCCL baselines.");
  add_common_bench_options(*app, common);
  add_gemm_ag_options(*app, o.shape, /*with_layout=*/false, /*with_mode=*/false, /*many=*/true);
  fused_bench::add_world_options(*app, o);
  app->add_option("--calibrate", o.calibrate,
                  "after the run, write per M the fastest mode auto may take (split-lsa, fused-lsa; split-lsa unless another is more than 3% faster, so noise does not pick) to FILE: a "
                  "calibration table for GemmAllGatherConfig::calibration / weave plan gemm-ag --calibration (checked "
                  "before any GPU work)");
  app->add_option("--calibration", o.calibration,
                  "the auto arm takes the mode measured fastest per M in FILE (a --calibrate output of this shape, quant "
                  "and world; checked before any GPU work): shows auto against the best split with its table");
  app->footer(std::string(
      "Worlds:\n"
      "  default            world 1: one rank on one GPU; nothing is gathered, so the arms show the GEMM into\n"
      "                     the op's window and each mode's cost around it; cublaslt+copy is the baseline.\n"
      "  --emulate-world W  W ranks as threads on ONE GPU (the op's real code and kernels; peers' windows are\n"
      "                     allocations on the same GPU). Every row and the header are labelled\n"
      "                     '") + kEmulatedLabel + "'.\n"
      "                     The ranks share the GPU's SMs and HBM: per-rank TFLOPS is about 1/W of the GPU's.\n"
      "                     Sets CUDA_DEVICE_MAX_CONNECTIONS=32 (unless set) so the ranks' streams get queues.\n"
      "  --devices D0,D1,.. one rank per listed GPU over real NCCL communicators (one ordinal: world 1 over a\n"
      "                     one-rank communicator); adds split-nccl, cublaslt+nccl and cublaslt+nccl-sym.\n"
      "Arms (per M, timed alternating, CUDA graphs of --calls calls per rank, ranks barriered before every\n"
      "sample, per-rank max of medians):\n"
      "  gemm-only      the op in gemm-only mode: the GEMM alone into this rank's rows (checked: own rows)\n"
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
      "timing, summed over ranks and sources) world (W, or W-emu).\n"
      "Not part of a bare `weave bench`. docs/perf/fused.md has a run, its command and what limits each number.\n");
  app->callback([&common] { exit_code() = run_gemm_ag_presets(common, suite_options()); });
}

[[maybe_unused]] const bool kRegistered =
    register_bench_suite({"gemm-ag",
                          "GemmAllGather modes per M (world 1, or --emulate-world W on one GPU: not NVLink "
                          "numbers; --devices: one rank per GPU over NCCL)",
                          add_gemm_ag_suite, nullptr});

}  // namespace
}  // namespace weave::cli
