// fp32 <-> bf16. float_to_bf16 matches cvt.rn.bf16.f32: round to nearest even on the upper 16
// bits (overflow rounds to Inf, as RNE must), NaN becomes the canonical 0x7FFF.
#include <bit>
#include <cstdint>

#include "weave/quant.hpp"

namespace weave::ref {

uint16_t float_to_bf16(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFF;
  // Adding 0x7FFF rounds up exactly when the low half exceeds 0x8000; the extra lsb breaks the
  // tie (low half == 0x8000) towards the even result. A carry into the exponent is correct.
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

}  // namespace weave::ref
