// One rank's arms at one M: cuBLASLt's plans for this shape, a checked call of every arm, the
// timing, and the check of what the timed replays left.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cli/share_plan.hpp"
#include "cli/suites/fused_suite_engine.hpp"
#include "comm/protocol.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "testing/reduce_reference.hpp"

namespace weave::cli::fused_bench {

// The GEMM baselines, per M since their plans are per shape: weave-gemm's Gemms and cuBLASLt's
// descriptors and algorithm. Where the trait gathers the input, their GEMM is of the W m gathered
// rows, set up first (its scales are what cuBLASLt converts).
void SuiteRun::prepare_gemm_arms(const RankCall& c) {
  const int64_t lt_rows = t_.gemm_rows(c.m, world_);
  const GemmProblem prob = problem(lt_rows);
  const size_t rows_bytes = static_cast<size_t>(lt_rows) * static_cast<size_t>(shape_.n) * dtype_bytes(shape_.out);
  for (size_t i = 0; i < arms_.size(); ++i) {
    if (arms_[i].kind == ArmKind::kWeaveGemm) prepare_weave_gemm(c, i, prob);
    if (!is_cublaslt(arms_[i].kind)) continue;
    RankArm& a = c.st.arms[i];
    a.lt.reset();
    a.lt_scales.clear();
    a.unavailable = bench::CublasLtGemm::supports(prob);
    if (!a.unavailable.empty()) continue;
    try {
      a.lt = std::make_unique<bench::CublasLtGemm>(prob, c.g.device());
    } catch (const Error& e) {
      if (e.status() != Status::kUnsupported) throw;
      a.unavailable = e.message();
      continue;
    }
    if (!a.sym) {
      a.lt_c = bench::DeviceBuffer(rows_bytes);
      if (t_.out_of_place()) a.lt_out = bench::DeviceBuffer(output_bytes(i, c.m));
    }
    if (t_.gathers_input()) prepare_gathered_input(c, i);
    const TensorView scale_a = lt_input(c, i).scale_a;
    for (const auto& b : c.st.b) a.lt_scales.push_back(a.lt->prepare_scales({scale_a, b.scale_view}, c.st.stream));
  }
}

void SuiteRun::prepare_weave_gemm(const RankCall& c, size_t i, const GemmProblem& prob) {
  const int64_t rows = prob.m;
  RankArm& a = c.st.arms[i];
  a.gemms.clear();
  a.share_plan.clear();
  a.share_reason.clear();
  a.unavailable = gemm_validate_problem(prob);
  if (!a.unavailable.empty()) return;
  a.lt_c = bench::DeviceBuffer(static_cast<size_t>(rows) * static_cast<size_t>(shape_.n) * dtype_bytes(shape_.out));
  if (t_.gathers_input()) prepare_gathered_input(c, i);
  const LtInput in = lt_input(c, i);
  const TensorView cv = TensorView::matrix(a.lt_c.get(), shape_.out, rows, shape_.n, c.g.device());
  try {
    // Emulated world: planned for the rank's SM share, as the op's grids are (share_plan.hpp).
    GemmPlanOverrides pinned;
    std::string share_note;
    if (emulated_) {
      int sms = 0;
      WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, c.g.device()));
      const int share = comm::rank_sm_share(sms, c.g.ranks_per_device());
      const GemmPlan plan = gemm_plan(prob, share);
      pinned = overrides_from(prob, plan);
      const std::string unpinned = share_plan_unpinned(plan);
      share_note = " (planned for " + std::to_string(share) + " SMs of " + std::to_string(sms) +
                   (unpinned.empty() ? "" : "; " + unpinned) + ")";
      a.share_reason = plan.reason;
    }
    for (const auto& b : c.st.b)
      a.gemms.emplace_back(prob, in.a, b.view, GemmScales{in.scale_a, b.scale_view}, cv, pinned);
    // What runs: the share's plan, but for what share_plan_unpinned names.
    if (emulated_) a.share_plan = plan_summary(a.gemms.front().plan()) + share_note;
  } catch (const Error& e) {
    if (e.status() != Status::kUnsupported && e.status() != Status::kUnavailable) throw;
    a.gemms.clear();
    a.share_plan.clear();
    a.unavailable = e.message();
    return;
  }
  const size_t ws = a.gemms.front().workspace_bytes();
  a.gemm_ws = bench::DeviceBuffer(ws);
  if (ws > 0)
    for (auto& g : a.gemms) g.set_workspace(a.gemm_ws.get(), ws);
}

FusedSuiteTrait::GatheredInput SuiteRun::gathered_input(const RankCall& c, size_t i) const {
  const RankArm& a = c.st.arms[i];
  const FusedSuiteTrait::InputRow row = t_.gathered_input_row();
  const int r = c.g.rank();
  const bench::DeviceOperand& own = c.refs.as[r];
  FusedSuiteTrait::GatheredInput in;
  in.a = a.sym ? a.sym->region("a") : a.lt_a.as<char>();
  if (row.scale_bytes > 0) in.sa = a.sym ? a.sym->region("sa") : a.lt_sa.as<char>();
  // Symmetric buffers: in place (this rank's rows already in slot r, as a caller that writes A into
  // the window has them); plain buffers: out of place from A_r as it is.
  const size_t slot = static_cast<size_t>(r) * static_cast<size_t>(c.m);
  in.own_a = a.sym ? static_cast<const void*>(in.a + slot * row.bytes) : own.values.get();
  if (in.sa) in.own_sa = a.sym ? static_cast<const void*>(in.sa + slot * row.scale_bytes) : own.scales.get();
  return in;
}

void SuiteRun::seed_own_rows(const RankCall& c, size_t i) {
  const FusedSuiteTrait::InputRow row = t_.gathered_input_row();
  const int r = c.g.rank();
  const bench::DeviceOperand& own = c.refs.as[r];
  const size_t a_bytes = static_cast<size_t>(c.m) * row.bytes, sa_bytes = static_cast<size_t>(c.m) * row.scale_bytes;
  WEAVE_EXPECT(own.values.bytes() == a_bytes && own.scales.bytes() == sa_bytes, Status::kInternal,
               name_ << ": A_r holds " << own.values.bytes() << " + " << own.scales.bytes()
                     << " bytes of rows and scales; the trait's rows make " << a_bytes << " + " << sa_bytes);
  const FusedSuiteTrait::GatheredInput in = gathered_input(c, i);
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(in.a + static_cast<size_t>(r) * a_bytes, own.values.get(), a_bytes,
                                   cudaMemcpyDeviceToDevice, c.st.stream));
  if (sa_bytes > 0)
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(in.sa + static_cast<size_t>(r) * sa_bytes, own.scales.get(), sa_bytes,
                                     cudaMemcpyDeviceToDevice, c.st.stream));
}

void SuiteRun::prepare_gathered_input(const RankCall& c, size_t i) {
  RankArm& a = c.st.arms[i];
  const FusedSuiteTrait::InputRow row = t_.gathered_input_row();
  const size_t rows = static_cast<size_t>(world_) * static_cast<size_t>(c.m);
  if (!a.sym) {
    a.lt_a = bench::DeviceBuffer(round_up_4(rows * row.bytes));
    a.lt_sa = bench::DeviceBuffer(row.scale_bytes > 0 ? round_up_4(rows * row.scale_bytes) : 0);
  }
  const FusedSuiteTrait::GatheredInput in = gathered_input(c, i);
  WEAVE_CHECK_CUDA(cudaMemsetAsync(in.a, 0, rows * row.bytes, c.st.stream));
  if (in.sa) WEAVE_CHECK_CUDA(cudaMemsetAsync(in.sa, 0, rows * row.scale_bytes, c.st.stream));
  seed_own_rows(c, i);
  // Over NCCL, every rank's rows once, so the scales cuBLASLt converts below are every source's.
  if (!is_gemm_alone(arms_[i].kind)) t_.before_cublaslt(arms_[i].kind, in, c.m, c.g, c.st.stream);
  comm::sync_stream_bounded(c.st.stream, opt_.timeout_s,
                            std::string(name_) + " " + arms_[i].name + ": the gathered input of cuBLASLt's GEMM");
}

SuiteRun::LtInput SuiteRun::lt_input(const RankCall& c, size_t i) const {
  const bench::DeviceOperand& own = c.refs.as[c.g.rank()];
  if (!t_.gathers_input()) return {own.view, own.scale_view};
  const FusedSuiteTrait::GatheredInput in = gathered_input(c, i);
  const int64_t rows = int64_t{world_} * c.m;
  LtInput x{TensorView::matrix(in.a, own.view.dtype, rows, shape_.k, c.g.device()), own.scale_view};
  if (x.scale_a.rank >= 1) {  // A_r's scale layout, W m rows (bf16: none)
    x.scale_a.data = in.sa;
    x.scale_a.shape[0] = rows;
  }
  return x;
}

void SuiteRun::enqueue(const RankCall& c, size_t i, cudaStream_t s, int call) {
  RankArm& a = c.st.arms[i];
  const int r = c.g.rank();
  const size_t copy = static_cast<size_t>(call) % c.st.b.size();
  const bench::DeviceOperand& b = c.st.b[copy];
  switch (arms_[i].kind) {
    case ArmKind::kOp: a.op->run(c.m, c.refs.as[r], b, s); break;
    case ArmKind::kWeaveGemm: a.gemms[copy].run(s); break;
    case ArmKind::kCommOnly:
      t_.run_comm_only(*a.coll, c.m, r, s);
      // fused_bench::comm_only_emulated_note: a graph of lsa calls must not chain on one GPU.
      if (c.g.world_size() > 1 && c.g.ranks_per_device() > 1) end_pdl_chain(s);
      break;
    case ArmKind::kCublasLt:
    case ArmKind::kCublasLtNccl:
    case ArmKind::kCublasLtNcclSym: {
      void* cbuf = a.sym ? static_cast<void*>(a.sym->region("c")) : a.lt_c.get();
      void* out = !t_.out_of_place() ? cbuf : a.sym ? static_cast<void*>(a.sym->region("out")) : a.lt_out.get();
      if (t_.gathers_input()) t_.before_cublaslt(arms_[i].kind, gathered_input(c, i), c.m, c.g, s);
      const TensorView cv = TensorView::matrix(cbuf, shape_.out, t_.gemm_rows(c.m, world_), shape_.n, c.g.device());
      a.lt->run(lt_input(c, i).a, b.view, a.lt_scales[copy], cv, s);
      t_.after_cublaslt(arms_[i].kind, cbuf, out, c.m, c.g, s);
      break;
    }
  }
}

char* SuiteRun::output_of(const RankCall& c, size_t i) const {
  RankArm& a = c.st.arms[i];
  if (a.op) return a.op->output(c.m);
  if (a.coll) return static_cast<char*>(a.coll->window_output());
  if (a.sym) return a.sym->region(t_.out_of_place() ? "out" : "c");
  // cuBLASLt's GEMM alone: its C (what a trait's after_cublaslt may copy elsewhere, or not at all).
  if (is_gemm_alone(arms_[i].kind)) return static_cast<char*>(a.lt_c.get());
  return static_cast<char*>(t_.out_of_place() ? a.lt_out.get() : a.lt_c.get());
}

// A GEMM alone holds its rows (m, or the W m gathered ones); every other arm a rank's output:
// blocks x its own rows.
size_t SuiteRun::output_bytes(size_t i, int64_t m) const {
  const int64_t rows = is_gemm_alone(arms_[i].kind) ? t_.gemm_rows(m, world_)
                                                           : t_.own_rows(m, 0, world_).rows * int64_t{t_.blocks(world_)};
  return static_cast<size_t>(rows) * static_cast<size_t>(shape_.n) * dtype_bytes(shape_.out);
}

// NaN over the arm's output; comm-only's input (this rank's rows) seeded with its reference; the
// gathered input of a cuBLASLt + NCCL arm NaN too, but for this rank's rows (re-seeded), so the
// gather must bring the peers' rows again.
void SuiteRun::poison(const RankCall& c, size_t i) {
  bench::poison_nan(output_of(c, i), output_bytes(i, c.m), shape_.out, c.st.stream);
  if (t_.gathers_input() && is_cublaslt(arms_[i].kind) && !is_gemm_alone(arms_[i].kind)) {
    const FusedSuiteTrait::InputRow row = t_.gathered_input_row();
    const FusedSuiteTrait::GatheredInput in = gathered_input(c, i);
    const bench::DeviceOperand& own = c.refs.as[c.g.rank()];
    const size_t rows = static_cast<size_t>(world_) * static_cast<size_t>(c.m);
    bench::poison_nan(in.a, round_up_4(rows * row.bytes), own.view.dtype, c.st.stream);
    if (in.sa) bench::poison_nan(in.sa, round_up_4(rows * row.scale_bytes), own.scale_view.dtype, c.st.stream);
    seed_own_rows(c, i);
  }
  if (arms_[i].kind == ArmKind::kCommOnly) {
    const int r = c.g.rank();
    bench::gpu_round_reference(c.refs.own[r].as<float>(), t_.comm_only_input(*c.st.arms[i].coll, c.m, r),
                               c.refs.elems, shape_.out, c.st.stream);
  }
}

// fresh_call: NaN, every rank barriered, one call; else the output the timed replays left
// (poisoned before the timing, so a replay that wrote nothing shows as NaN). Then the output
// against its reference: a partial arm's own rows against this rank's GEMM, any other arm's
// every block against the expected output (each block: the rows the trait's own_rows names).
void SuiteRun::check(const RankCall& c, size_t i, const char* when, bool fresh_call) {
  RankArm& a = c.st.arms[i];
  const SuiteArm& spec = arms_[i];
  const int r = c.g.rank(), dev = c.g.device();
  cudaStream_t stream = c.st.stream;
  char* o = output_of(c, i);
  if (fresh_call) {
    poison(c, i);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
    c.g.barrier();
    enqueue(c, i, stream, calls_ - 1);
  }
  comm::sync_stream_bounded(stream, opt_.timeout_s, std::string(name_) + " " + spec.name + " check " + when);
  if (a.op) a.op->check();
  if (a.coll) a.coll->check();
  ArmResult& ar = c.res[i];
  const int blocks = t_.blocks(world_);
  ar.wrong_from.resize(t_.wrong_per_source() ? static_cast<size_t>(blocks) : 1, -1);
  // The rows of each block this arm's output holds (a GEMM alone's own C: all m), from row own.first.
  const FusedSuiteTrait::OwnRows own =
      is_gemm_alone(spec.kind) ? FusedSuiteTrait::OwnRows{0, c.m} : t_.own_rows(c.m, r, world_);
  const size_t n = static_cast<size_t>(shape_.n), own_bytes = static_cast<size_t>(own.rows) * n * dtype_bytes(shape_.out);
  const size_t first = static_cast<size_t>(own.first) * n;  // elements into a block of the reference
  auto count = [&](size_t slot, const ref::Comparison& cmp) {
    ar.wrong_from[slot] = std::max<int64_t>(ar.wrong_from[slot], 0) + cmp.wrong;
    ar.rel_l2 = std::max(ar.rel_l2, cmp.rel_l2);
  };
  if (spec.partial) {
    // Its own rows: where this rank's block lies in a full output; a GEMM alone's C holds only them.
    const int block = output_bytes(i, c.m) == own_bytes ? 0 : r;
    const TensorView rows =
        TensorView::matrix(o + static_cast<size_t>(block) * own_bytes, shape_.out, own.rows, shape_.n, dev);
    count(t_.wrong_per_source() ? static_cast<size_t>(block) : 0,
          bench::gpu_compare(rows, c.refs.own[r].as<float>() + first, t_.tolerance(true, false, world_), stream));
  } else {
    // NCCL's reductions round each step (a looser bound than weave's rank-order fp32 sum).
    const bool nccl_summed = spec.kind == ArmKind::kCublasLtNccl || spec.kind == ArmKind::kCublasLtNcclSym ||
                             (a.op && a.op->last_mode() == "split-nccl");
    const bench::Tolerance tol = t_.tolerance(false, nccl_summed, world_);
    const float* mags = c.refs.mags_of(r);
    for (int b = 0; b < blocks; ++b) {
      const size_t off = static_cast<size_t>(b) * c.refs.elems + first;
      const TensorView rows =
          TensorView::matrix(o + static_cast<size_t>(b) * own_bytes, shape_.out, own.rows, shape_.n, dev);
      count(t_.wrong_per_source() ? static_cast<size_t>(b) : 0,
            bench::gpu_compare(rows, c.refs.expected_of(r) + off, tol, stream, mags ? mags + off : nullptr));
    }
  }
  if (a.op && spec.kind == ArmKind::kOp && spec.name == "auto") {
    ar.resolved = a.op->last_mode();
    ar.reason = a.op->reason(c.m);
  }
  c.g.barrier();
}

// After every arm's check of one round, each output still holds that call's result: every arm
// equal by design to split-lsa compared bit for bit.
void SuiteRun::compare_with_reference_arm(const RankCall& c, const std::vector<size_t>& runnable) {
  if (reference_arm_ < 0 || !c.st.arms[reference_arm_].unavailable.empty()) return;
  const char* ref_out = output_of(c, static_cast<size_t>(reference_arm_));
  for (size_t i : runnable) {
    if (static_cast<int>(i) == reference_arm_ || arms_[i].kind != ArmKind::kOp || arms_[i].partial) continue;
    const SuiteOp& op = *c.st.arms[i].op;
    if (!t_.equal_to_split(arms_[i], op.last_mode(), op.tile(c.m), c.st.arms[reference_arm_].op->tile(c.m))) continue;
    const size_t elems = output_bytes(i, c.m) / dtype_bytes(shape_.out);
    const int64_t d = bench::gpu_count_differing(output_of(c, i), ref_out, elems, shape_.out, c.st.stream);
    c.res[i].differing = std::max<int64_t>(c.res[i].differing, 0) + d;
  }
  c.g.barrier();  // nobody's next call writes into an output before every rank compared
}

void SuiteRun::run_rank(comm::Group& g, int64_t m, const References& refs, std::vector<ArmResult>& res) {
  const RankCall c{g, m, refs, res, *states_[g.rank()]};
  prepare_gemm_arms(c);
  std::vector<size_t> runnable;
  for (size_t i = 0; i < arms_.size(); ++i) {
    res[i].unavailable = c.st.arms[i].unavailable;
    res[i].gemm_plan = c.st.arms[i].share_plan;
    res[i].gemm_plan_reason = c.st.arms[i].share_reason;
    if (res[i].unavailable.empty()) res[i].unavailable = t_.unavailable_at(arms_[i], m);
    if (res[i].unavailable.empty()) runnable.push_back(i);
  }
  if (runnable.empty()) return;
  for (size_t i : runnable) check(c, i, "before timing", true);
  compare_with_reference_arm(c, runnable);
  // What is checked after the timing is the timed replays' own output: NaN first.
  for (size_t i : runnable) poison(c, i);
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(c.st.stream));
  g.barrier();
  std::vector<bench::Arm> timed;
  for (size_t i : runnable)
    timed.push_back({arms_[i].name, [this, &c, i](cudaStream_t s, int call) { enqueue(c, i, s, call); }});
  const std::vector<bench::Timing> t = time_rank_arms(g, timed, common_, calls_, c.st.stream);
  for (size_t j = 0; j < runnable.size(); ++j) {
    res[runnable[j]].timing = t[j];
    res[runnable[j]].ran = true;
  }
  for (size_t i : runnable) check(c, i, "after timing (the timed replays' output)", false);
  compare_with_reference_arm(c, runnable);
}

}  // namespace weave::cli::fused_bench
