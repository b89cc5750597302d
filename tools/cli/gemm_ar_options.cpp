#include "cli/gemm_ar_options.hpp"

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "comm/protocol.hpp"
#include "common/check.hpp"
#include "weave/error.hpp"

namespace weave::cli {

void add_row_parallel_options(CLI::App& app, GemmArOptions& o, const RowParallelWords& words, bool with_layout,
                              bool with_mode, bool many) {
  const auto dim = int_range(std::int64_t{1}, (std::int64_t{1} << 31) - 1);
  o.typed.m = add_list_option(app, "-m,--m", o.ms, words.m, int_range(1, std::int64_t{1} << 20));
  o.typed.n = app.add_option("-n,--n", o.n, "output columns (rows of each rank's B_r)")->check(dim)->capture_default_str();
  o.typed.k = app.add_option("-k,--k", o.k,
                 "this rank's K shard K_r (the per-rank reduction length, the same on every rank; the layer's full "
                 "K is world x K_r)")
      ->check(dim)->capture_default_str();
  app.add_option("--m-max", o.m_max, "largest M the op is built for (sizes its window; 0: the largest --m)")
      ->check(int_range(std::int64_t{0}, std::int64_t{1} << 20))->capture_default_str();
  o.typed.quant = app.add_option("--quant", o.quant, "bf16 | ptpc | blockscale | mxfp8 (output: bf16 in every mode)")->capture_default_str();
  if (with_layout) app.add_option("--scale-layout", o.layout, "scale layout: raw | packed (mxfp8) | mn-major (blockscale: A scales M-contiguous)")->capture_default_str();
  if (with_mode) app.add_option("--mode", o.mode, words.mode)->capture_default_str();
  app.add_option("--mx-route", o.mx_route, "mxfp8: auto (the planner's model per call) | native (the fp8 kernel) | bf16 (convert A and B exactly to bf16, then the bf16 kernel; the native kernel where a scale cannot be carried)")->capture_default_str();
  app.add_option("--chunks", o.chunks,
                 "fused: chunks per band, one flag each per leg (0.." + std::to_string(comm::kMaxChunks) +
                     "; 0: the planner's, about one per two waves of tiles)")
      ->capture_default_str();
  app.add_flag("--exact-own", o.exact_own,
               "fused: keep this rank's own term in fp32 (smaller error; then no longer bitwise equal to split-lsa)");
  o.many_presets = many;
  app.add_option("--preset", o.preset,
                 std::string(many ? "NAME[,NAME...]: layers of the preset table, each run in turn" : "NAME: a layer of the preset table") +
                     " (`weave plan --presets` lists them): " + words.preset);
}

void add_gemm_ar_options(CLI::App& app, GemmArOptions& o, bool with_layout, bool with_mode, bool many) {
  add_row_parallel_options(
      app, o,
      {.m = "rows M, comma-separated (one row each; every rank holds A_r [M, K_r])",
       .mode = "auto | gemm-only | split-nccl | split-lsa | split-ce | decode (m <= 32) | fused | fused-rs | fused-ce (the fused schedule, both legs pulled by copy engines chunk by chunk)",
       .preset = "sets N and K_r = K / world, the default --quant and -m list; -n and -k are then refused"},
      with_layout, with_mode, many);
}

void fill_row_parallel_preset(GemmArOptions& s, const std::string& name, int world, const char* subcommand) {
  const ModelPreset& p = preset_for_op(name, PresetOp::kGemmAllReduce, s.typed, s.quant, subcommand);
  const PresetShard shard = shard_model_preset(p, world, quant_option(s.quant));
  s.preset = name;
  s.n = shard.n;
  s.k = shard.k;
  if (s.typed.m == nullptr || s.typed.m->count() == 0) s.ms.assign(p.ms.begin(), p.ms.end());
}

std::vector<GemmArOptions> gemm_ar_shapes(const GemmArOptions& o, int world) {
  const std::vector<std::string> names = preset_names(o.preset, o.many_presets);
  if (names.empty()) {
    gemm_ar_config(o, world);
    return {o};
  }
  std::vector<GemmArOptions> shapes;
  for (const std::string& name : names) {
    GemmArOptions s = o;
    fill_row_parallel_preset(s, name, world, "gemm-ar");
    try {
      gemm_ar_config(s, world);
    } catch (const Error& e) {
      WEAVE_EXPECT_ARG(false, "--preset " << name << " at world " << world << " (N = " << s.n << ", K_r = " << s.k
                                          << ", " << s.quant << "): " << e.message());
    }
    shapes.push_back(std::move(s));
  }
  return shapes;
}

std::string gemm_ar_option_of(const std::string& p, const GemmAllReduceConfig& c, int world) {
  const std::string q(to_string(c.quant));
  if (starts_with(p, "world ")) return "--world " + std::to_string(world);
  if (starts_with(p, "m_max ")) return "--m-max " + std::to_string(c.m_max);
  if (starts_with(p, "chunks ")) return "--chunks " + std::to_string(c.chunks);
  if (starts_with(p, "the per-rank GEMM ")) return "--n " + std::to_string(c.n) + " --k " + std::to_string(c.k) + " --quant " + q;
  if (starts_with(p, "n must ")) return "--n " + std::to_string(c.n);
  if (starts_with(p, "k (the per-rank K shard) must ") || starts_with(p, "k must ")) return "--k " + std::to_string(c.k);
  if (starts_with(p, "the output ")) return "--m-max " + std::to_string(c.m_max) + " --n " + std::to_string(c.n);
  return "";
}

std::string name_gemm_ar_rules(const std::string& why, const GemmAllReduceConfig& c, int world) {
  return name_rules(why, [&](const std::string& p) { return gemm_ar_option_of(p, c, world); });
}

GemmAllReduceConfig gemm_ar_config(const GemmArOptions& o, int world) {
  GemmAllReduceConfig c;
  const ScaleMode quant = quant_option(o.quant);
  const ScaleLayout layout = scale_layout_option(o.layout);
  const auto mode = parse_gemm_all_reduce_mode(o.mode);
  WEAVE_EXPECT_ARG(mode.has_value(),
                   "--mode '" << o.mode
                                 << "': expected auto, gemm-only, split-nccl, split-lsa, split-ce, decode, "
                                    "decode-fused, fused, fused-rs or fused-ce");
  fill_row_parallel_config(c, o, quant, layout);
  c.mode = *mode;
  const std::string bad = name_gemm_ar_rules(GemmAllReduce::validate(c, world), c, world);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  return c;
}

}  // namespace weave::cli
