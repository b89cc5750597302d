// fp32 <-> e4m3 (OCP "fn": bias 7, no infinities, max finite 448, 0x7F / 0xFF NaN).
//
// float_to_e4m3 reproduces cvt.rn.satfinite.e4m3x2.f32 bit for bit: round to nearest, ties to
// even, |x| beyond 448 (infinities included) saturates to +-448, NaN becomes the canonical 0x7F
// (the sign is dropped, as in the CUDA toolkit's host emulation of that instruction, which first
// canonicalises a NaN input to 0x7FFFFFFF). It works on the float's bits, so no intermediate
// arithmetic can round twice.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "weave/quant.hpp"

namespace weave::ref {

uint8_t float_to_e4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  if (abs_bits > 0x7F800000u) return 0x7F;  // NaN -> canonical NaN
  const int exp = static_cast<int>(abs_bits >> 23) - 127;  // floor(log2|x|) for normal floats
  if (exp > 8) return sign | 0x7E;  // |x| >= 512 (or Inf): saturate
  // Below 2^-10 (half the smallest subnormal 2^-9) everything rounds to zero; exactly 2^-10 is a
  // tie that goes to the even neighbour, zero. fp32 subnormals land here too (exp = -127).
  if (exp < -10) return sign;
  // Significand with its implicit bit: |x| = sig * 2^(exp-23). The e4m3 quantum in this binade
  // is 2^(max(exp,-6)-3) (normals keep 3 fraction bits; subnormals share the quantum 2^-9), so
  // |x| / quantum = sig >> shift with shift = 20 for normals and up to 24 deep in the subnormals.
  const uint32_t sig = (abs_bits & 0x7FFFFFu) | 0x800000u;
  const int shift = 20 + std::max(0, -6 - exp);
  uint32_t n = sig >> shift;
  const uint32_t rem = sig & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (n & 1u))) ++n;
  // Normals: n in [8, 16]; the code is (biased exponent << 3) + (n - 8), and n = 16 carries
  // into the next exponent by itself. Subnormals: n in [0, 8]; n = 8 is the smallest normal.
  uint32_t code = (static_cast<uint32_t>(std::max(exp, -6) + 6) << 3) + n;
  if (code > 0x7Eu) code = 0x7Eu;  // 0x7F would be NaN: saturate to 448
  return static_cast<uint8_t>(sign | code);
}

float e4m3_to_float(uint8_t v) {
  const bool negative = (v & 0x80u) != 0;
  const int biased = (v >> 3) & 0xF;
  const int mantissa = v & 0x7;
  if ((v & 0x7Fu) == 0x7Fu) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = biased == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                      : std::ldexp(static_cast<float>(8 + mantissa), biased - 10);
  return negative ? -magnitude : magnitude;
}

}  // namespace weave::ref
