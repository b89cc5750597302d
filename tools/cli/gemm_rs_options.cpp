#include "cli/gemm_rs_options.hpp"

#include <algorithm>

#include "cli/args.hpp"
#include "cli/fused_options.hpp"
#include "common/check.hpp"
#include "fused/all_reduce/plan.hpp"
#include "fused/reduce_scatter/impl.hpp"
#include "weave/error.hpp"
#include "weave/window_handle.hpp"

namespace weave::cli {
namespace {

bool m_typed(const GemmRsOptions& o) { return o.typed.m != nullptr && o.typed.m->count() > 0; }

// Default Ms from here up are rounded to whole fused bands (the smaller ones show the split path).
constexpr std::int64_t kDefaultFusedFrom = 1024;

}  // namespace

std::vector<std::int64_t> gemm_rs_default_ms(const std::vector<std::int64_t>& defaults, int world) {
  const std::int64_t w = std::max(world, 1);  // a world out of range is refused later, naming --world
  std::vector<std::int64_t> ms;
  for (const std::int64_t m : defaults) {
    const std::int64_t multiple = m >= kDefaultFusedFrom ? w * fused::kGrsFusedRows : w;
    ms.push_back((m + multiple - 1) / multiple * multiple);
  }
  return round_up_ms(ms, 1);  // ascending, duplicates dropped
}

void add_gemm_rs_options(CLI::App& app, GemmRsOptions& o, bool with_layout, bool with_mode, bool many) {
  const std::string tile = std::to_string(fused::kGrsFusedRows);
  add_row_parallel_options(
      app, o,
      {.m = "total rows M, comma-separated (every rank holds A_r [M, K_r]; rank r receives rows [r M/W, (r+1) M/W) "
            "of the sum): each M must be a multiple of the world W (mode fused: of W x " + tile + "). Default: these "
            "rounded up to a multiple of W (" + std::to_string(kDefaultFusedFrom) + " and above: of W x " + tile + ")",
       .mode = "auto | gemm-only | split-nccl | split-lsa | split-ce | fused (M a multiple of world x " + tile +
               ": its bands are whole tiles)",
       .preset = "the row-parallel (gemm-ar) layers only; sets N and K_r = K / world, the default --quant and -m list "
                 "(each M rounded up to a multiple of the world); -n and -k are then refused"},
      with_layout, with_mode, many);
}

std::string name_gemm_rs_rules(const std::string& why, const GemmReduceScatterConfig& c, int world) {
  const GemmAllReduceConfig ar = fused::grs_ar_config(c);
  return name_rules(why, [&](const std::string& p) -> std::string {
    if (starts_with(p, "mode fused needs m_max ")) return "--mode fused -m/--m-max " + std::to_string(c.m_max);
    return gemm_ar_option_of(p, ar, world);
  });
}

GemmReduceScatterConfig gemm_rs_config(const GemmRsOptions& o, int world) {
  GemmReduceScatterConfig c;
  const ScaleMode quant = quant_option(o.quant);
  const ScaleLayout layout = scale_layout_option(o.layout);
  const auto mode = parse_gemm_reduce_scatter_mode(o.mode);
  const bool ar_only = parse_gemm_all_reduce_mode(o.mode).has_value();  // decode, fused-rs, fused-ce
  WEAVE_EXPECT_ARG(mode.has_value(), "--mode '" << o.mode << "': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused"
                                                << (ar_only ? " (" + o.mode + " is a gemm-ar mode)" : ""));
  fill_row_parallel_config(c, o, quant, layout);
  c.mode = *mode;
  // Before validate (whose m_max >= world rule would name --m-max for -m 1 at world 2); a world
  // out of range is left to validate, which names --world.
  if (world >= 1 && world <= kMaxWorld) m_multiple_of_world_option(o.ms, world);
  const std::string bad = name_gemm_rs_rules(GemmReduceScatter::validate(c, world), c, world);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  return c;
}

std::vector<GemmRsOptions> gemm_rs_shapes(const GemmRsOptions& o, int world) {
  const std::vector<std::string> names = preset_names(o.preset, o.many_presets);
  if (names.empty()) {
    GemmRsOptions s = o;
    if (!m_typed(o)) s.ms = gemm_rs_default_ms(o.ms, world);
    gemm_rs_config(s, world);
    return {s};
  }
  std::vector<GemmRsOptions> shapes;
  for (const std::string& name : names) {
    GemmRsOptions s = o;
    fill_row_parallel_preset(s, name, world, "gemm-rs");
    if (!m_typed(o)) s.ms = round_up_ms(s.ms, std::max(world, 1));  // the preset's tokens per call, split over the ranks
    try {
      gemm_rs_config(s, world);
    } catch (const Error& e) {
      WEAVE_EXPECT_ARG(false, "--preset " << name << " at world " << world << " (N = " << s.n << ", K_r = " << s.k
                                          << ", " << s.quant << "): " << e.message());
    }
    shapes.push_back(std::move(s));
  }
  return shapes;
}

}  // namespace weave::cli
