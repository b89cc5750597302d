#include "cli/ag_gemm_options.hpp"

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "common/check.hpp"
#include "weave/error.hpp"
#include "weave/layer_presets.hpp"
#include "weave/presets.hpp"

namespace weave::cli {

void add_ag_gemm_options(CLI::App& app, AgGemmOptions& o, bool with_layout, bool with_mode, bool many) {
  const auto dim = int_range(std::int64_t{1}, (std::int64_t{1} << 31) - 1);
  o.typed.m = add_list_option(app, "-m,--m", o.ms,
                              "rows per rank, comma-separated (every rank holds A_r [m, K]; the GEMM runs W x m rows)",
                              int_range(1, std::int64_t{1} << 20));
  o.typed.n = app.add_option("-n,--n", o.n, "output columns: rows of this rank's column shard B [N, K]")
                  ->check(dim)->capture_default_str();
  o.typed.k = app.add_option("-k,--k", o.k, "reduction length (A's row length: what travels per row)")
                  ->check(dim)->capture_default_str();
  app.add_option("--m-max", o.m_max, "largest m per rank the op is built for (sizes its window; 0: the largest -m)")
      ->check(int_range(std::int64_t{0}, std::int64_t{1} << 20))->capture_default_str();
  o.typed.quant = app.add_option("--quant", o.quant, "bf16 | ptpc | blockscale | mxfp8 (fp8: A travels as e4m3 plus its scales)")
      ->capture_default_str();
  if (with_layout)
    app.add_option("--scale-layout", o.layout,
                   "A's scale layout: raw only (A's scales travel with their rows; packed and mn-major interleave "
                   "the rows of several ranks and are refused)")
        ->capture_default_str();
  o.typed.out = app.add_option("--out", o.out, "output dtype: bf16 | fp32 (fp32 only for bf16 inputs)")->capture_default_str();
  if (with_mode)
    app.add_option("--mode", o.mode,
                   "auto | gemm-only | split-nccl | split-lsa | split-ce | fused-ce (fused-ce: bf16, ptpc, blockscale "
                   "with bf16 out; auto takes it only from a calibration table)")
        ->capture_default_str();
  o.many_presets = many;
  app.add_option("--preset", o.preset,
                 std::string(many ? "LAYER.GEMM[,LAYER.GEMM...]: GEMMs of the decoder layer table, each run in turn"
                                  : "LAYER.GEMM: a GEMM of the decoder layer table") +
                     ", column-parallel or replicated (e.g. llama3-70b.gate_up_proj, deepseek-v3.qkv_a_proj; `weave "
                     "plan --presets` lists them): sets N (this rank's column shard), K, the default --quant and bf16 "
                     "out; -n, -k and --out are then refused");
  app.add_option("--mx-route", o.mx_route,
                 "mxfp8: auto (the planner's model per call) | native (the fp8 kernel) | bf16 (convert A and B "
                 "exactly to bf16, then the bf16 kernel; the native kernel where a scale cannot be carried)")
      ->capture_default_str();
}

std::string name_ag_gemm_rules(const std::string& why, const AllGatherGemmConfig& c, int world) {
  const std::string q(to_string(c.quant)), out(to_string(c.out_dtype)), n = std::to_string(c.n),
      k = std::to_string(c.k), w = std::to_string(world), m_max = std::to_string(c.m_max);
  return name_rules(why, [&](const std::string& p) -> std::string {
    if (starts_with(p, "world ")) return "--world " + w;
    if (starts_with(p, "m_max ")) return "--m-max " + m_max;
    if (starts_with(p, "out_dtype ")) return "--out " + out;
    if (starts_with(p, "fp8 modes ")) return "--quant " + q + " --out " + out;
    if (starts_with(p, "scale_layout ")) return "--scale-layout " + std::string(to_string(c.scale_layout)) + " --quant " + q;
    if (starts_with(p, "mx_route ")) return "--mx-route";
    if (starts_with(p, "mode fused-ce ")) return "--mode fused-ce --quant " + q + " --out " + out;
    if (starts_with(p, "the gathered GEMM ")) {
      // One of weave::Gemm's rules for the W x m_max rows: named after what it is about.
      const size_t colon = p.find("]: ");
      const std::string rule = colon == std::string::npos ? "" : p.substr(colon + 3);
      if (starts_with(rule, "n must ")) return "--n " + n + " --out " + out;
      if (starts_with(rule, "k must ")) return "--k " + k + " --quant " + q;
      return "--world " + w + " --m-max " + m_max + " --n " + n + " --k " + k + " --quant " + q;
    }
    if (starts_with(p, "n must ")) return "--n " + n;
    if (starts_with(p, "k must ")) return "--k " + k;
    if (starts_with(p, "mxfp8 needs k ")) return "--quant " + q + " --k " + k;
    if (starts_with(p, "the gathered A ")) return "--world " + w + " --m-max " + m_max + " --n " + n + " --k " + k;
    return "";
  });
}

AllGatherGemmConfig ag_gemm_config(const AgGemmOptions& o, int world) {
  AllGatherGemmConfig c;
  const ScaleMode quant = quant_option(o.quant);
  const ScaleLayout layout = scale_layout_option(o.layout);
  const auto out = parse_dtype(o.out);
  WEAVE_EXPECT_ARG(out == DType::kBF16 || out == DType::kF32, "--out '" << o.out << "': expected bf16 or fp32");
  const auto mode = parse_all_gather_gemm_mode(o.mode);
  WEAVE_EXPECT_ARG(mode.has_value(),
                   "--mode '" << o.mode << "': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused-ce"
                              << (starts_with(o.mode, "fused") ? " (AllGatherGemm's only fused mode is fused-ce)"
                                                                : ""));
  c.m_max = m_max_option(o.ms, o.m_max, "rows per rank");
  c.n = o.n;
  c.k = o.k;
  c.quant = quant;
  c.scale_layout = layout;  // anything but raw is refused below, by name
  c.out_dtype = *out;
  c.mode = *mode;
  c.mx_route = mx_route_option(o.mx_route, quant);
  const std::string bad = name_ag_gemm_rules(AllGatherGemm::validate(c, world), c, world);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  return c;
}

namespace {

// The GEMM of the layer table called `name`, for ag-gemm: column-parallel or replicated.
LayerGemmRef ag_gemm_preset(const std::string& name) {
  const LayerGemmRef ref = find_layer_gemm(name);
  if (ref.gemm == nullptr) {
    std::string known;
    for (const LayerGemmRef& r : layer_gemms())
      if (r.gemm->split != LayerSplit::kRow) known += (known.empty() ? "" : ", ") + r.name();
    const std::string other = find_model_preset(name) != nullptr ? " (a model preset of `gemm-ar|gemm-rs|gemm-ag --preset`)" : "";
    WEAVE_EXPECT_ARG(false, "--preset " << name << ": no column-parallel or replicated GEMM of that name" << other
                                        << " (known: " << known << ")");
  }
  WEAVE_EXPECT_ARG(ref.gemm->split != LayerSplit::kRow,
                   "--preset " << name << ": a row-parallel GEMM (K split over the ranks): its input is not gathered; "
                               << "sequence parallelism runs it as `gemm-rs`"
                               << (find_model_preset(name) != nullptr ? " (`gemm-rs --preset " + name + "`)" : ""));
  return ref;
}

}  // namespace

std::vector<AgGemmOptions> ag_gemm_shapes(const AgGemmOptions& o, int world) {
  const std::vector<std::string> names = preset_names(o.preset, o.many_presets);
  if (names.empty()) {
    ag_gemm_config(o, world);
    return {o};
  }
  std::vector<AgGemmOptions> shapes;
  for (const std::string& name : names) {
    const LayerGemmRef ref = ag_gemm_preset(name);
    refuse_preset_shape_options(o.typed, name, "N (the column shard) and K", "bf16");
    AgGemmOptions s = o;
    if (!typed(o.typed.quant)) s.quant = std::string(to_string(ref.layer->quants.front()));
    const LayerGemmShard shard = shard_layer_gemm(ref, world, quant_option(s.quant));
    s.preset = name;
    s.n = shard.n;
    s.k = shard.k;
    s.out = "bf16";
    try {
      ag_gemm_config(s, world);
    } catch (const Error& e) {
      WEAVE_EXPECT_ARG(false, "--preset " << name << " at world " << world << " (N = " << s.n << ", K = " << s.k
                                          << ", " << s.quant << "): " << e.message());
    }
    shapes.push_back(std::move(s));
  }
  return shapes;
}

}  // namespace weave::cli
