// A calibration table for a fused op's auto mode: the mode measured fastest at each M on this
// machine, written by `weave bench gemm-ar|gemm-rs|gemm-ag|ag-gemm --calibrate FILE` and read
// through the op's config `calibration` (auto_calibration below). auto then takes the measured
// best (where this op can run it) instead of the model: the model is NVLink arithmetic, the table
// a measurement of this machine.
//
// Text, one op shape per file (every rank reads the same file; the op agrees its contents):
//   weave-calibration 1
//   op gemm-ar                (or gemm-rs, gemm-ag, ag-gemm)
//   quant blockscale          (bf16 | ptpc | blockscale | mxfp8)
//   layout raw                (mxfp8 scale layout; raw otherwise)
//   out bf16                  (output dtype: bf16, or fp32 for gemm-ag's and ag-gemm's bf16 inputs)
//   n 7168
//   k 2048                    (gemm-ar: K_r per rank)
//   world 2
//   where 2-emu               (free text: where it was measured; shown in plan reasons)
//   m 1 decode                (M, then the fastest mode auto may take there)
//   m 1024 split-lsa
// Lookup: the row whose M is nearest in log2, if within a factor 2; else no entry (the model).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weave/types.hpp"

namespace weave::fused {

struct Calibration {
  std::string op, where, source;  // source: the file it came from (for messages)
  ScaleMode quant = ScaleMode::kBF16;
  ScaleLayout layout = ScaleLayout::kRaw;
  DType out = DType::kBF16;
  int64_t n = 0, k = 0;
  int world = 0;
  struct Row {
    int64_t m = 0;
    std::string mode;
  };
  std::vector<Row> rows;  // sorted by m, unique
  uint64_t hash = 0;      // of the text (ranks agree on it)

  // The measured best mode at m, or nothing outside the table's reach (more than 2x from every M).
  std::optional<std::string> best_for(int64_t m) const;
  // Whether some row's best is `mode` (an op hosts what that mode needs only then).
  bool names(std::string_view mode) const;
  // "" if the table is for this op shape, else what differs.
  std::string mismatch(std::string_view op, ScaleMode quant, ScaleLayout layout, DType out, int64_t n, int64_t k,
                       int world) const;
  std::string to_text() const;
};

// Throws Error(kInvalidArgument) naming `source`, the line and the rule it broke.
Calibration parse_calibration(std::string_view text, std::string_view source);
Calibration load_calibration(const std::string& path);  // + unreadable file: kInvalidArgument naming it
// load_calibration, then kInvalidArgument "<what> '<path>' is for another op shape: ..." unless it
// is for this op shape (what: the option or field, e.g. "--calibration").
Calibration load_calibration_for(const std::string& path, std::string_view what, std::string_view op, ScaleMode quant,
                                 ScaleLayout layout, DType out, int64_t n, int64_t k, int world);
// An op config's `calibration` (field: its name in messages, "GemmAllGatherConfig.calibration"):
// nothing when empty; kInvalidArgument "<field>: only mode auto consults a calibration (mode
// <mode> is explicit)" when the op's mode is not auto; else load_calibration_for.
std::optional<Calibration> auto_calibration(const std::string& path, std::string_view mode, std::string_view field,
                                            std::string_view op, ScaleMode quant, ScaleLayout layout, DType out,
                                            int64_t n, int64_t k, int world);

}  // namespace weave::fused
