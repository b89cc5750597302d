// The top-level subcommands that are not registries themselves.
#pragma once
#include <CLI/CLI.hpp>

#include "cli/registry.hpp"

namespace weave::cli {
void add_info_command(CLI::App& app);
// `weave bench [suite]`: with no suite, runs every default suite on the visible GPUs.
CLI::App* add_bench_command(CLI::App& app, BenchOptions& common);
// Shared by suites, first thing in each run: the shared options that no CLI11 check covers
// (--json can be written, --devices ordinals), so a bad one fails before any GPU work.
void check_bench_options(const BenchOptions& options);
// Shared by suites: GPUs to use (options.devices or all Hopper GPUs). Throws kNoDevice with the
// no-GPU sentence when there are none.
std::vector<int> bench_devices(const BenchOptions& options);
// Gates on idle GPUs per the options; prints the result line; returns the line for the report meta.
std::string gate_idle(const BenchOptions& options, const std::vector<int>& devices);
}  // namespace weave::cli
