#include "cli/fused_options.hpp"

#include <algorithm>

#include "common/check.hpp"
#include "weave/error.hpp"

namespace weave::cli {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

ScaleMode quant_option(const std::string& text) {
  const auto quant = parse_scale_mode(text);
  WEAVE_EXPECT_ARG(quant.has_value(), "--quant '" << text << "': expected bf16, ptpc, blockscale or mxfp8");
  return *quant;
}

MxRoute mx_route_option(const std::string& text, ScaleMode quant) {
  MxRoute r = MxRoute::kAuto;
  if (text == "native") r = MxRoute::kNative;
  else if (text == "bf16") r = MxRoute::kBf16;
  else WEAVE_EXPECT_ARG(text == "auto", "--mx-route '" << text << "': expected auto, native or bf16");
  WEAVE_EXPECT_ARG(r == MxRoute::kAuto || quant == ScaleMode::kMxfp8,
                   "--mx-route " << text << ": applies to --quant mxfp8 only");
  return r;
}

ScaleLayout scale_layout_option(const std::string& text) {
  const auto layout = parse_scale_layout(text);
  WEAVE_EXPECT_ARG(layout.has_value(), "--scale-layout '" << text << "': expected raw, packed or mn-major");
  return *layout;
}

std::int64_t m_max_option(const std::vector<std::int64_t>& ms, std::int64_t m_max, const char* window_rows) {
  WEAVE_EXPECT_ARG(!ms.empty(), "-m/--m: give at least one M");
  const std::int64_t largest = *std::max_element(ms.begin(), ms.end());
  const std::int64_t cap = m_max > 0 ? m_max : largest;
  WEAVE_EXPECT_ARG(largest <= cap, "-m/--m " << largest << ": above --m-max " << cap
                                             << " (the op's window holds at most --m-max " << window_rows << ")");
  return cap;
}

void m_multiple_of_world_option(const std::vector<std::int64_t>& ms, int world) {
  std::string bad;
  for (const std::int64_t m : ms)
    if (m % world != 0) bad += (bad.empty() ? "" : ",") + std::to_string(m);
  WEAVE_EXPECT_ARG(bad.empty(), "-m/--m " << bad << ": M must be a multiple of the world (" << world
                                          << "): M is the total rows and rank r receives rows [r M/W, (r+1) M/W)");
}

std::vector<std::int64_t> round_up_ms(std::span<const std::int64_t> ms, std::int64_t multiple) {
  std::vector<std::int64_t> out;
  for (const std::int64_t m : ms) out.push_back((m + multiple - 1) / multiple * multiple);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string name_rules(const std::string& why, const std::function<std::string(const std::string& rule)>& option_of) {
  if (why.empty()) return "";
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t semi = why.find("; ", at);
    parts.push_back(why.substr(at, semi == std::string::npos ? std::string::npos : semi - at));
    if (semi == std::string::npos) break;
    at = semi + 2;
  }
  std::vector<std::string> rules;
  for (const std::string& p : parts) {
    const std::string opt = option_of(p);
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

std::optional<fused::Calibration> calibration_option(const std::string& path, bool mode_is_auto, const char* op,
                                                     ScaleMode quant, ScaleLayout layout, DType out, std::int64_t n,
                                                     std::int64_t k, int world) {
  if (path.empty()) return std::nullopt;
  WEAVE_EXPECT_ARG(mode_is_auto, "--calibration: only --mode auto consults a calibration");
  return fused::load_calibration_for(path, "--calibration", op, quant, layout, out, n, k, world);
}

}  // namespace weave::cli
