// What the fused ops' options (gemm-ag, gemm-ar, gemm-rs) share: the spellings of --quant and
// --scale-layout, the M list against --m-max, and the way every rule an op's validate() reports
// is named after the option that sets it. Each function throws Error(kInvalidArgument) whose
// message names the option (main() prints it and exits 2 before any GPU work). CPU only.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fused/calibration.hpp"
#include "weave/gemm.hpp"
#include "weave/types.hpp"

namespace weave::cli {

// --quant: bf16 | ptpc | blockscale | mxfp8.
ScaleMode quant_option(const std::string& text);
// --scale-layout: raw | packed (mxfp8's scales).
ScaleLayout scale_layout_option(const std::string& text);
// --mx-route: auto | native | bf16 (anything but auto only with --quant mxfp8).
MxRoute mx_route_option(const std::string& text, ScaleMode quant);

// The op's m_max: --m-max, or the largest of `ms` when it is 0. Throws when `ms` is empty or an M
// is above --m-max; `window_rows` ends that message ("rows per rank": "the op's window holds at
// most --m-max rows per rank").
std::int64_t m_max_option(const std::vector<std::int64_t>& ms, std::int64_t m_max, const char* window_rows);

// -m for an op whose ranks each receive M / world of the rows (gemm-rs): throws naming -m/--m, the
// Ms that are not multiples of `world` and the rule.
void m_multiple_of_world_option(const std::vector<std::int64_t>& ms, int world);
// Every M rounded up to a multiple of `multiple`, ascending, duplicates dropped (gemm-rs takes a
// preset's M list this way: the preset lists tokens per call, the op needs M % world == 0).
std::vector<std::int64_t> round_up_ms(std::span<const std::int64_t> ms, std::int64_t multiple);

// A validate() report ("; "-separated rules) with every rule prefixed by option_of(rule), the
// options that set what the rule is about ("--n 100: n must be a multiple of 8 ..."). A part for
// which option_of gives "" continues the rule before it (a rule may itself hold "; ": the GEMM's
// own list). "" when `why` is "".
std::string name_rules(const std::string& why, const std::function<std::string(const std::string& rule)>& option_of);

bool starts_with(const std::string& s, const char* prefix);

// --calibration FILE for `weave plan gemm-ag|gemm-ar`: the table auto consults (none for ""),
// refused unless the mode is auto and the table is for this op shape (fused/calibration.hpp).
std::optional<fused::Calibration> calibration_option(const std::string& path, bool mode_is_auto, const char* op,
                                                     ScaleMode quant, ScaleLayout layout, DType out, std::int64_t n,
                                                     std::int64_t k, int world);

}  // namespace weave::cli
