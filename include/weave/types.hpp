// Element types and quantisation modes. Host-only, framework-free (a DLPack binding maps onto it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "weave/export.hpp"

namespace weave WEAVE_API {

enum class DType : uint8_t {
  kBF16,   // bfloat16
  kF32,    // float32
  kE4M3,   // float8 e4m3 (OCP "fn": no infinities, max finite 448, 0x7F/0xFF NaN)
  kUE8M0,  // unsigned 8-bit exponent, value 2^(e-127); 0xFF is NaN (OCP MX scale type)
};

std::size_t dtype_bytes(DType dtype) noexcept;
std::string_view to_string(DType dtype) noexcept;
std::optional<DType> parse_dtype(std::string_view name) noexcept;  // "bf16", "fp32"/"f32", "e4m3", "ue8m0"

// How A and B of a GEMM are quantised (all with fp32 accumulation). See docs/design.md.
enum class ScaleMode : uint8_t {
  kBF16,        // bf16 x bf16, no scales
  kPtpc,        // e4m3; fp32 scale per row of A [M] and per row of B [N]; applied in the epilogue
  kBlockscale,  // e4m3; fp32 scale per 1x128 of A [M, K/128], per 128x128 of B [N/128, K/128]
  kMxfp8,       // e4m3; ue8m0 scale per 1x32 of A [M, K/32], per 32x32 of B [N/32, K/32]
};

std::string_view to_string(ScaleMode mode) noexcept;
std::optional<ScaleMode> parse_scale_mode(std::string_view name) noexcept;

// Where the scales sit in memory (mxfp8 and blockscale; every other mode takes kRaw).
enum class ScaleLayout : uint8_t {
  kRaw,      // row-major, exactly as a quantiser or a checkpoint holds them
  kPacked,   // mxfp8: pre-arranged once on the host into the order the kernel reads (pack_mxfp8_scales)
  kMnMajor,  // blockscale: A's scales [M, K/128] stored M-contiguous (strides (1, ld), ld >= M and a
             // multiple of 4, 16-byte aligned base: DeepGEMM's "MN-major TMA-aligned" layout), so
             // the kernel loads each K block's column with one TMA; B's scales as for kRaw
};

std::string_view to_string(ScaleLayout layout) noexcept;
std::optional<ScaleLayout> parse_scale_layout(std::string_view name) noexcept;

// Scale granularity of a mode along K for A (1 x group_k) and B (group_n x group_k).
struct ScaleGranularity {
  int a_rows = 0, a_k = 0;  // 0 means "whole extent" (per-row scale)
  int b_rows = 0, b_k = 0;
};
// kBF16: all zero (no scales). kPtpc: {1,0,1,0}. kBlockscale: {1,128,128,128}. kMxfp8: {1,32,32,32}.
ScaleGranularity scale_granularity(ScaleMode mode) noexcept;

inline constexpr float kE4M3Max = 448.0f;

}  // namespace weave
