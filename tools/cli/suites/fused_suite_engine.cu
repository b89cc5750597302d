// The fused-suite engine: one run of an operator's suite (its FusedSuiteTrait), per M:
//   inputs   every rank s its own random A_s (bench::random_operand, quantised by the host
//            reference); B_s per rank or one B (the trait); cold weights by default: every rank
//            rotates through its own identical copies (together past 3 x L2);
//   arms     the trait's, plus cuBLASLt's GEMM and, over NCCL, cuBLASLt + NCCL on plain and on
//            symmetric buffers (NCCL after the GEMM, or before it where the trait gathers the
//            input: ag-gemm), timed alternating under CUDA graphs of --calls calls per rank,
//            every rank barriered before every sample; per arm the per-rank maximum of medians;
//   checks   before and after timing: NaN over the output, every rank barriered, one call
//            (after timing: none; the output the timed replays left, poisoned before them),
//            then on the GPU against bench::gpu_reference_gemm (a CUDA-core GEMM, not weave's)
//            folded as the trait says (summed, gathered); by-design-equal arms bit for bit
//            against split-lsa's output of the same call;
//   rows     fused_suite_rows.cpp.
#include "cli/suites/fused_suite_engine.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/preset_options.hpp"
#include "cli/registry.hpp"
#include "comm/collective_impl.hpp"
#include "comm/protocol.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"
#include "weave/presets.hpp"
#include "weave/quant.hpp"

namespace weave::cli::fused_bench {

SuiteRun::SuiteRun(const BenchOptions& common, const FusedSuiteOptions& opt, const FusedSuiteTrait& trait)
    : common_(common), opt_(opt), t_(trait), shape_(trait.shape()), name_(trait.name()) {
  emulated_ = opt.emulate_world > 1;
  over_nccl_ = !common.devices.empty();
  world_ = world_of(common, opt.emulate_world);
  for (const auto& a : opt.arms) {
    const auto& names = t_.arm_names();
    if (std::find(names.begin(), names.end(), a) != names.end()) continue;
    std::string all;
    for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
    WEAVE_EXPECT_ARG(false, "--arms: '" << a << "' is not one of " << all);
  }
  arms_ = t_.arms(world_, emulated_, over_nccl_, opt.arms, notes_);
  std::string left_out;
  for (const auto& note : notes_) left_out += "; " + note;
  WEAVE_EXPECT_ARG(!arms_.empty(), "--arms: none of the arms named runs at world " << world_ << left_out);
  for (size_t i = 0; i < arms_.size(); ++i)
    if (arms_[i].reference) reference_arm_ = static_cast<int>(i);
  world_tag_ = emulated_ ? std::to_string(world_) + "-emu" : std::to_string(world_);
  quant_ = to_string(shape_.quant);
  out_name_ = to_string(shape_.out);
}

void SuiteRun::print_header(int device) const {
  const std::string where =
      emulated_   ? " (" + std::string(kEmulatedLabel) + ")"
      : over_nccl_ ? (world_ > 1 ? std::string(" (one rank per GPU over NCCL)")
                                 : std::string(" (one rank over a real NCCL communicator: nothing ") + t_.verb() + ")")
                   : " (one rank, one GPU: " + t_.world1_note() + ")";
  std::printf("# weave bench %s: %s, world %d%s, cuda:%d\n", name_, t_.header_shape().c_str(), world_, where.c_str(),
              device);
  if (emulated_) {
    print_emulated_share(world_);
    for (const auto& a : arms_) {
      if (a.kind == ArmKind::kCublasLt)
        std::printf("# %s; cublaslt: the %d ranks' cuBLASLt GEMMs are not capped to an SM share (weave's grids are)\n",
                    kEmulatedLabel, world_);
      if (a.kind == ArmKind::kWeaveGemm) {
        int sms = 0;
        WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        std::printf("# %s; weave-gemm: the %d ranks' weave::Gemm calls are planned for the rank's SM share (%d SMs "
                    "of %d), like the op's grids, and forced to that plan\n",
                    kEmulatedLabel, world_, comm::rank_sm_share(sms, world_), sms);
      }
    }
  }
  std::fflush(stdout);
}

// Weights: B_s of every source rank on its GPU (the reference's copy), and per rank its cold copies.
void SuiteRun::make_weights(int l2_bytes) {
  const int64_t n = shape_.n, k = shape_.k;
  std::fprintf(stderr, "weave bench %s: generating B [%lld, %lld] %s (%s)\n", name_, static_cast<long long>(n),
               static_cast<long long>(k), quant_.c_str(), t_.distinct_weights() ? "one per rank" : "the same on every rank");
  std::vector<ref::QuantMatrix> qb;
  for (int s = 0; s < (t_.distinct_weights() ? world_ : 1); ++s)
    qb.push_back(bench::quantize_parallel(
        bench::random_operand(opt_.seed * 1000003 + 1 + 104729 * static_cast<uint64_t>(s), n, k), n, k, shape_.quant,
        ref::Operand::kB));
  for (int s = 0; s < world_; ++s) bs_.push_back(bench::upload_operand(qb[qb.size() == 1 ? 0 : s], ranks_->device_of(s)));
  // Cold weights: a rank's copies together past 3 x L2 of its GPU (the emulated world's ranks
  // share one L2, so there every rank's copies count).
  const size_t b_bytes_per_l2 = bs_[0].bytes() * static_cast<size_t>(over_nccl_ ? 1 : world_);
  copies_ = common_.hot ? 1 : bench::cold_copies(b_bytes_per_l2, static_cast<size_t>(l2_bytes));
  for (int r = 0; r < world_; ++r) {
    states_.push_back(std::make_unique<State>());
    WEAVE_CHECK_CUDA(cudaSetDevice(ranks_->device_of(r)));
    for (int c = 0; c < copies_; ++c) states_[r]->b.push_back(bench::clone_operand(bs_[r]));
  }
  calls_ = std::max(common_.calls_per_graph, copies_);
}

// The arms' objects, once per rank (collective: every rank builds the same ones); an arm a rank
// cannot build is unavailable on every rank.
void SuiteRun::make_arms() {
  ranks_->run([&](comm::Group& g) {
    State& st = *states_[g.rank()];
    WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking));
    uint64_t mask = 0;
    const size_t ob = dtype_bytes(shape_.out);
    const size_t own_max =
        static_cast<size_t>(t_.gemm_rows(shape_.m_max, world_)) * static_cast<size_t>(shape_.n) * ob;
    const FusedSuiteTrait::InputRow in_row = t_.gathered_input_row();
    const size_t gathered_rows = static_cast<size_t>(world_) * static_cast<size_t>(shape_.m_max);
    for (size_t i = 0; i < arms_.size(); ++i) {
      RankArm arm;
      try {
        if (arms_[i].kind == ArmKind::kOp) {
          arm.op = t_.make_op(g, arms_[i]);
        } else if (arms_[i].kind == ArmKind::kCublasLtNcclSym) {
          WindowLayout layout;
          layout.add("c", RegionKind::kData, own_max);
          if (t_.out_of_place()) layout.add("out", RegionKind::kData, own_max * static_cast<size_t>(t_.blocks(world_)));
          if (in_row.bytes > 0) layout.add("a", RegionKind::kData, round_up_4(gathered_rows * in_row.bytes));
          if (in_row.scale_bytes > 0) layout.add("sa", RegionKind::kData, round_up_4(gathered_rows * in_row.scale_bytes));
          arm.sym = std::make_unique<SymmetricWindow>(ranks_->communicator(g.rank()), std::move(layout));
        } else if (arms_[i].kind == ArmKind::kCommOnly) {
          arm.coll = Collective::Impl::create(g, t_.comm_only_config());
        }
      } catch (const Error& e) {
        if (e.status() != Status::kUnavailable && e.status() != Status::kUnsupported) throw;
        arm.unavailable = e.message();
      }
      if (arm.unavailable.empty()) mask |= uint64_t{1} << i;
      st.arms.push_back(std::move(arm));
    }
    g.agree(mask, (std::string("the ") + name_ + " arms available on every rank").c_str());
  });
}

// A_s and the reference GEMM of every source rank, folded into each rank's expected output: once
// on the shared GPU (the emulated world and world 1), or on each rank's GPU, combined by NCCL.
SuiteRun::References SuiteRun::references(int64_t m, int device, cudaStream_t main_stream) {
  const size_t elems = static_cast<size_t>(m) * static_cast<size_t>(shape_.n);
  const size_t expected_bytes = elems * sizeof(float) * static_cast<size_t>(t_.blocks(world_));
  const GemmProblem prob = problem(m);
  References refs;
  refs.elems = elems;
  std::vector<ref::QuantMatrix> qa;
  for (int s = 0; s < world_; ++s)
    qa.push_back(bench::quantize_parallel(
        bench::random_operand(opt_.seed * 1000003 + 7919 * static_cast<uint64_t>(m) + 17 * s + 2, m, shape_.k), m,
        shape_.k, shape_.quant, ref::Operand::kA));
  refs.as.resize(world_);
  refs.own.resize(world_);
  const size_t copies = over_nccl_ ? static_cast<size_t>(world_) : 1;
  refs.expected.resize(copies);
  refs.mags.resize(copies);
  auto zeroed = [](size_t bytes, cudaStream_t s) {
    bench::DeviceBuffer b(bytes);
    WEAVE_CHECK_CUDA(cudaMemsetAsync(b.get(), 0, bytes, s));
    return b;
  };
  auto own_reference = [&](int s, int dev, cudaStream_t st) {
    refs.as[s] = bench::upload_operand(qa[s], dev);
    refs.own[s] = bench::DeviceBuffer(elems * sizeof(float));
    bench::gpu_reference_gemm(prob, refs.as[s].view, bs_[s].view, {refs.as[s].scale_view, bs_[s].scale_view},
                              refs.own[s].as<float>(), st);
  };
  if (!over_nccl_) {
    refs.expected[0] = zeroed(expected_bytes, main_stream);
    if (t_.magnitudes()) refs.mags[0] = zeroed(elems * sizeof(float), main_stream);
    for (int s = 0; s < world_; ++s) {
      own_reference(s, device, main_stream);
      t_.fold_reference(refs.expected[0].as<float>(), t_.magnitudes() ? refs.mags[0].as<float>() : nullptr,
                        refs.own[s].as<float>(), s, elems, main_stream);
    }
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(main_stream));
    return refs;
  }
  ranks_->run([&](comm::Group& g) {
    const int r = g.rank();
    cudaStream_t st = states_[r]->stream;
    own_reference(r, g.device(), st);
    refs.expected[r] = zeroed(expected_bytes, st);
    if (t_.magnitudes()) refs.mags[r] = zeroed(elems * sizeof(float), st);
    t_.collect_reference(refs.expected[r].as<float>(), t_.magnitudes() ? refs.mags[r].as<float>() : nullptr,
                         refs.own[r].as<float>(), elems, g.nccl(), st);
    comm::sync_stream_bounded(st, opt_.timeout_s, std::string(name_) + ": the reference over ranks (NCCL)");
  });
  return refs;
}

GemmProblem SuiteRun::problem(int64_t m) const {
  return GemmProblem{.m = m, .n = shape_.n, .k = shape_.k, .mode = shape_.quant, .scale_layout = ScaleLayout::kRaw,
                     .out_dtype = shape_.out};
}

void check_suite_options(const BenchOptions& common, const FusedSuiteOptions& opt, const char* suite) {
  check_bench_options(common);
  check_world_options(common, opt.emulate_world, suite);
  check_output_file("--calibrate", opt.calibrate);
  WEAVE_EXPECT_ARG(opt.timeout_s >= 0.1 && opt.timeout_s <= 600, "--timeout " << opt.timeout_s << ": must be in 0.1..600 s");
}

bool ArmList::wanted(const std::string& name) const {
  return wanted_.empty() || std::find(wanted_.begin(), wanted_.end(), name) != wanted_.end();
}

void ArmList::add(SuiteArm arm) {
  if (wanted(arm.name)) arms_.push_back(std::move(arm));
}

void ArmList::leave_out(const std::string& name, const std::string& why) {
  if (wanted(name)) notes_.push_back(name + ": " + why);
}

void ArmList::add_unless(SuiteArm arm, const std::string& why) {
  if (why.empty()) add(std::move(arm));
  else leave_out(arm.name, why);
}

void ArmList::add_comm_only(int world, bool emulated, const char* nothing_to, const std::string& emulated_note) {
  const bool named = std::find(wanted_.begin(), wanted_.end(), "comm-only") != wanted_.end();
  if (world == 1) leave_out("comm-only", std::string("not run at world 1 (") + nothing_to + ")");
  else if (emulated && !named) notes_.push_back(emulated_note);
  else add({.name = "comm-only", .kind = ArmKind::kCommOnly});
}

void ArmList::add_over_nccl(std::vector<SuiteArm> arms, bool over_nccl, bool emulated) {
  for (auto& a : arms) {
    if (over_nccl) add(std::move(a));
    else
      leave_out(a.name, std::string("not run (needs --devices, one rank per GPU over real NCCL communicators: ") +
                            (emulated ? "the emulated world has no NCCL communicator"
                                      : "this world 1 is a one-rank group without NCCL") +
                            ")");
  }
}

void add_suite_help(CLI::App& app, FusedSuiteOptions& o, const SuiteHelp& help) {
  if (!help.auto_modes.empty()) {
    app.add_option("--calibrate", o.calibrate,
                   "after the run, write per M the fastest mode auto may take (" + help.auto_modes +
                       "; split-lsa unless another is more than 3% faster, so noise does not pick) to FILE: a calibration "
                       "table for " + help.config + "::calibration / weave plan " + help.name +
                       " --calibration (checked before any GPU work)");
    app.add_option("--calibration", o.calibration,
                   "the auto arm takes the mode measured fastest per M in FILE (a --calibrate output of this shape, quant "
                   "and world; checked before any GPU work): shows auto against the best split with its table");
  }
  app.footer(
      "Worlds:\n"
      "  default            " + help.world1 + "\n"
      "  --emulate-world W  W ranks as threads on ONE GPU (the op's real code and kernels; peers' windows are\n"
      "                     allocations on the same GPU). Every row and the header are labelled\n"
      "                     '" + std::string(kEmulatedLabel) + "'.\n"
      "                     The ranks share the GPU's SMs and HBM: per-rank TFLOPS is about 1/W of the GPU's.\n"
      "                     Sets CUDA_DEVICE_MAX_CONNECTIONS=32 (unless set) so the ranks' streams get queues.\n"
      "  --devices D0,D1,.. one rank per listed GPU over real NCCL communicators (one ordinal: world 1 over a\n"
      "                     one-rank communicator); adds split-nccl, cublaslt+nccl and cublaslt+nccl-sym.\n" +
      help.footer +
      "Not part of a bare `weave bench`. docs/perf/fused.md has runs, their commands and what limits each number.\n");
}

int run_fused_suite(const BenchOptions& common, const FusedSuiteOptions& opt, const FusedSuiteTrait& trait) {
  SuiteRun run(common, opt, trait);
  return run.run();
}

int SuiteRun::run() {
  const SuiteDevice gpu(common_, name_);
  if (!shape_.preset.empty()) {  // which layer this run is (after every check and the GPU probe)
    std::printf("# %s\n", preset_header(shape_.preset, world_, shape_.quant).c_str());
  }
  print_header(gpu.device);
  // The world first: the ranks' ops point into it, so it must outlive them (freed after the states).
  ranks_ = std::make_unique<SuiteWorld>(common_, opt_.emulate_world, gpu.device, opt_.timeout_s);
  const FreeStatesPerRank<State> free_states(*ranks_, states_);
  make_weights(gpu.l2_bytes);
  WEAVE_CHECK_CUDA(cudaSetDevice(gpu.device));
  make_arms();

  Rows rows(*this);
  for (size_t mi = 0; mi < shape_.ms.size(); ++mi) {
    const int64_t m = shape_.ms[mi];
    std::fprintf(stderr, "weave bench %s: m=%lld (%zu/%zu): inputs and reference GEMMs of %d source rank(s)\n", name_,
                 static_cast<long long>(m), mi + 1, shape_.ms.size(), world_);
    const References refs = references(m, gpu.device, gpu.main_stream);
    std::vector<std::vector<ArmResult>> res(world_, std::vector<ArmResult>(arms_.size()));
    try {
      ranks_->run([&](comm::Group& g) { run_rank(g, m, refs, res[g.rank()]); });
    } catch (const Error& e) {
      rows.error(m, e.what());
      break;
    }
    rows.add(m, res);
  }
  return rows.finish(gpu);
}

}  // namespace weave::cli::fused_bench
