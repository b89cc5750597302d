#include "cli/preset_options.hpp"

#include <cstdio>
#include <vector>

#include "common/check.hpp"
#include "weave/error.hpp"

namespace weave::cli {
namespace {

std::string per_rank(const ModelPreset& p, const PresetShard& s) {
  if (p.op == PresetOp::kGemmAllReduce) return "K_r " + std::to_string(s.k);
  return "M x " + std::to_string(s.n) + " x " + std::to_string(s.k);
}

}  // namespace

std::vector<std::string> preset_names(const std::string& text, bool many) {
  std::vector<std::string> names;
  if (text.empty()) return names;
  for (size_t at = 0;;) {
    const size_t comma = text.find(',', at);
    names.push_back(text.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  for (const std::string& n : names) WEAVE_EXPECT_ARG(!n.empty(), "--preset '" << text << "': an empty name");
  WEAVE_EXPECT_ARG(many || names.size() == 1,
                   "--preset '" << text << "': one preset per plan (`weave bench` takes several)");
  return names;
}

bool typed(const CLI::Option* o) { return o != nullptr && o->count() > 0; }

void refuse_preset_shape_options(const PresetTyped& t, const std::string& name, const char* sets, std::string_view out) {
  WEAVE_EXPECT_ARG(!typed(t.n), "-n/--n: --preset " << name << " sets " << sets << "; give one or the other");
  WEAVE_EXPECT_ARG(!typed(t.k), "-k/--k: --preset " << name << " sets " << sets << "; give one or the other");
  WEAVE_EXPECT_ARG(!typed(t.out), "--out: --preset " << name << " sets the output dtype (" << out
                                                     << "); give one or the other");
}

const ModelPreset& preset_for_op(const std::string& name, PresetOp op, const PresetTyped& t, std::string& quant,
                                 std::string_view subcommand) {
  const ModelPreset* p = find_model_preset(name);
  if (p == nullptr) model_preset(name);  // throws, listing the known names
  const std::string use = " (use `" + std::string(to_string(p->op)) + " --preset " + name + "`)";
  if (!subcommand.empty() && subcommand != to_string(op))
    WEAVE_EXPECT_ARG(p->op == op, "--preset " << name << ": a " << to_string(p->op) << " layer; " << subcommand
                                              << " takes the " << to_string(op) << " layers" << use);
  WEAVE_EXPECT_ARG(p->op == op, "--preset " << name << ": a " << to_string(p->op) << " layer, not " << to_string(op) << use);
  refuse_preset_shape_options(t, name, p->op == PresetOp::kGemmAllReduce ? "N and K (K_r = K / world)" : "N and K",
                              to_string(p->out));
  if (!typed(t.quant)) quant = std::string(to_string(p->quants.front()));
  return *p;
}

std::string preset_line(const ModelPreset& p, const PresetShard& s) {
  return "preset " + std::string(p.name) + " (" + std::string(p.summary) + "): N = " + std::to_string(p.n) +
         ", K = " + std::to_string(p.k) + "; at world " + std::to_string(s.world) + " per rank " + per_rank(p, s) +
         " (" + std::string(p.source) + ")";
}

std::string preset_header(const std::string& name, int world, ScaleMode quant) {
  if (const ModelPreset* p = find_model_preset(name)) return preset_line(*p, shard_model_preset(*p, world, quant));
  const LayerGemmRef ref = find_layer_gemm(name);
  WEAVE_EXPECT_ARG(ref.gemm != nullptr, "--preset " << name << ": no such preset");
  const LayerGemmShard s = shard_layer_gemm(ref, world, quant);
  return "preset " + name + " (" + std::string(to_string(ref.gemm->split)) + " GEMM of " +
         std::string(ref.layer->summary) + "): N = " + std::to_string(ref.gemm->n) + ", K = " +
         std::to_string(ref.gemm->k) + "; at world " + std::to_string(world) + " per rank M x " + std::to_string(s.n) +
         " x " + std::to_string(s.k) + " (" + std::string(ref.gemm->source) + ")";
}

std::string presets_listing() {
  const int worlds[] = {1, 2, 4, 8};
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%-30s %-7s %6s %6s  %-22s %-4s  %s\n", "preset", "op", "N", "K",
                "quants (first: default)", "out", "per rank at world 1 / 2 / 4 / 8 (default quant)");
  s += buf;
  std::vector<std::string> notes;
  for (const ModelPreset& p : model_presets()) {
    std::string quants;
    for (const ScaleMode q : p.quants) quants += (quants.empty() ? "" : ",") + std::string(to_string(q));
    std::string shards;
    for (const int w : worlds) {
      const std::string why = preset_shard_violation(p, w, p.quants.front());
      std::string cell = "-";
      if (why.empty()) {
        const PresetShard sh = shard_model_preset(p, w, p.quants.front());
        cell = p.op == PresetOp::kGemmAllReduce ? "K_r " + std::to_string(sh.k) : "Mx" + std::to_string(sh.n) + "x" + std::to_string(sh.k);
      } else {
        notes.push_back(why);
      }
      shards += (shards.empty() ? "" : " / ") + cell;
    }
    std::snprintf(buf, sizeof(buf), "%-30s %-7s %6lld %6lld  %-22s %-4s  %s\n", std::string(p.name).c_str(),
                  std::string(to_string(p.op)).c_str(), static_cast<long long>(p.n), static_cast<long long>(p.k),
                  quants.c_str(), std::string(to_string(p.out)).c_str(), shards.c_str());
    s += buf;
    s += "    " + std::string(p.summary) + "\n    source: " + std::string(p.source) + "\n";
  }
  s += "# gemm-ar: every rank holds A [M, K_r] and B [N, K_r] and receives the summed [M, N]; K_r = K / world.\n"
       "# gemm-ag: every rank computes its own M rows with the whole B [N, K]; every rank receives world x M rows.\n"
       "# gemm-rs takes the gemm-ar layers (sequence parallelism): the same K_r shard; rank r receives rows\n"
       "#   [r M/W, (r+1) M/W) of the sum, so each default M is rounded up to a multiple of the world.\n"
       "# `weave plan gemm-ar|gemm-rs|gemm-ag --preset NAME --world W` plans one; -m, --m-max and --quant (a\n"
       "# shipped one) may still be given, -n, -k and --out not.\n";
  for (const std::string& n : notes) s += "# does not shard: " + n + "\n";
  s += layer_presets_listing();
  return s;
}

std::string layer_presets_listing() {
  std::string s = "\n# decoder layers (`weave plan|bench decode --preset NAME --tp W`): every GEMM of one layer's decode "
                  "step, N x K whole and per rank at tp 8;\n# the column and replicated GEMMs by full name are "
                  "ag-gemm's presets (`weave plan|bench ag-gemm --preset llama3-70b.gate_up_proj`)\n";
  char buf[512];
  for (const LayerPreset& l : layer_presets()) {
    std::string quants;
    for (const ScaleMode q : l.quants) quants += (quants.empty() ? "" : ",") + std::string(to_string(q));
    s += std::string(l.name) + ": " + std::string(l.summary) + " (quants " + quants + ")\n";
    const std::string why = layer_shard_violation(l, 8, l.quants.front());
    const std::vector<LayerGemmShard> tp8 = why.empty() ? shard_layer_preset(l, 8, l.quants.front()) : std::vector<LayerGemmShard>{};
    for (size_t i = 0; i < l.gemms.size(); ++i) {
      const LayerGemm& g = l.gemms[i];
      const std::string rank = tp8.empty() ? "-" : std::to_string(tp8[i].n) + "x" + std::to_string(tp8[i].k);
      std::snprintf(buf, sizeof(buf), "    %-14s %-10s %6lldx%-6lld tp8 %-12s %s\n", std::string(g.name).c_str(),
                    std::string(to_string(g.split)).c_str(), static_cast<long long>(g.n), static_cast<long long>(g.k),
                    rank.c_str(), std::string(g.source).c_str());
      s += buf;
    }
    if (!why.empty()) s += "    # does not shard at tp 8: " + why + "\n";
    if (!l.left_out.empty()) s += "    not in the chain: " + std::string(l.left_out) + "\n";
  }
  return s;
}

}  // namespace weave::cli
