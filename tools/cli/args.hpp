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
// A CLI11 check for an unsigned option: decimal digits only (CLI11 would wrap "-1" to 2^64 - 1).
CLI::Validator digits_only();

// After CLI11 rejected a command line: when the deepest subcommand that was recognised takes
// subcommands and the first word it could not place is not an option, the sentence naming that
// word and the valid ones ("weave: unknown subcommand 'x' (expected one of: info, plan, bench)");
// otherwise "".
std::string unknown_subcommand_message(const CLI::App& app);

}  // namespace weave::cli
