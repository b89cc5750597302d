// The ratio targets `weave bench gemm --check-targets` enforces (issue "GEMM engine v2"), and their
// evaluation as a pure function (CPU-tested): a target counts only with measured rows, and a
// requested target with none is MISSED, never skipped, so a broken weave cannot pass by
// producing no rows.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace weave::cli {

struct GemmTarget {
  std::string quant_prefix;  // the mode part of a row's quant ("ptpc" for "ptpc->bf16")
  std::string against;       // the row's extra field holding the ratio ("ratio": weave / cuBLASLt)
  double median_max;         // the median over the shapes must be <= this
  double each_max;           // every shape must be <= this (<= 0: no per-shape bound)
};
// bf16 <= 1.00 / 1.10, ptpc <= 1.00 / 1.15, blockscale <= 1.00 / 1.15 (against cuBLASLt
// block-wise), mxfp8 <= 1.30 against cuBLASLt block-wise and <= 1.25 against weave blockscale.
const std::vector<GemmTarget>& gemm_targets();

struct GemmTargetValue {
  std::string quant;    // "ptpc->bf16"
  std::string against;  // as GemmTarget::against
  double value = 0;     // one shape's ratio
};

struct GemmTargetResult {
  std::string quant, against;
  std::size_t shapes = 0;
  double median = 0, max = 0;
  double median_max = 0, each_max = 0;
  bool met = false;
  std::string why;  // what missed it (or "no rows ...")
};

// One result per (target, requested quant whose mode matches the target): `requested_quants` are
// the quants the run asked for ("bf16->fp32", ...); `values` the weave rows' ratios.
std::vector<GemmTargetResult> evaluate_gemm_targets(const std::vector<GemmTarget>& targets,
                                                    const std::vector<std::string>& requested_quants,
                                                    const std::vector<GemmTargetValue>& values);

}  // namespace weave::cli
