#include "cli/gemm_rules.hpp"

#include "cli/fused_options.hpp"

namespace weave::cli {

std::string name_gemm_rules(const std::string& rules, const GemmProblem& p, const std::string& shape_option) {
  const std::string quant = "--quant " + std::string(to_string(p.mode));
  const std::string out = "--out " + std::string(to_string(p.out_dtype));
  const std::string layout = "--layout " + std::string(to_string(p.scale_layout));
  auto dim = [&](const char* flag, std::int64_t v) {
    return shape_option.empty() ? std::string(flag) + " " + std::to_string(v) : shape_option;
  };
  return name_rules(rules, [&](const std::string& rule) -> std::string {
    if (starts_with(rule, "m, n and k"))
      return shape_option.empty() ? dim("-m", p.m) + " " + dim("-n", p.n) + " " + dim("-k", p.k) : shape_option;
    if (starts_with(rule, "m ")) return dim("-m", p.m);
    if (starts_with(rule, "n must be a multiple")) return dim("-n", p.n) + " " + out;
    if (starts_with(rule, "n ")) return dim("-n", p.n);
    if (starts_with(rule, "k must be a multiple")) return dim("-k", p.k) + " " + quant;
    if (starts_with(rule, "k ")) return dim("-k", p.k);
    if (starts_with(rule, "out_dtype")) return out;
    if (starts_with(rule, "scale_layout")) return layout + " " + quant;
    return "";
  });
}

}  // namespace weave::cli
