// The rows of a fused-suite run (fused_suite_engine.hpp): per arm the per-rank maximum of
// medians, ratio = time / the best split arm at that M, vs_lt = time / cuBLASLt's arm, TFLOPS =
// 2*rows*N*K per rank / time (rows: M, or W M where the input is gathered), algbw = what the
// collective delivers to a rank / time (the full output, or the gathered input; busbw: the trait's
// factor, nccl-tests' convention), speedup against cuBLASLt + NCCL, overlap efficiency of the fused arms.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/suites/fused_suite_engine.hpp"

namespace weave::cli::fused_bench {

SuiteRun::Rows::Rows(const SuiteRun& run)
    : run_(run),
      report_(run.name_),
      calibration_(calibration_of(run.name_, run.shape_.quant, run.shape_.layout, run.shape_.out, run.shape_.n,
                                  run.shape_.k, run.world_, run.world_tag_, run.emulated_)) {}

void SuiteRun::Rows::error(int64_t m, const std::string& what) {
  failed_ = true;
  const auto& s = run_.shape_;
  add_error_row(report_, run_.name_, std::to_string(m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k),
                run_.quant_ + "->" + run_.out_name_, m, what, run_.world_, run_.emulated_);
}

void SuiteRun::Rows::add(int64_t m, const std::vector<std::vector<ArmResult>>& res) {
  const auto& arms = run_.arms_;
  const std::vector<bench::Timing> per_arm = max_over_ranks(res, arms.size());
  // --calibrate: the fastest of the modes auto can take that ran right (split-lsa unless beaten).
  const std::string best_auto = fastest_right_arm(
      per_arm, res, [&](size_t i) { return arms[i].kind == ArmKind::kOp && arms[i].auto_takeable; },
      [&](size_t i) { return arms[i].name; }, [&](size_t i) { return arms[i].reference; });
  if (!best_auto.empty()) calibration_.rows.push_back({m, best_auto});
  const double nan = bench::kNaN;
  base_ = {nan, nan, nan, nan, nan, nan, nan, nan, ""};
  for (size_t i = 0; i < arms.size(); ++i) {
    const double t = per_arm[i].median_us;
    if (std::isnan(t)) continue;
    if (arms[i].split && (std::isnan(base_.best_split) || t < base_.best_split))
      base_.best_split = t, base_.best_split_name = arms[i].name;
    if (arms[i].kind == ArmKind::kCublasLt) base_.lt = t;
    if (arms[i].kind == ArmKind::kWeaveGemm) base_.weave_gemm = t;
    if (arms[i].kind == ArmKind::kCublasLtNccl) base_.lt_nccl = t;
    if (arms[i].kind == ArmKind::kCublasLtNcclSym) base_.lt_sym = t;
    if (arms[i].name == "gemm-only") base_.gemm = t;
    if (arms[i].kind == ArmKind::kCommOnly) base_.comm = t;
    if (arms[i].overlap_line) base_.fused = t;
  }
  std::string progress;
  for (size_t i = 0; i < arms.size(); ++i) {
    bench::Row row = row_of(m, i, res, per_arm[i]);
    const auto& x = row.extra;
    const int64_t differing = x.contains("differing_from_split_lsa") ? x["differing_from_split_lsa"].get<int64_t>() : -1;
    const double rel_l2 = x.contains("rel_l2_vs_reference") ? x["rel_l2_vs_reference"].get<double>() : -1;
    if (row.wrong != 0 || differing > 0) failed_ = true;
    progress += " " + arms[i].name +
                (x.contains("unavailable")
                     ? " unavailable"
                     : " " + num(row.time_us, 1) + " us (#wrong " + std::to_string(row.wrong) +
                           (differing >= 0 ? ", !=split " + std::to_string(differing) : "") +
                           (rel_l2 >= 0 ? ", rel_l2 " + num(rel_l2, 5) : "") + ")");
    report_.add(std::move(row));
  }
  std::fprintf(stderr, "weave bench %s: m=%lld:%s\n", run_.name_, static_cast<long long>(m), progress.c_str());
  if (!std::isnan(base_.gemm) && !std::isnan(base_.comm) && !std::isnan(base_.fused))
    summary_lines_.push_back(overlap_line(m, base_.gemm, base_.comm, base_.fused, run_.emulated_));
  if (!std::isnan(base_.gemm) && !std::isnan(base_.weave_gemm)) {
    // Emulated world: which plan of the SM share weave::Gemm was held to.
    std::string share_plan;
    for (size_t i = 0; i < arms.size(); ++i)
      if (arms[i].kind == ArmKind::kWeaveGemm && !res[0][i].gemm_plan.empty()) share_plan = "; " + res[0][i].gemm_plan;
    summary_lines_.push_back(fmt("m=%lld: gemm-only / weave-gemm = %.3f (the op's GEMM leg against weave::Gemm of the "
                                 "same rows, same run",
                                 static_cast<long long>(m), base_.gemm / base_.weave_gemm) +
                             share_plan + ")");
  }
}

bench::Row SuiteRun::Rows::row_of(int64_t m, size_t i, const std::vector<std::vector<ArmResult>>& res,
                                  const bench::Timing& timing) const {
  const SuiteArm& arm = run_.arms_[i];
  const FusedSuiteTrait& t = run_.t_;
  const auto& s = run_.shape_;
  const int world = run_.world_;
  bench::Row row;
  row.shape = std::to_string(m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
  row.quant = run_.quant_ + "->" + run_.out_name_;
  row.mode = arm.name;
  // #wrong summed over ranks; per source block (gemm-ag) or per rank (gemm-ar) in the JSON.
  int64_t wrong = 0, differing = -1;
  double rel_l2 = -1;  // the worst rank's
  std::vector<int64_t> slots(t.wrong_per_source() ? static_cast<size_t>(t.blocks(world)) : static_cast<size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    const ArmResult& a = res[r][i];
    rel_l2 = std::max(rel_l2, a.rel_l2);
    for (size_t b = 0; b < a.wrong_from.size(); ++b) {
      if (a.wrong_from[b] < 0) continue;
      wrong += a.wrong_from[b];
      int64_t& slot = slots[t.wrong_per_source() ? b : static_cast<size_t>(r)];
      slot = std::max<int64_t>(slot, 0) + a.wrong_from[b];
    }
    if (a.differing >= 0) differing = std::max<int64_t>(differing, 0) + a.differing;
  }
  const std::string unavailable = res[0][i].unavailable;
  row.wrong = unavailable.empty() ? wrong : 0;
  row.extra = {{"world", world},
               {"emulated", run_.emulated_},
               {"m", m},
               {"n", s.n},
               {t.k_key(), s.k},
               {"quant", run_.quant_},
               {"out", run_.out_name_},
               {t.wrong_per_source() ? "wrong_from_source" : "wrong_on_rank", slots},
               {"weight_copies_per_rank", run_.copies_},
               {"calls_per_graph", run_.calls_},
               {"over_nccl", run_.over_nccl_}};
  t.add_row_extras(row.extra);
  if (run_.over_nccl_) row.extra["devices"] = run_.common_.devices;
  if (run_.emulated_) row.extra["label"] = kEmulatedLabel;
  if (!unavailable.empty()) row.extra["unavailable"] = unavailable;
  if (!res[0][i].resolved.empty()) {
    row.extra["auto_resolved"] = res[0][i].resolved;
    row.extra["auto_reason"] = res[0][i].reason;
  }
  if (const std::string note = t.checked_note(arm); !note.empty()) row.extra["checked"] = note;
  if (differing >= 0) row.extra["differing_from_split_lsa"] = differing;
  if (rel_l2 >= 0) row.extra["rel_l2_vs_reference"] = rel_l2;
  if (arm.kind == ArmKind::kCublasLt && run_.emulated_)
    row.extra["note"] = "the ranks' cuBLASLt GEMMs are not capped to an SM share (weave's grids are)";
  if (arm.kind == ArmKind::kWeaveGemm && run_.emulated_) {
    row.extra["note"] = "the ranks' weave::Gemm calls are planned for the rank's SM share, like the op's grids";
    if (!res[0][i].gemm_plan.empty()) {
      row.extra["gemm_plan"] = res[0][i].gemm_plan;
      row.extra["gemm_plan_reason"] = res[0][i].gemm_plan_reason;
    }
  }
  if (arm.kind == ArmKind::kCommOnly && run_.emulated_)
    row.extra["note"] = "includes one empty kernel per call (ends the PDL chain of lsa calls; see --help)";
  if (!unavailable.empty() || timing.samples == 0) return row;
  row.time_us = timing.median_us;
  row.noise_pct = timing.noise_pct;
  if (arm.kind != ArmKind::kCommOnly)
    row.tflops = 2.0 * double(t.gemm_rows(m, world)) * double(s.n) * double(s.k) / (row.time_us * 1e6);
  if (world > 1 && !arm.partial) {
    row.algbw_gbps = t.algbw_bytes(m, world) / (row.time_us * 1e3);
    row.busbw_gbps = row.algbw_gbps * t.busbw_factor(world);
  }
  if (!std::isnan(base_.best_split)) {
    row.baseline = "best-split:" + base_.best_split_name;
    row.baseline_us = base_.best_split;
    row.ratio = row.time_us / base_.best_split;
  }
  if (!std::isnan(base_.lt)) row.extra[t.vs_lt_key()] = row.time_us / base_.lt;
  if (arm.name == "gemm-only" && !std::isnan(base_.weave_gemm)) row.extra["vs_weave_gemm"] = row.time_us / base_.weave_gemm;
  // Against what users run today (> 1: this arm is faster).
  if (!std::isnan(base_.lt_nccl)) row.extra["speedup_vs_cublaslt_nccl"] = base_.lt_nccl / row.time_us;
  if (!std::isnan(base_.lt_sym)) row.extra["speedup_vs_cublaslt_nccl_sym"] = base_.lt_sym / row.time_us;
  if (arm.fused && !std::isnan(base_.gemm) && !std::isnan(base_.comm))
    row.extra["overlap_efficiency"] = overlap_efficiency(base_.gemm, base_.comm, row.time_us);
  return row;
}

int SuiteRun::Rows::finish(const SuiteDevice& gpu) {
  const auto& s = run_.shape_;
  print_table(report_, {.n = s.n, .k = s.k, .quant = run_.quant_, .out = run_.out_name_, .world_tag = run_.world_tag_,
                        .emulated = run_.emulated_, .vs_lt_key = run_.t_.vs_lt_key(), .extra_header = "!=split",
                        .extra_key = "differing_from_split_lsa"});
  for (const auto& line : run_.t_.table_notes(run_.common_.iters, run_.calls_)) std::printf("# %s\n", line.c_str());
  const std::string busy_after = print_closing(report_, summary_lines_, run_.notes_, gpu.device, run_.common_.idle_threshold);
  if (!run_.common_.json_path.empty()) {
    const RunFacts facts{.device = gpu.device, .gate = gpu.gate, .busy_after = busy_after, .world = run_.world_,
                         .emulated = run_.emulated_, .world1_label = run_.t_.world1_label(), .copies = run_.copies_,
                         .calls = run_.calls_, .seed = run_.opt_.seed, .m_max = s.m_max, .notes = run_.notes_};
    report_.write_json(run_.common_.json_path, run_meta(run_.common_, facts));
  }
  const char* name = run_.name_;
  if (failed_) {
    std::fprintf(stderr, "weave bench %s: FAILED: a row has #wrong > 0, differs from split-lsa, or an arm failed\n", name);
    if (!run_.opt_.calibrate.empty())
      std::fprintf(stderr, "weave bench %s: --calibrate: nothing written (the run failed)\n", name);
    return 1;
  }
  if (!run_.opt_.calibrate.empty()) write_calibration(calibration_, run_.opt_.calibrate, name);
  return 0;
}

}  // namespace weave::cli::fused_bench
