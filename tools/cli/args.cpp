#include "cli/args.hpp"

#include <unistd.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/check.hpp"

namespace weave::cli {
namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

// Decimal digits to an integer no larger than `max`; false on anything else (or overflow).
bool to_uint(std::string_view s, std::uint64_t max, std::uint64_t* out) {
  if (!all_digits(s)) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

}  // namespace

std::uint64_t parse_size(std::string_view option, std::string_view text) {
  std::string_view digits = text;
  std::uint64_t mult = 1;
  if (!text.empty()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
    if (c == 'K' || c == 'M' || c == 'G') {
      mult = c == 'K' ? std::uint64_t{1} << 10 : c == 'M' ? std::uint64_t{1} << 20 : std::uint64_t{1} << 30;
      digits.remove_suffix(1);
    }
  }
  WEAVE_EXPECT_ARG(all_digits(digits), option << " '" << text
                                              << "': expected a size in bytes: digits with an optional K, M or G "
                                                 "suffix (e.g. 4096, 8K, 64M, 1G)");
  std::uint64_t v = 0;
  const bool fits = to_uint(digits, kMaxSizeBytes, &v) && v <= kMaxSizeBytes / mult;
  WEAVE_EXPECT_ARG(fits, option << " '" << text << "': the size must be at most " << human_bytes(kMaxSizeBytes)
                                << " (1024G)");
  WEAVE_EXPECT_ARG(v >= 1, option << " '" << text << "': the size must be at least 1 byte");
  return v * mult;
}

std::string human_bytes(std::uint64_t b) {
  char buf[64];
  if (b >= (std::uint64_t{1} << 30)) std::snprintf(buf, sizeof(buf), "%.2f GiB", b / 1073741824.0);
  else if (b >= (std::uint64_t{1} << 20)) std::snprintf(buf, sizeof(buf), "%.2f MiB", b / 1048576.0);
  else if (b >= 1024) std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

Tile parse_tile(std::string_view option, std::string_view text) {
  const auto x = text.find('x');
  std::uint64_t bm = 0, bn = 0;
  const bool ok = x != std::string_view::npos && to_uint(text.substr(0, x), 1024, &bm) &&
                  to_uint(text.substr(x + 1), 1024, &bn) && bm >= 1 && bn >= 1;
  WEAVE_EXPECT_ARG(ok, option << " '" << text << "': expected BMxBN, two integers in 1..1024 (e.g. 128x256)");
  return {static_cast<int>(bm), static_cast<int>(bn)};
}

Shape3 parse_shape(std::string_view option, std::string_view text) {
  constexpr std::uint64_t kMax = (std::uint64_t{1} << 31) - 1;
  std::uint64_t v[3] = {0, 0, 0};
  std::string_view rest = text;
  bool ok = true;
  for (int i = 0; i < 3 && ok; ++i) {
    const auto x = i < 2 ? rest.find('x') : rest.size();
    ok = x != std::string_view::npos && to_uint(rest.substr(0, x), kMax, &v[i]) && v[i] >= 1;
    if (ok && i < 2) rest.remove_prefix(x + 1);
  }
  WEAVE_EXPECT_ARG(ok, option << " '" << text << "': expected MxNxK, three integers in 1..2^31-1 (e.g. 4096x5120x2048)");
  return {static_cast<std::int64_t>(v[0]), static_cast<std::int64_t>(v[1]), static_cast<std::int64_t>(v[2])};
}

void check_output_file(std::string_view option, const std::string& path) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  WEAVE_EXPECT_ARG(!fs::is_directory(p, ec), option << " '" << path << "': is a directory; give a file name");
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  WEAVE_EXPECT_ARG(fs::is_directory(dir, ec), option << " '" << path << "': folder '" << dir.string()
                                                     << "' does not exist (the file is written at the end of the run)");
  if (fs::exists(p, ec)) {
    WEAVE_EXPECT_ARG(::access(path.c_str(), W_OK) == 0, option << " '" << path << "': the file exists and is not writable");
  } else {
    WEAVE_EXPECT_ARG(::access(dir.c_str(), W_OK | X_OK) == 0,
                     option << " '" << path << "': folder '" << dir.string() << "' is not writable");
  }
}

void check_device_list(std::string_view option, const std::vector<int>& devices) {
  std::set<int> seen;
  for (int d : devices) {
    WEAVE_EXPECT_ARG(d >= 0, option << ": CUDA ordinals are >= 0 (got " << d << ")");
    WEAVE_EXPECT_ARG(seen.insert(d).second, option << ": ordinal " << d << " is listed twice");
  }
}

CLI::Validator finite_range(double lo, double hi) {
  std::ostringstream desc;
  desc << "FINITE in [" << lo << " - " << hi << "]";
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "Value " + text + " is not a number";
        if (!std::isfinite(v) || v < lo || v > hi) {
          std::ostringstream os;
          os << "Value " << text << " not in range " << lo << " to " << hi;
          return os.str();
        }
        return std::string();
      },
      desc.str());
}

CLI::Validator int_range(std::int64_t lo, std::int64_t hi) {
  const std::string desc = "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const bool negative = !text.empty() && text[0] == '-';
        const std::string_view digits = std::string_view(text).substr(negative ? 1 : 0);
        if (!all_digits(digits)) return "Value " + text + " is not an integer";
        const std::uint64_t limit = negative ? std::uint64_t{1} << 63 : std::uint64_t{INT64_MAX};
        std::uint64_t magnitude = limit + 1;  // stays out of range when the digits overflow
        to_uint(digits, limit, &magnitude);
        const std::int64_t v = magnitude > limit             ? 0
                               : !negative                   ? static_cast<std::int64_t>(magnitude)
                               : magnitude == limit          ? INT64_MIN
                                                             : -static_cast<std::int64_t>(magnitude);
        const bool in = magnitude <= limit && v >= lo && v <= hi;
        if (!in) return "Value " + text + " not in range " + std::to_string(lo) + " to " + std::to_string(hi);
        return std::string();
      },
      desc);
}

std::vector<std::string> split_list(const std::string& option, const std::vector<std::string>& raw) {
  std::vector<std::string> items;
  for (const std::string& arg : raw) {
    for (std::size_t at = 0;;) {
      const std::size_t comma = arg.find(',', at);
      const std::string item = arg.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (item.empty())
        throw CLI::ValidationError(option, "'" + arg + "' has an empty item (give values separated by single commas)");
      items.push_back(item);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  return items;
}

CLI::Validator digits_only() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::uint64_t v = 0;
        return to_uint(text, UINT64_MAX, &v) ? std::string() : "Value " + text + " is not an integer in 0 .. 2^64-1";
      },
      "UINT");
}

std::string unknown_subcommand_message(const CLI::App& app) {
  std::vector<const CLI::App*> chain{&app};
  for (;;) {
    const auto parsed = chain.back()->get_subcommands();
    if (parsed.empty()) break;
    chain.push_back(parsed.front());
  }
  const CLI::App* deepest = chain.back();
  const auto defined = deepest->get_subcommands([](const CLI::App* s) { return !s->get_name().empty(); });
  if (defined.empty()) return "";  // a word after a leaf subcommand is an extra argument, not a subcommand
  // A word a subcommand could not place may have fallen through to its parents.
  std::string word;
  for (auto it = chain.rbegin(); it != chain.rend() && word.empty(); ++it)
    for (const std::string& w : (*it)->remaining(false))
      if (!w.empty() && w[0] != '-') {
        word = w;
        break;
      }
  if (word.empty()) return "";
  std::string path = "weave", names;
  for (std::size_t i = 1; i < chain.size(); ++i) path += " " + chain[i]->get_name();
  for (const CLI::App* s : defined) names += (names.empty() ? "" : ", ") + s->get_name();
  return path + ": unknown subcommand '" + word + "' (expected one of: " + names + ")";
}

}  // namespace weave::cli
