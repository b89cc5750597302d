// Comparison of a device result (copied to the host) against an fp64 reference.
#include <algorithm>
#include <bit>
#include <cmath>

#include "common/check.hpp"
#include "weave/reference.hpp"

namespace weave::ref {

namespace {

void expect_compare_args(const void* out, const double* ref, int64_t count, double rtol, double atol) {
  WEAVE_EXPECT_ARG(count >= 0, "argument 'count': must be >= 0, got " << count);
  WEAVE_EXPECT_ARG(count == 0 || out != nullptr, "argument 'out': must not be null");
  WEAVE_EXPECT_ARG(count == 0 || ref != nullptr, "argument 'ref': must not be null");
  WEAVE_EXPECT_ARG(rtol >= 0 && std::isfinite(rtol), "argument 'rtol': must be finite and >= 0, got " << rtol);
  WEAVE_EXPECT_ARG(atol >= 0 && std::isfinite(atol), "argument 'atol': must be finite and >= 0, got " << atol);
}

// value(i) gives out[i] as a double; poisoned(i) says whether out[i] still holds the poison bits.
template <typename Value, typename Poisoned>
Comparison compare_impl(Value value, Poisoned poisoned, const double* ref, int64_t count, double rtol,
                        double atol) {
  Comparison cmp;
  cmp.count = count;
  double err_sq = 0, ref_sq = 0;
  for (int64_t i = 0; i < count; ++i) {
    const double o = value(i);
    const double r = ref[i];
    bool wrong = false;
    if (poisoned(i)) {
      ++cmp.never_written;
      wrong = true;  // even where the reference is NaN: the kernel never wrote here
    }
    if (std::isfinite(r)) {
      if (!std::isfinite(o)) {
        ++cmp.nonfinite;
        wrong = true;
      } else {
        const double err = std::fabs(o - r);
        cmp.max_abs = std::max(cmp.max_abs, err);
        err_sq += err * err;
        ref_sq += r * r;
        if (err > atol + rtol * std::fabs(r)) wrong = true;
      }
    } else {
      // A non-finite reference (NaN scale, NaN input) must be matched in kind: NaN by any NaN,
      // an infinity by the same infinity.
      const bool match = std::isnan(r) ? std::isnan(o) : o == r;
      if (!match) wrong = true;
    }
    if (wrong) {
      if (cmp.wrong == 0) cmp.first_wrong = i;
      ++cmp.wrong;
    }
  }
  if (ref_sq > 0) cmp.rel_l2 = std::sqrt(err_sq) / std::sqrt(ref_sq);
  else cmp.rel_l2 = err_sq > 0 ? INFINITY : 0.0;  // all-zero reference: any error is infinitely relative
  return cmp;
}

}  // namespace

Comparison compare(const float* out, const double* ref, int64_t count, double rtol, double atol) {
  expect_compare_args(out, ref, count, rtol, atol);
  return compare_impl([&](int64_t i) { return static_cast<double>(out[i]); },
                      [&](int64_t i) { return std::bit_cast<uint32_t>(out[i]) == kPoisonF32; }, ref, count,
                      rtol, atol);
}

Comparison compare_bf16(const uint16_t* out, const double* ref, int64_t count, double rtol, double atol) {
  expect_compare_args(out, ref, count, rtol, atol);
  return compare_impl([&](int64_t i) { return static_cast<double>(bf16_to_float(out[i])); },
                      [&](int64_t i) { return out[i] == kPoisonBF16; }, ref, count, rtol, atol);
}

}  // namespace weave::ref
