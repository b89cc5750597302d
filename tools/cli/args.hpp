// Strict parsing and range rules for the CLI's option values, shared by every subcommand and
// tested on the CPU (tests/cpu/test_cli_args.cpp). Every function throws
// weave::Error(kInvalidArgument) whose message names the option, the value and the rule it broke;
// main() turns that into one line and exit status 2. Nothing here touches a GPU, so a subcommand
// checks all of its options before it probes GPUs or waits for them to be idle.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace weave::cli {

// Largest byte size any option accepts (1 TiB): far above a GPU's memory, far below overflow of
// the size arithmetic (world x size, size x step factor).
inline constexpr std::uint64_t kMaxSizeBytes = std::uint64_t{1} << 40;

// A byte size in the nccl-tests spelling: decimal digits and an optional K, M or G suffix
// (binary: 1K = 1024), e.g. 4096, 8K, 64M, 1G. Must be >= 1 and <= kMaxSizeBytes. Nothing else
// is accepted: no sign, no spaces, no fraction, no trailing text.
std::uint64_t parse_size(std::string_view option, std::string_view text);
// "4.0 KiB", "64.00 MiB", "1.00 GiB", "512 B".
std::string human_bytes(std::uint64_t bytes);

// A GEMM tile "BMxBN" (e.g. 128x256): two decimal integers in 1..1024 joined by one 'x'.
struct Tile {
  int block_m = 0, block_n = 0;
};
Tile parse_tile(std::string_view option, std::string_view text);

// A GEMM shape "MxNxK": three integers, each in 1 .. 2^31 - 1 (TMA coordinates are 32-bit).
struct Shape3 {
  std::int64_t m = 0, n = 0, k = 0;
};
Shape3 parse_shape(std::string_view option, std::string_view text);

// Checks, without creating it, that FILE can be written at the end of a run: not a directory,
// its folder exists, and the file (if it exists) or its folder is writable. "" passes.
void check_output_file(std::string_view option, const std::string& path);

// --devices: each ordinal >= 0, none twice.
void check_device_list(std::string_view option, const std::vector<int>& devices);

// A CLI11 check for a double option: finite and in [lo, hi] (CLI::Range lets NaN through).
CLI::Validator finite_range(double lo, double hi);
// A CLI11 check for an integer option: an optional '-' and decimal digits, then in [lo, hi].
// CLI::Range called "abc", "1.5" and "1e3" out of range; this calls them what they are, and its
// description (shown by --help) is the real limit, "INT in [lo - hi]".
CLI::Validator int_range(std::int64_t lo, std::int64_t hi);

// A comma-separated list option (-m 128,4096). CLI11's own delimiter drops empty items, so
// "1024,,2048" would pass as two; here an empty item is refused by name, and every item must
// pass `item` (and convert to T) or the option's line says which did not.
std::vector<std::string> split_list(const std::string& option, const std::vector<std::string>& raw);
template <class T>
CLI::Option* add_list_option(CLI::App& app, const std::string& names, std::vector<T>& out, const std::string& help,
                             CLI::Validator item = CLI::Validator("TEXT")) {
  std::string shown = names;  // "-m,--m" -> "-m/--m", as CLI11 names options in its messages
  for (char& c : shown)
    if (c == ',') c = '/';
  auto parse = [&out, item, shown](const std::vector<std::string>& raw) mutable {
    std::vector<T> values;
    for (std::string text : split_list(shown, raw)) {
      const std::string why = item(text);
      if (!why.empty()) throw CLI::ValidationError(shown, why);
      T v{};
      if (!CLI::detail::lexical_cast(text, v)) throw CLI::ValidationError(shown, "Value " + text + " is not a " + CLI::detail::type_name<T>());
      values.push_back(v);
    }
    out = std::move(values);
  };
  std::string defaults;
  for (const T& v : out) defaults += (defaults.empty() ? "" : ",") + CLI::detail::to_string(v);
  CLI::Option* opt = app.add_option_function<std::vector<std::string>>(names, parse, help);
  opt->type_name(item.get_description() + ",...");
  if (!out.empty()) opt->default_str(defaults);
  return opt;
}
// A CLI11 check for an unsigned option: decimal digits only (CLI11 would wrap "-1" to 2^64 - 1).
CLI::Validator digits_only();

// After CLI11 rejected a command line: when the deepest subcommand that was recognised takes
// subcommands and the first word it could not place is not an option, the sentence naming that
// word and the valid ones ("weave: unknown subcommand 'x' (expected one of: info, plan, bench)");
// otherwise "".
std::string unknown_subcommand_message(const CLI::App& app);

}  // namespace weave::cli
