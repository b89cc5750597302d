// The fused-plan engine (plan_fused_engine.hpp): checks the options, prints the header lines, one
// table row per M from the trait's planner, the closing lines, and the JSON document.
#include "cli/plan_fused_engine.hpp"

#include <cstdio>
#include <fstream>

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "cli/preset_options.hpp"
#include "common/check.hpp"
#include "gemm/planner.hpp"
#include "weave/error.hpp"

namespace weave::cli::fused_plan {
namespace {

std::string fmt_us(double us) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", us);
  return buf;
}

void print_header(const FusedPlanTrait& t, const FusedPlanOptions& o) {
  const FusedPlanTrait::Shape& s = t.shape();
  if (!s.preset.empty()) {
    std::printf("%s\n", preset_header(s.preset, o.world, s.quant).c_str());
  }
  const bool scaled = s.quant == ScaleMode::kMxfp8 || s.quant == ScaleMode::kBlockscale;
  const std::string scales = scaled ? " (" + std::string(to_string(s.layout)) + " scales)" : "";
  std::printf("%s: n=%lld k=%lld%s %s%s -> %s, world %d, mode %s, sms %d, m_max %lld%s\n", t.name(),
              static_cast<long long>(s.n), static_cast<long long>(s.k), t.k_note(), std::string(to_string(s.quant)).c_str(),
              scales.c_str(), std::string(to_string(s.out)).c_str(), o.world, s.mode.c_str(), o.sms,
              static_cast<long long>(s.m_max), t.header_tail().c_str());
  const std::string fused = t.fused_kernel();
  if (const std::string none = t.no_fused_mode(); !none.empty())
    std::printf("fused mode: none (%s)\n", none.c_str());
  else
    std::printf("fused kernel: %s\n", fused.empty() ? "not in this build" :
                                      o.no_fused ? (fused + " (taken as unavailable: --no-fused)").c_str()
                                                 : fused.c_str());
  const PlanRates rates = t.rates();
  std::printf("model (%s): GEMM %.0f TFLOP/s, links %.0f GB/s per direction, %s call %.0f us; "
              "an NCCL communicator is assumed (split-nccl available)\n",
              t.rates_source(), rates.gemm_tflops, rates.link_gbps, t.collective(), rates.comm_latency_us);
  std::printf("window per rank: %s (%s)\n", human_bytes(t.window_bytes()).c_str(), t.window_contents().c_str());
}

// The table's columns: m tile tiles waves grid, the trait's, then the modelled times (fused_us "-"
// for an op without a fused mode), mode, reason.
void print_column_heads(const FusedPlanTrait& t) {
  std::printf("%7s %-7s %6s %6s %5s ", "m", "tile", "tiles", "waves", "grid");
  for (const PlanColumn& c : t.columns()) std::printf("%*s ", c.width, c.header);
  std::printf("%9s %9s %9s %9s  %-10s %s\n", "gemm_us", "comm_us", "split_us", "fused_us", "mode", "reason");
}

nlohmann::json print_row(const FusedPlanTrait& t, std::int64_t m, const PlanRow& p) {
  // route gemv: the op's GEMM is the decode GEMV (p.gemv: so is its mode; block_m 0: ag-gemm's GEMM).
  nlohmann::json row = {{"m", m}, {"route", p.gemv || p.block_m == 0 ? "gemv" : "tiles"}};
  if (p.gemv) {
    std::printf("%7lld %-7s %6s %6s %5s ", static_cast<long long>(m), "gemv", "-", "-", "-");
  } else {
    const std::string tile =
        p.block_m == 0 ? std::string("gemv") : std::to_string(p.block_m) + "x" + std::to_string(p.block_n);
    std::printf("%7lld %-7s %6lld %6.2f %5d ", static_cast<long long>(m), tile.c_str(),
                static_cast<long long>(p.tiles), p.waves, p.grid);
    row.update({{"block_m", p.block_m}, {"block_n", p.block_n}, {"tiles", p.tiles}, {"waves", p.waves},
                {"grid", p.grid}});
  }
  const std::vector<PlanColumn>& columns = t.columns();
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (p.gemv && columns[i].tiled) {
      std::printf("%*s ", columns[i].width, "-");
      continue;
    }
    const std::int64_t v = p.extras.at(i);
    const std::string text = columns[i].bytes ? human_bytes(static_cast<std::uint64_t>(v)) : std::to_string(v);
    std::printf("%*s ", columns[i].width, text.c_str());
    row[columns[i].key] = v;
  }
  const bool fused_mode = t.no_fused_mode().empty() && !p.gemv;
  const std::string fused_us = fused_mode ? fmt_us(p.model_fused_us) : "-";
  std::printf("%9.1f %9.1f %9.1f %9s  %-10s %s\n", p.model_gemm_us, p.model_comm_us, p.model_split_us,
              fused_us.c_str(), p.mode.c_str(), p.reason.c_str());
  row["model_gemm_us"] = p.model_gemm_us;
  row["model_comm_us"] = p.model_comm_us;
  row["model_split_us"] = p.model_split_us;
  if (fused_mode) row["model_fused_us"] = p.model_fused_us;
  row["mode"] = p.mode;
  row["reason"] = p.reason;
  return row;
}

void write_json(const FusedPlanTrait& t, const FusedPlanOptions& o, bool fused_available, nlohmann::json rows) {
  const FusedPlanTrait::Shape& s = t.shape();
  const std::string fused = t.fused_kernel();
  const PlanRates rates = t.rates();
  nlohmann::json doc = {{"topic", t.name()},
                        {"preset", s.preset},
                        {"n", s.n},
                        {t.k_key(), s.k},
                        {"m_max", s.m_max},
                        {"quant", to_string(s.quant)},
                        {"scale_layout", to_string(s.layout)},
                        {"out", to_string(s.out)},
                        {"world", o.world},
                        {"mode", s.mode},
                        {"sms", o.sms},
                        {"fused_kernel", fused},
                        {"fused_available", fused_available},
                        {"rates", {{"gemm_tflops", rates.gemm_tflops}, {"link_gbps", rates.link_gbps},
                                   {"comm_latency_us", rates.comm_latency_us}}},
                        {"rows", std::move(rows)}};
  if (const std::string none = t.no_fused_mode(); !none.empty()) doc["fused_mode"] = "none: " + none;
  t.add_doc_extras(doc);
  std::ofstream f(o.json_path);
  WEAVE_EXPECT_ARG(f.good(), "--json '" << o.json_path << "': cannot open for writing");
  f << doc.dump(2) << "\n";
}

}  // namespace

int run_fused_plan(const FusedPlanOptions& o, const std::function<std::unique_ptr<FusedPlanTrait>()>& make_trait) {
  check_output_file("--json", o.json_path);
  const std::unique_ptr<FusedPlanTrait> trait = make_trait();  // --preset filled in, the config checked
  const FusedPlanTrait& t = *trait;
  const FusedPlanTrait::Shape& s = t.shape();
  // Checked here so a bad table is refused naming --calibration (exit 2); the planner reads it again.
  static_cast<void>(calibration_option(o.calibration, s.mode_is_auto, t.name(), s.quant, s.layout, s.out, s.n, s.k,
                                       o.world));
  const bool fused_available = !t.fused_kernel().empty() && !o.no_fused;

  print_header(t, o);
  print_column_heads(t);
  nlohmann::json rows = nlohmann::json::array();
  for (const std::int64_t m : s.ms)
    rows.push_back(print_row(t, m, t.plan(m, FusedPlanMachine{.num_sms = o.sms, .fused_kernels = !o.no_fused})));
  for (const std::string& line : t.table_notes()) std::printf("%s\n", line.c_str());
  std::printf("# model only (no GPU): the us columns come from the rates above, not from a measurement; "
              "`weave bench %s` measures\n", t.name());
  // An explicit mode the op would refuse here (kUnavailable at construction): say so, exit 1.
  std::string refused;
  if (s.mode_needs_fused && !fused_available)
    refused = t.fused_kernel().empty() ? t.no_kernel_reason() : "--no-fused";
  if (!refused.empty())
    std::printf("mode %s: the op would refuse it (kUnavailable): %s\n", s.mode.c_str(), refused.c_str());
  if (!o.json_path.empty()) write_json(t, o, fused_available, std::move(rows));
  return refused.empty() ? 0 : 1;
}

void add_fused_plan_options(CLI::App& app, FusedPlanOptions& o, const PlanHelp& help) {
  app.add_option("--world", o.world, "ranks (1..8)")->capture_default_str();
  app.add_option("--sms", o.sms, "CTAs per rank to plan for (" + help.sms_note + "H100/H200: 132 SMs)")
      ->check(int_range(1, gemm::kMaxSms))->capture_default_str();
  if (!help.no_fused_auto.empty())
    app.add_flag("--no-fused", o.no_fused,
                 "plan as if the fused kernel were unavailable (auto then picks " + help.no_fused_auto + ")");
  app.add_option("--json", o.json_path, "also write the rows as JSON to FILE (checked before planning)");
  if (!help.calibration_match.empty())
    app.add_option("--calibration", o.calibration,
                   "auto takes the mode measured fastest per M in FILE (written by `weave bench " + std::string(help.name) +
                       " --calibrate`; must be for this " + help.calibration_match + ")");
  app.footer(help.footer);
}

}  // namespace weave::cli::fused_plan
