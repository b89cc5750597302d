#include "cli/gemm_ag_options.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

#include "common/check.hpp"
#include "weave/error.hpp"

namespace weave::cli {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

void add_gemm_ag_options(CLI::App& app, GemmAgOptions& o, bool with_layout, bool with_mode) {
  const auto dim = CLI::Range(std::int64_t{1}, (std::int64_t{1} << 31) - 1);
  app.add_option("-m,--m", o.ms, "rows per rank, comma-separated (one row each)")
      ->delimiter(',')->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 20))->capture_default_str();
  app.add_option("-n,--n", o.n, "output columns (rows of B)")->check(dim)->capture_default_str();
  app.add_option("-k,--k", o.k, "reduction length")->check(dim)->capture_default_str();
  app.add_option("--m-max", o.m_max, "largest M per rank the op is built for (sizes its window; 0: the largest --m)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20))->capture_default_str();
  app.add_option("--quant", o.quant, "bf16 | ptpc | blockscale | mxfp8")->capture_default_str();
  if (with_layout) app.add_option("--scale-layout", o.layout, "mxfp8 scale layout: raw | packed")->capture_default_str();
  app.add_option("--out", o.out, "output dtype: bf16 | fp32 (fp32 only for bf16 inputs; default: fp32 for bf16 "
                                 "inputs, bf16 for fp8)");
  if (with_mode)
    app.add_option("--mode", o.mode, "auto | gemm-only | split-nccl | split-lsa | split-ce | fused-lsa")
        ->capture_default_str();
}

std::string name_gemm_ag_rules(const std::string& why, const GemmAllGatherConfig& c, int world) {
  if (why.empty()) return "";
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t semi = why.find("; ", at);
    parts.push_back(why.substr(at, semi == std::string::npos ? std::string::npos : semi - at));
    if (semi == std::string::npos) break;
    at = semi + 2;
  }
  const std::string q(to_string(c.quant)), out(to_string(c.out_dtype));
  std::vector<std::string> rules;
  for (const std::string& p : parts) {
    std::string opt;
    if (starts_with(p, "world ")) opt = "--world " + std::to_string(world);
    else if (starts_with(p, "m_max ")) opt = "--m-max " + std::to_string(c.m_max);
    else if (starts_with(p, "out_dtype ")) opt = "--out " + out;
    else if (starts_with(p, "fp8 modes ")) opt = "--quant " + q + " --out " + out;
    else if (starts_with(p, "the per-rank GEMM ")) opt = "--n " + std::to_string(c.n) + " --k " + std::to_string(c.k) + " --quant " + q;
    else if (starts_with(p, "n must ")) opt = "--n " + std::to_string(c.n);
    else if (starts_with(p, "k must ")) opt = "--k " + std::to_string(c.k);
    else if (starts_with(p, "the output ")) opt = "--world " + std::to_string(world) + " --m-max " + std::to_string(c.m_max) + " --n " + std::to_string(c.n);
    if (opt.empty() && !rules.empty()) {
      rules.back() += "; " + p;  // the rest of a rule that itself holds "; " (the GEMM's own list)
      continue;
    }
    rules.push_back(opt.empty() ? p : opt + ": " + p);
  }
  std::string s;
  for (const auto& r : rules) s += (s.empty() ? "" : "; ") + r;
  return s;
}

GemmAllGatherConfig gemm_ag_config(const GemmAgOptions& o, int world) {
  GemmAllGatherConfig c;
  const auto quant = parse_scale_mode(o.quant);
  WEAVE_EXPECT_ARG(quant.has_value(), "--quant '" << o.quant << "': expected bf16, ptpc, blockscale or mxfp8");
  const auto layout = parse_scale_layout(o.layout);
  WEAVE_EXPECT_ARG(layout.has_value(), "--scale-layout '" << o.layout << "': expected raw or packed");
  const std::string out_name = o.out.empty() ? (*quant == ScaleMode::kBF16 ? "fp32" : "bf16") : o.out;
  const auto out = parse_dtype(out_name);
  WEAVE_EXPECT_ARG(out == DType::kBF16 || out == DType::kF32, "--out '" << out_name << "': expected bf16 or fp32");
  const auto mode = parse_gemm_all_gather_mode(o.mode);
  WEAVE_EXPECT_ARG(mode.has_value(),
                   "--mode '" << o.mode << "': expected auto, gemm-only, split-nccl, split-lsa, split-ce or fused-lsa");
  WEAVE_EXPECT_ARG(!o.ms.empty(), "-m/--m: give at least one M");
  const std::int64_t largest = *std::max_element(o.ms.begin(), o.ms.end());
  c.m_max = o.m_max > 0 ? o.m_max : largest;
  WEAVE_EXPECT_ARG(largest <= c.m_max, "-m/--m " << largest << ": above --m-max " << c.m_max
                                                  << " (the op's window holds at most --m-max rows per rank)");
  c.n = o.n;
  c.k = o.k;
  c.quant = *quant;
  c.scale_layout = *quant == ScaleMode::kMxfp8 ? *layout : ScaleLayout::kRaw;
  c.out_dtype = *out;
  c.mode = *mode;
  const std::string bad = name_gemm_ag_rules(GemmAllGather::validate(c, world), c, world);
  WEAVE_EXPECT_ARG(bad.empty(), bad);
  return c;
}

}  // namespace weave::cli
