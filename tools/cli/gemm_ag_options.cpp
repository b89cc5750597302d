#include "cli/gemm_ag_options.hpp"

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "common/check.hpp"
#include "weave/error.hpp"

namespace weave::cli {

void add_gemm_ag_options(CLI::App& app, GemmAgOptions& o, bool with_layout, bool with_mode, bool many) {
  const auto dim = int_range(std::int64_t{1}, (std::int64_t{1} << 31) - 1);
  o.typed.m = add_list_option(app, "-m,--m", o.ms, "rows per rank, comma-separated (one row each)",
                              int_range(1, std::int64_t{1} << 20));
  o.typed.n = app.add_option("-n,--n", o.n, "output columns (rows of B)")->check(dim)->capture_default_str();
  o.typed.k = app.add_option("-k,--k", o.k, "reduction length")->check(dim)->capture_default_str();
  app.add_option("--m-max", o.m_max, "largest M per rank the op is built for (sizes its window; 0: the largest --m)")
      ->check(int_range(std::int64_t{0}, std::int64_t{1} << 20))->capture_default_str();
  o.typed.quant = app.add_option("--quant", o.quant, "bf16 | ptpc | blockscale | mxfp8")->capture_default_str();
  if (with_layout) app.add_option("--scale-layout", o.layout, "scale layout: raw | packed (mxfp8) | mn-major (blockscale: A scales M-contiguous)")->capture_default_str();
  o.typed.out = app.add_option("--out", o.out, "output dtype: bf16 | fp32 (fp32 only for bf16 inputs; default: fp32 for bf16 "
                                 "inputs, bf16 for fp8)");
  if (with_mode)
    app.add_option("--mode", o.mode, "auto | gemm-only | split-nccl | split-lsa | split-ce | fused-lsa | fused-ce")
        ->capture_default_str();
  app.add_option("--mx-route", o.mx_route, "mxfp8: auto (the planner's model per call) | native (the fp8 kernel) | bf16 (convert A and B exactly to bf16, then the bf16 kernel; the native kernel where a scale cannot be carried)")->capture_default_str();
  o.many_presets = many;
  app.add_option("--preset", o.preset,
                 std::string(many ? "NAME[,NAME...]: layers of the preset table, each run in turn" : "NAME: a layer of the preset table") +
                     " (`weave plan --presets` lists them): sets N, K, the output dtype, the default --quant and -m "
                     "list (rows per rank); -n, -k and --out are then refused");
}

std::vector<GemmAgOptions> gemm_ag_shapes(const GemmAgOptions& o, int world) {
  const std::vector<std::string> names = preset_names(o.preset, o.many_presets);
  if (names.empty()) {
    gemm_ag_config(o, world);
    return {o};
  }
  std::vector<GemmAgOptions> shapes;
  for (const std::string& name : names) {
    GemmAgOptions s = o;
    const ModelPreset& p = preset_for_op(name, PresetOp::kGemmAllGather, o.typed, s.quant);
    const PresetShard shard = shard_model_preset(p, world, quant_option(s.quant));
    s.preset = name;
    s.n = shard.n;
    s.k = shard.k;
    s.out = std::string(to_string(p.out));
    if (o.typed.m == nullptr || o.typed.m->count() == 0) s.ms.assign(p.ms.begin(), p.ms.end());
    try {
      gemm_ag_config(s, world);
    } catch (const Error& e) {
      WEAVE_EXPECT_ARG(false, "--preset " << name << " at world " << world << " (N = " << s.n << ", K = " << s.k
                                          << ", " << s.quant << " -> " << s.out << "): " << e.message());
    }
    shapes.push_back(std::move(s));
  }
  return shapes;
}

std::string name_gemm_ag_rules(const std::string& why, const GemmAllGatherConfig& c, int world) {
  const std::string q(to_string(c.quant)), out(to_string(c.out_dtype));
  return name_rules(why, [&](const std::string& p) -> std::string {
    if (starts_with(p, "world ")) return "--world " + std::to_string(world);
    if (starts_with(p, "m_max ")) return "--m-max " + std::to_string(c.m_max);
    if (starts_with(p, "out_dtype ")) return "--out " + out;
    if (starts_with(p, "fp8 modes ")) return "--quant " + q + " --out " + out;
    if (starts_with(p, "the per-rank GEMM ")) return "--n " + std::to_string(c.n) + " --k " + std::to_string(c.k) + " --quant " + q;
    if (starts_with(p, "n must ")) return "--n " + std::to_string(c.n);
    if (starts_with(p, "k must ")) return "--k " + std::to_string(c.k);
    if (starts_with(p, "the output ")) return "--world " + std::to_string(world) + " --m-max " + std::to_string(c.m_max) + " --n " + std::to_string(c.n);
    return "";
  });
}

GemmAllGatherConfig gemm_ag_config(const GemmAgOptions& o, int world) {
  GemmAllGatherConfig c;
  const ScaleMode quant = quant_option(o.quant);
  const ScaleLayout layout = scale_layout_option(o.layout);
  const std::string out_name = o.out.empty() ? (quant == ScaleMode::kBF16 ? "fp32" : "bf16") : o.out;
  const auto out = parse_dtype(out_name);
  WEAVE_EXPECT_ARG(out == DType::kBF16 || out == DType::kF32, "--out '" << out_name << "': expected bf16 or fp32");
  const auto mode = parse_gemm_all_gather_mode(o.mode);
  WEAVE_EXPECT_ARG(mode.has_value(),
                   "--mode '" << o.mode << "': expected auto, gemm-only, split-nccl, split-lsa, split-ce, fused-lsa or fused-ce");
  c.m_max = m_max_option(o.ms, o.m_max, "rows per rank");
  c.n = o.n;
  c.k = o.k;
  c.quant = quant;
  c.scale_layout = layout;  // a layout the quant has not is refused below, by name
  c.out_dtype = *out;
  c.mode = *mode;
  c.mx_route = mx_route_option(o.mx_route, quant);
  const std::string bad = name_gemm_ag_rules(GemmAllGather::validate(c, world), c, world);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  return c;
}

}  // namespace weave::cli
