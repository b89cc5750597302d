#include "cli/gemm_targets.hpp"

#include <algorithm>
#include <sstream>

namespace weave::cli {

const std::vector<GemmTarget>& gemm_targets() {
  static const std::vector<GemmTarget> targets = {
      {"bf16", "ratio", 1.00, 1.10},
      {"ptpc", "ratio", 1.00, 1.15},
      {"blockscale", "ratio", 1.00, 1.15},
      {"mxfp8", "ratio", 1.30, 0},
      {"mxfp8", "ratio_vs_weave_blockscale", 1.25, 0},
  };
  return targets;
}

static double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<GemmTargetResult> evaluate_gemm_targets(const std::vector<GemmTarget>& targets,
                                                    const std::vector<std::string>& requested_quants,
                                                    const std::vector<GemmTargetValue>& values) {
  std::vector<GemmTargetResult> out;
  for (const GemmTarget& t : targets)
    for (const std::string& quant : requested_quants) {
      if (quant.rfind(t.quant_prefix + "->", 0) != 0) continue;
      GemmTargetResult r{.quant = quant, .against = t.against, .median_max = t.median_max, .each_max = t.each_max};
      std::vector<double> v;
      for (const auto& x : values)
        if (x.quant == quant && x.against == t.against) v.push_back(x.value);
      r.shapes = v.size();
      if (v.empty()) {
        r.why = "no weave row measured it (every shape refused or failed)";
        out.push_back(r);
        continue;
      }
      r.median = median_of(v);
      r.max = *std::max_element(v.begin(), v.end());
      std::ostringstream why;
      if (r.median > t.median_max) why << "median " << r.median << " > " << t.median_max;
      if (t.each_max > 0 && r.max > t.each_max) why << (why.tellp() ? "; " : "") << "max " << r.max << " > " << t.each_max;
      r.why = why.str();
      r.met = r.why.empty();
      out.push_back(r);
    }
  return out;
}

}  // namespace weave::cli
