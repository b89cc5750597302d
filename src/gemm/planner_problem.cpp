// Which GEMM problems the tiled kernels accept (gemm_problem_violations, one sentence per broken
// rule) and the planner's limits on the SM count and the overrides (check_plan_limits).
#include <string>
#include <vector>

#include "common/check.hpp"
#include "gemm/planner.hpp"
#include "weave/gemm.hpp"

namespace weave {
namespace gemm {

std::vector<std::string> gemm_problem_violations(const GemmProblem& p) {
  std::vector<std::string> out;
  auto add = [&](const std::string& s) { out.push_back(s); };
  if (p.m < 1) add("m must be >= 1 (got " + std::to_string(p.m) + ")");
  if (p.n < 1) add("n must be >= 1 (got " + std::to_string(p.n) + ")");
  if (p.k < 1) add("k must be >= 1 (got " + std::to_string(p.k) + ")");
  if (p.m > kMaxDim || p.n > kMaxDim || p.k > kMaxDim)
    add("m, n and k must each be < 2^31 (TMA coordinates are 32-bit)");
  if (p.out_dtype != DType::kBF16 && p.out_dtype != DType::kF32)
    add("out_dtype must be bf16 or fp32 (got " + std::string(to_string(p.out_dtype)) + ")");
  if (p.scale_layout == ScaleLayout::kPacked && p.mode != ScaleMode::kMxfp8)
    add("scale_layout 'packed' applies to mode mxfp8 only; use raw");
  if (p.scale_layout == ScaleLayout::kMnMajor && p.mode != ScaleMode::kBlockscale)
    add("scale_layout 'mn-major' applies to mode blockscale only; use raw");
  const int64_t in_bytes = p.mode == ScaleMode::kBF16 ? 2 : 1;
  if (p.k >= 1 && (p.k * in_bytes) % 16 != 0)
    add("k must be a multiple of " + std::to_string(16 / in_bytes) + " for " +
        (p.mode == ScaleMode::kBF16 ? "bf16" : "e4m3") +
        " inputs: rows of A and B are read by TMA, which needs 16-byte row pitches (got k = " + std::to_string(p.k) +
        ")");
  if (p.mode == ScaleMode::kBlockscale && p.k >= 1 && p.k % 128 != 0)
    add("k must be a multiple of 128 for blockscale: one scale per 128-wide K block, and partial blocks are "
        "not defined (got k = " + std::to_string(p.k) + ")");
  if (p.mode == ScaleMode::kMxfp8 && p.k >= 1 && p.k % 32 != 0)
    add("k must be a multiple of 32 for mxfp8: one ue8m0 scale per 32-wide K group, and partial groups are not "
        "defined (got k = " + std::to_string(p.k) + ")");
  const int64_t out_bytes = p.out_dtype == DType::kF32 ? 4 : 2;
  if ((p.out_dtype == DType::kBF16 || p.out_dtype == DType::kF32) && p.n >= 1 && (p.n * out_bytes) % 16 != 0)
    add("n must be a multiple of " + std::to_string(16 / out_bytes) + " for " + std::string(to_string(p.out_dtype)) +
        " output: rows of C must be 16-byte multiples (got n = " + std::to_string(p.n) + ")");
  return out;
}

void check_plan_limits(int num_sms, const GemmPlanOverrides& o) {
  WEAVE_EXPECT_ARG(num_sms >= 1 && num_sms <= kMaxSms,
                   "argument 'num_sms': must be 1 .. " << kMaxSms << " (an SM count; got " << num_sms << ")");
  WEAVE_EXPECT_ARG(o.split_k >= 0 && o.split_k <= kMaxSplitK,
                   "override 'split_k': must be 1 (no split) .. " << kMaxSplitK << ", or 0 for the planner's choice (got "
                                                                 << o.split_k << ")");
  WEAVE_EXPECT_ARG(o.grid >= 0 && o.grid <= num_sms,
                   "override 'grid' = " << o.grid << ": a persistent grid has at most one CTA per SM, so 1 .. num_sms = "
                                        << num_sms << ", or 0 for the planner's choice");
  WEAVE_EXPECT_ARG(o.cluster >= 0 && o.cluster <= 2,
                   "override 'cluster': must be 1 (no clusters), 2 (2-CTA clusters, B multicast), or 0 for the "
                   "planner's choice (got " << o.cluster << ")");
  WEAVE_EXPECT_ARG(o.cluster != 2 || o.grid % 2 == 0,
                   "override 'grid' = " << o.grid << ": 2-CTA clusters (override 'cluster' = 2) launch whole pairs, so "
                                        "the grid must be even");
  WEAVE_EXPECT_ARG(o.group_rows >= 0,
                   "override 'group_rows': must be >= 1, or 0 for the planner's choice (got " << o.group_rows << ")");
}

}  // namespace gemm
}  // namespace weave
