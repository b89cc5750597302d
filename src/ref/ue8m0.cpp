// ue8m0 scale bytes and the OCP MX shared-exponent rule.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "weave/quant.hpp"

namespace weave::ref {

float ue8m0_to_float(uint8_t e) {
  if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);  // 2^-127 (e = 0) is an exact fp32 subnormal
}

uint8_t mx_scale_byte(float amax) {
  const uint32_t abs_bits = std::bit_cast<uint32_t>(amax) & 0x7FFFFFFFu;
  if (abs_bits >= 0x7F800000u) return 0xFF;  // NaN, or Inf (its exponent exceeds every scale)
  if (abs_bits == 0) return 0;               // all-zero block: 2^-127 by the clamp below
  // floor(log2(amax)) read off the bits, exact for normals and fp32 subnormals alike.
  const int biased = static_cast<int>(abs_bits >> 23);
  const int floor_log2 = biased != 0 ? biased - 127
                                     : -149 + (std::bit_width(abs_bits & 0x7FFFFFu) - 1);
  const int kE4m3Emax = 8;  // 448 = 1.75 * 2^8
  const int shared_exp = std::clamp(floor_log2 - kE4m3Emax, -127, 127);
  return static_cast<uint8_t>(shared_exp + 127);
}

}  // namespace weave::ref
