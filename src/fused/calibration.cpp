#include "fused/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/check.hpp"
#include "common/hash.hpp"
#include "weave/gemm.hpp"

namespace weave::fused {

namespace {

std::optional<ScaleMode> quant_of(const std::string& s) {
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8})
    if (s == to_string(q)) return q;
  return std::nullopt;
}

uint64_t text_hash(std::string_view t) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (unsigned char c : t) h = mix64(h ^ c);
  return h;
}

}  // namespace

Calibration parse_calibration(std::string_view text, std::string_view source) {
  Calibration c;
  c.source = std::string(source);
  c.hash = text_hash(text);
  std::istringstream in{std::string(text)};
  std::string line;
  int no = 0;
  bool header = false;
  auto fail = [&](const std::string& why) {
    WEAVE_EXPECT_ARG(false, "calibration " << source << " line " << no << ": " << why);
  };
  while (std::getline(in, line)) {
    ++no;
    const size_t hashpos = line.find('#');
    if (hashpos != std::string::npos) line.resize(hashpos);
    std::istringstream ls(line);
    std::string key;
    if (!(ls >> key)) continue;
    if (!header) {
      int version = 0;
      if (key != "weave-calibration" || !(ls >> version) || version != 1)
        fail("the first line must be 'weave-calibration 1' (got '" + line + "')");
      header = true;
      continue;
    }
    auto int_value = [&](int64_t lo) {
      int64_t v = 0;
      if (!(ls >> v) || v < lo) fail("'" + key + "' needs an integer >= " + std::to_string(lo));
      return v;
    };
    if (key == "op") {
      ls >> c.op;
    } else if (key == "quant") {
      std::string q;
      ls >> q;
      const auto parsed = quant_of(q);
      if (!parsed) fail("unknown quant '" + q + "' (bf16, ptpc, blockscale, mxfp8)");
      c.quant = *parsed;
    } else if (key == "layout") {
      std::string l;
      ls >> l;
      const auto parsed = parse_scale_layout(l);
      if (!parsed) fail("layout must be raw, packed or mn-major, got '" + l + "'");
      c.layout = *parsed;
    } else if (key == "out") {
      std::string o;
      ls >> o;
      if (o != "bf16" && o != "fp32") fail("out must be bf16 or fp32, got '" + o + "'");
      c.out = o == "bf16" ? DType::kBF16 : DType::kF32;
    } else if (key == "n") {
      c.n = int_value(1);
    } else if (key == "k") {
      c.k = int_value(1);
    } else if (key == "world") {
      c.world = static_cast<int>(int_value(1));
    } else if (key == "where") {
      std::getline(ls >> std::ws, c.where);
    } else if (key == "m") {
      Calibration::Row r;
      r.m = int_value(1);
      if (!(ls >> r.mode)) fail("'m' needs M and a mode");
      c.rows.push_back(r);
    } else {
      fail("unknown key '" + key + "' (op, quant, layout, out, n, k, world, where, m)");
    }
  }
  if (!header) fail("empty: the first line must be 'weave-calibration 1'");
  if (c.op.empty() || c.n == 0 || c.k == 0 || c.world == 0) fail("op, n, k and world are required");
  if (c.rows.empty()) fail("no 'm M MODE' rows");
  std::sort(c.rows.begin(), c.rows.end(), [](const auto& a, const auto& b) { return a.m < b.m; });
  for (size_t i = 1; i < c.rows.size(); ++i)
    if (c.rows[i].m == c.rows[i - 1].m) fail("M = " + std::to_string(c.rows[i].m) + " appears twice");
  return c;
}

Calibration load_calibration(const std::string& path) {
  std::ifstream f(path);
  WEAVE_EXPECT_ARG(f.good(), "calibration file '" << path << "' cannot be read");
  std::ostringstream s;
  s << f.rdbuf();
  return parse_calibration(s.str(), path);
}

Calibration load_calibration_for(const std::string& path, std::string_view what, std::string_view op, ScaleMode quant,
                                 ScaleLayout layout, DType out, int64_t n, int64_t k, int world) {
  Calibration c = load_calibration(path);
  const std::string bad = c.mismatch(op, quant, layout, out, n, k, world);
  WEAVE_EXPECT_ARG(bad.empty(), what << " '" << path << "' is for another op shape: " << bad);
  return c;
}

std::optional<Calibration> auto_calibration(const std::string& path, std::string_view mode, std::string_view field,
                                            std::string_view op, ScaleMode quant, ScaleLayout layout, DType out,
                                            int64_t n, int64_t k, int world) {
  if (path.empty()) return std::nullopt;
  WEAVE_EXPECT_ARG(mode == "auto", field << ": only mode auto consults a calibration (mode " << mode << " is explicit)");
  return load_calibration_for(path, field, op, quant, layout, out, n, k, world);
}

std::optional<std::string> Calibration::best_for(int64_t m) const {
  const Row* best = nullptr;
  double dist = 0;
  for (const Row& r : rows) {
    const double d = std::fabs(std::log2(double(m) / double(r.m)));
    if (!best || d < dist) best = &r, dist = d;
  }
  if (!best || dist > 1.0) return std::nullopt;
  return best->mode;
}

bool Calibration::names(std::string_view mode) const {
  for (const Row& r : rows)
    if (r.mode == mode) return true;
  return false;
}

std::string Calibration::mismatch(std::string_view want_op, ScaleMode q, ScaleLayout l, DType want_out, int64_t want_n,
                                  int64_t want_k, int want_world) const {
  std::ostringstream os;
  auto diff = [&](const char* what, const std::string& have, const std::string& want) {
    if (have != want) os << (os.tellp() > 0 ? ", " : "") << what << " " << have << " (this op: " << want << ")";
  };
  diff("op", op, std::string(want_op));
  diff("quant", std::string(to_string(quant)), std::string(to_string(q)));
  if (q == ScaleMode::kMxfp8) diff("layout", std::string(to_string(layout)), std::string(to_string(l)));
  diff("out", std::string(to_string(out)), std::string(to_string(want_out)));
  diff("n", std::to_string(n), std::to_string(want_n));
  diff("k", std::to_string(k), std::to_string(want_k));
  diff("world", std::to_string(world), std::to_string(want_world));
  return os.str();
}

std::string Calibration::to_text() const {
  std::ostringstream os;
  os << "weave-calibration 1\nop " << op << "\nquant " << to_string(quant) << "\nlayout " << to_string(layout)
     << "\nout " << to_string(out) << "\nn " << n << "\nk " << k << "\nworld " << world << "\n";
  if (!where.empty()) os << "where " << where << "\n";
  for (const Row& r : rows) os << "m " << r.m << " " << r.mode << "\n";
  return os.str();
}

}  // namespace weave::fused
