// Reference quantisation (host code): fp32 -> e4m3 for every scale mode with its scale layout,
// dequantisers, and the mxfp8 scale packing. These define the numerical contract the GPU kernels
// are tested against; they are deliberately simple, scalar and obviously correct.
//
// Rounding: e4m3 is round-to-nearest-even with saturation to +-448, infinities included (the
// "satfinite" rule the GPU's cvt.rn.satfinite.e4m3x2.f32 applies); subnormals (k * 2^-9) are
// kept; a NaN input becomes the canonical 0x7F, sign dropped, as the CUDA toolkit's host
// emulation of that instruction does (cuda_fp8.hpp canonicalises NaN first; tested against it on
// the CPU, not yet on hardware); both 0x7F and 0xFF decode to NaN. bf16 is
// RNE (overflow -> Inf), NaN -> canonical 0x7FFF, as cvt.rn.bf16.f32.
//
// Quantised elements are x / scale in fp32 (ptpc, blockscale) or x / 2^shared_exp, exact
// (mxfp8), then rounded as above.
//
// Scale layouts (row-major unless stated):
//   ptpc        A: fp32 [M], B: fp32 [N] (scale_rows = rows, scale_cols = 1); scale =
//               amax(row) / 448 in fp32 (a zero row, or one so tiny that amax / 448 underflows
//               to 0, gets scale 1).
//   blockscale  A: fp32 [M, K/128], B: fp32 [ceil(N/128), K/128]; scale = amax(block) / 448
//               (zero -> 1, as for ptpc).
//               ptpc and blockscale: a row / block holding NaN gets scale NaN, one holding Inf
//               gets Inf; either way the whole row / block dequantises to NaN.
//               B blocks are 128x128 (N rows x K columns); N and K need not be multiples of 128
//               at the API, but K must be (see gemm_validate_problem), and the last N block may be
//               partial: its scale covers the rows that exist.
//   mxfp8       A: ue8m0 [M, K/32], B: ue8m0 [N/32, K/32] (raw layout). OCP MX rule:
//               shared_exp = floor(log2(amax)) - 8 (8 = e4m3's emax), clamped to [-127, 127];
//               byte = shared_exp + 127; an all-zero block gets byte 0 (2^-127); a block holding
//               NaN or Inf gets 0xFF (NaN; Inf has no finite exponent, as in the OCP reference
//               code where shared_exp > 127 becomes NaN). Elements are x / 2^shared_exp (exact),
//               rounded and saturated to e4m3; in a 0xFF block they are scaled by the exponent
//               of its finite elements instead (they dequantise to NaN regardless). For finite
//               input shared_exp <= 119, so the +127 clamp never binds; the -127 one does for
//               amax < 2^-119. B blocks are [ceil(N/32), K/32] with a partial last N block.
//   mxfp8 packed: uint32 words [ceil(K/128), rows] where rows = M for A and ceil(N/32) for B;
//               word (s, r) holds the bytes of K groups 4s..4s+3 of row r, group 4s in the low
//               byte. Groups past K/32 are filled with 127 (scale 1.0). A kernel with a 128-wide
//               K step reads one contiguous run of words per tile and K step.
#pragma once
#include <cstdint>
#include <vector>

#include "weave/export.hpp"
#include "weave/types.hpp"

namespace weave WEAVE_API {
namespace ref {

// --- scalar conversions ---
uint8_t float_to_e4m3(float x);   // RNE, saturating to +-448 (Inf too), NaN -> 0x7F (sign dropped)
float e4m3_to_float(uint8_t v);
uint16_t float_to_bf16(float x);  // RNE, NaN -> 0x7FFF
float bf16_to_float(uint16_t v);
float ue8m0_to_float(uint8_t e);  // 2^(e-127); 0xFF -> NaN
// The ue8m0 byte of the OCP MX shared exponent for a block whose absolute maximum is amax.
uint8_t mx_scale_byte(float amax);

// --- quantised operands ---
struct QuantMatrix {
  int64_t rows = 0, cols = 0;    // the matrix [rows, cols], cols = K
  ScaleMode mode = ScaleMode::kBF16;
  std::vector<uint8_t> e4m3;     // [rows, cols] for fp8 modes
  std::vector<uint16_t> bf16;    // [rows, cols] for mode bf16
  std::vector<float> scales;     // ptpc: [rows]; blockscale: [ceil(rows/g), cols/128]
  std::vector<uint8_t> ue8m0;    // mxfp8 raw: [ceil(rows/g), cols/32]
  int64_t scale_rows = 0, scale_cols = 0;  // shape of the scale tensor
};

enum class Operand { kA, kB };  // A: 1 x group scales; B: group x group (blockscale, mxfp8)

// Quantises an fp32 row-major [rows, cols] matrix. Throws weave::Error(kInvalidArgument) when
// cols is not a multiple of the mode's K group (128 for blockscale, 32 for mxfp8), naming it.
QuantMatrix quantize(const float* x, int64_t rows, int64_t cols, ScaleMode mode, Operand operand);
// Back to fp32: element x scale, exactly as the GEMM contract defines the operand's value. The
// fp32 product is exact for bf16, mxfp8 and power-of-two scales; for other ptpc / blockscale
// scales it is that product rounded to fp32 (gemm_f64 on a QuantMatrix avoids even that). An
// mxfp8 byte above 246 (never produced by quantize) can overflow fp32 to Inf; 0xFF gives NaN.
// Throws kInvalidArgument when q's vectors or scale shape do not match its rows, cols and mode.
std::vector<float> dequantize(const QuantMatrix& q, Operand operand);

// mxfp8 raw <-> packed (see above). `rows` is the number of scale rows (M for A, ceil(N/32) for B)
// and `k_groups` = K/32. unpack(pack(x)) == x for every input (a tested bijection on the raw bytes).
std::vector<uint32_t> pack_mxfp8_scales(const uint8_t* raw, int64_t rows, int64_t k_groups);
std::vector<uint8_t> unpack_mxfp8_scales(const uint32_t* packed, int64_t rows, int64_t k_groups);

// Blockscale A scales row-major [rows, k_blocks] (as quantize makes them) -> the M-contiguous
// buffer of ScaleLayout::kMnMajor: k_blocks rows of mn_major_scale_ld(rows) floats (rows rounded
// up to a multiple of 4, padding 0); view it as [rows, k_blocks] with strides (1, ld).
int64_t mn_major_scale_ld(int64_t rows);
std::vector<float> mn_major_block_scales(const float* row_major, int64_t rows, int64_t k_blocks);

}  // namespace ref
}  // namespace weave
