#include "cli/decode_options.hpp"

#include <cstdio>
#include <optional>
#include <set>
#include <sstream>

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "cli/preset_options.hpp"
#include "common/check.hpp"
#include "gemv/gemv.hpp"
#include "weave/error.hpp"

namespace weave::cli {
namespace {

bool ships(const LayerPreset& l, ScaleMode q) {
  for (const ScaleMode s : l.quants)
    if (s == q) return true;
  return false;
}

std::string shipped_list(const LayerPreset& l) {
  std::string s;
  for (const ScaleMode q : l.quants) s += (s.empty() ? "" : ", ") + std::string(to_string(q));
  return s;
}

}  // namespace

void add_decode_options(CLI::App& app, DecodeOptions& o) {
  std::string names;
  for (const LayerPreset& l : layer_presets()) names += (names.empty() ? "" : ", ") + std::string(l.name);
  app.add_option("--preset", o.presets,
                 "decoder layers, comma-separated (default: all): " + names +
                     " (`weave plan --presets` lists their GEMMs and splits)");
  add_list_option(app, "--tp", o.tps,
                  "tensor-parallel worlds, comma-separated: each GEMM runs as one rank's shard (column: N / tp, "
                  "row: K / tp)",
                  int_range(1, 8))
      ->capture_default_str();
  add_list_option(app, "-m,--m", o.ms,
                  "tokens per decode step, comma-separated, 1.." + std::to_string(kDecodeMaxM) +
                      " (default: the preset's 1,2,4,8,16,32)",
                  int_range(1, kDecodeMaxM));
  add_list_option(app, "--quant", o.quants,
                  "quantisations, comma-separated: each runs for the presets that ship it (default: each preset's "
                  "first: llama3-70b bf16, qwen3-32b bf16, deepseek-v3 blockscale)");
  app.add_option("--decode-route", o.route,
                 "weave's GEMMs at M <= 32: auto (the planner: the decode GEMV at M <= 8, mxfp8 32, the tiled "
                 "kernels above) | gemv (every GEMM on the GEMV; M <= 32 only) | tiles (every GEMM on the tiled "
                 "kernels)")
      ->capture_default_str();
}

std::vector<DecodeRun> resolve_decode_runs(const DecodeOptions& o) {
  std::vector<std::string> why;
  std::vector<const LayerPreset*> layers;
  if (o.presets.empty()) {
    for (const LayerPreset& l : layer_presets()) layers.push_back(&l);
  } else {
    std::set<std::string> seen;
    for (const std::string& name : preset_names(o.presets, /*many=*/true)) {  // refuses an empty name
      if (!seen.insert(name).second) {
        why.push_back("--preset " + name + ": given twice");
        continue;
      }
      const LayerPreset* l = find_layer_preset(name);
      if (l == nullptr) {
        std::string known;
        for (const LayerPreset& k : layer_presets()) known += (known.empty() ? "" : ", ") + std::string(k.name);
        why.push_back("--preset " + name + ": no such layer (known: " + known + ")");
        continue;
      }
      layers.push_back(l);
    }
  }
  std::vector<ScaleMode> quants;
  for (const std::string& q : o.quants) {
    try {
      quants.push_back(quant_option(q));
    } catch (const Error& e) {
      why.push_back(e.message());
    }
  }
  for (const ScaleMode q : quants) {
    bool any = false;
    for (const LayerPreset* l : layers) any = any || ships(*l, q);
    if (!any && !layers.empty())
      why.push_back("--quant " + std::string(to_string(q)) + ": no chosen preset ships it");
  }
  std::set<int> tps_seen;
  for (const int tp : o.tps)
    if (!tps_seen.insert(tp).second) why.push_back("--tp " + std::to_string(tp) + ": given twice");
  std::set<std::int64_t> ms_seen;
  for (const std::int64_t m : o.ms) {
    if (m < 1 || m > kDecodeMaxM)
      why.push_back("-m " + std::to_string(m) + ": tokens per step must be in 1.." + std::to_string(kDecodeMaxM));
    else if (!ms_seen.insert(m).second)
      why.push_back("-m " + std::to_string(m) + ": given twice");
  }
  WEAVE_EXPECT_ARG(!o.tps.empty(), "--tp: give at least one world");
  const std::optional<DecodeRoute> parsed_route = parse_decode_route(o.route);
  if (!parsed_route) why.push_back("--decode-route '" + o.route + "': expected auto, gemv or tiles");
  const DecodeRoute route = parsed_route.value_or(DecodeRoute::kAuto);
  if (route == DecodeRoute::kGemv)
    for (const std::int64_t m : ms_seen)
      if (m > detail::kGemvMaxM)
        why.push_back("--decode-route gemv: -m " + std::to_string(m) + " is past the GEMV's " +
                      std::to_string(detail::kGemvMaxM) + " tokens");

  std::vector<DecodeRun> runs;
  for (const LayerPreset* l : layers) {
    std::vector<ScaleMode> mine;
    if (o.quants.empty()) {
      mine.push_back(l->quants.front());
    } else {
      for (const ScaleMode q : quants)
        if (ships(*l, q)) mine.push_back(q);
      // Named presets must each run; the default (every preset) keeps those that ship a mode.
      if (mine.empty() && !o.presets.empty() && quants.size() == o.quants.size())
        why.push_back("--preset " + std::string(l->name) + ": ships none of --quant's modes (it ships " +
                      shipped_list(*l) + ")");
    }
    for (const int tp : tps_seen)
      for (const ScaleMode q : mine) {
        const std::string bad = layer_shard_violation(*l, tp, q);
        if (!bad.empty()) {
          why.push_back("--tp " + std::to_string(tp) + ": " + bad);
          continue;
        }
        DecodeRun r{.layer = l, .tp = tp, .quant = q, .gemms = shard_layer_preset(*l, tp, q), .route = route};
        if (o.ms.empty())
          r.ms.assign(l->ms.begin(), l->ms.end());
        else
          r.ms.assign(ms_seen.begin(), ms_seen.end());
        runs.push_back(std::move(r));
      }
  }
  if (!why.empty()) {
    std::string all;
    for (const std::string& w : why) all += (all.empty() ? "" : "; ") + w;
    WEAVE_EXPECT_ARG(false, all);
  }
  return runs;
}

std::int64_t weight_bytes(std::int64_t n, std::int64_t k, ScaleMode quant) {
  const auto cdiv = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  switch (quant) {
    case ScaleMode::kBF16: return 2 * n * k;
    case ScaleMode::kPtpc: return n * k + 4 * n;
    case ScaleMode::kBlockscale: return n * k + 4 * cdiv(n, 128) * cdiv(k, 128);
    case ScaleMode::kMxfp8: return n * k + cdiv(n, 32) * cdiv(k, 32);
  }
  return 0;
}

std::int64_t layer_weight_bytes(const DecodeRun& run) {
  std::int64_t total = 0;
  for (const LayerGemmShard& g : run.gemms) total += weight_bytes(g.n, g.k, run.quant);
  return total;
}

DecodeTarget decode_target(std::int64_t m) {
  if (m <= 8) return {.min_hbm_fraction = 0.75, .max_ratio = 0.8};
  if (m <= 32) return {.min_hbm_fraction = 0.60, .max_ratio = 0.8};
  return {.min_hbm_fraction = 0, .max_ratio = 1.0};
}

DecodeJudgement judge_decode(std::int64_t m, double hbm_fraction, double ratio, double read_ratio) {
  const DecodeTarget t = decode_target(m);
  DecodeJudgement j;
  char buf[160];
  if (t.min_hbm_fraction > 0 && !(hbm_fraction >= t.min_hbm_fraction)) {
    std::snprintf(buf, sizeof buf, "HBM %.0f%% < %.0f%%", 100 * hbm_fraction, 100 * t.min_hbm_fraction);
    j.text += buf;
    j.met = false;
  }
  if (!(ratio <= t.max_ratio)) {  // a NaN ratio (no baseline) is a miss: the target is relative
    std::snprintf(buf, sizeof buf, "%s%.2fx cuBLASLt > %.2fx", j.text.empty() ? "" : ", ", ratio, t.max_ratio);
    j.text += buf;
    j.met = false;
    if (read_ratio > t.max_ratio) {  // false for NaN
      std::snprintf(buf, sizeof buf, " (below the read: %.2fx)", read_ratio);
      j.text += buf;
    }
  }
  if (j.met) j.text = "met";
  return j;
}

std::string decode_row_name(const DecodeRun& run, std::int64_t m) {
  return std::string(run.layer->name) + " tp" + std::to_string(run.tp) + " m" + std::to_string(m);
}

}  // namespace weave::cli
