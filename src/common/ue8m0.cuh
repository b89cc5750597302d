// The value of an OCP MX ue8m0 scale byte in fp32, on the device: 2^(e - 127), where e = 0 is the
// subnormal 2^-127 (bit 22) and e = 255 is NaN. One definition for every kernel that reads MX
// scales (the native mxfp8 promotion, the bf16 route's conversion, the decode GEMV).
#pragma once
#include <cstdint>

namespace weave {

__device__ __forceinline__ float ue8m0_to_f32(uint32_t e) {
  return __uint_as_float(e == 0 ? 0x00400000u : (e == 255 ? 0x7FFFFFFFu : e << 23));
}

}  // namespace weave
