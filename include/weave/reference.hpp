// Reference GEMM and comparison metrics (host code). The reference accumulates in fp64 over the
// dequantised operands (weave::ref::dequantize), so it is independent of any kernel's blocking,
// and rounds once to the output dtype (fp64 -> fp32, then RNE to bf16 for bf16 output).
#pragma once
#include <cstdint>
#include <vector>

#include "weave/export.hpp"
#include "weave/quant.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {
namespace ref {

// C[m, n] = sum_k A[m, k] * B[n, k] over dequantised values; returns fp64 [M, N].
std::vector<double> gemm_f64(const std::vector<float>& a_deq, const std::vector<float>& b_deq,
                             int64_t m, int64_t n, int64_t k);
// Same, from quantised operands (dequantises first, in fp64, where element x scale is exact).
// Throws kInvalidArgument when the modes or K differ or an operand is inconsistent.
std::vector<double> gemm_f64(const QuantMatrix& a, const QuantMatrix& b);
// Rounds an fp64 result to the output dtype's values, returned as fp32 (bf16 values are exact in
// fp32). out_dtype must be kF32 or kBF16.
std::vector<float> round_to(const std::vector<double>& c, DType out_dtype);

struct Comparison {
  int64_t count = 0;
  int64_t nonfinite = 0;      // NaN or Inf in `out` where the reference is finite
  int64_t never_written = 0;  // elements still holding the NaN-poison bit pattern
  int64_t wrong = 0;          // |out - ref| > atol + rtol * |ref|, nonfinite, never written, or a
                              // non-finite ref not matched in kind (NaN by any NaN, Inf by itself)
  double rel_l2 = 0;          // ||out - ref|| / ||ref|| over elements where both are finite
                              // (0 if both norms are 0, Inf if only ||ref|| is)
  double max_abs = 0;         // over elements where both are finite
  int64_t first_wrong = -1;   // linear index of the first wrong element
};

// Compares a device result copied to the host (fp32 or bf16 raw bits) against a reference.
// Throws kInvalidArgument for count < 0, null pointers, or rtol / atol negative or non-finite.
Comparison compare(const float* out, const double* ref, int64_t count, double rtol, double atol);
Comparison compare_bf16(const uint16_t* out, const double* ref, int64_t count, double rtol, double atol);
inline constexpr uint32_t kPoisonF32 = 0x7FC00000u;  // bench::poison_nan patterns
inline constexpr uint16_t kPoisonBF16 = 0x7FC0u;

// Deterministic generators for tests (seeded; xoshiro-style so results do not depend on the STL).
class Random {
 public:
  explicit Random(uint64_t seed);
  uint64_t next();
  float uniform(float lo, float hi);  // [lo, hi); throws kInvalidArgument unless lo <= hi, finite
  float normal();  // standard normal
  int integer(int lo, int hi);  // inclusive; throws kInvalidArgument if lo > hi
 private:
  uint64_t s_[4];
};
std::vector<float> random_normal(Random& rng, int64_t count, float stddev = 1.0f);
// Small integers in [-range, range]: exactly representable in e4m3 / bf16 for range <= 16.
std::vector<float> random_integers(Random& rng, int64_t count, int range);

}  // namespace ref
}  // namespace weave
