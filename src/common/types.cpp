#include "weave/types.hpp"

namespace weave {

std::size_t dtype_bytes(DType dtype) noexcept {
  switch (dtype) {
    case DType::kBF16: return 2;
    case DType::kF32: return 4;
    case DType::kE4M3: return 1;
    case DType::kUE8M0: return 1;
  }
  return 0;
}

std::string_view to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kF32: return "fp32";
    case DType::kE4M3: return "e4m3";
    case DType::kUE8M0: return "ue8m0";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  if (name == "bf16") return DType::kBF16;
  if (name == "fp32" || name == "f32") return DType::kF32;
  if (name == "e4m3" || name == "fp8") return DType::kE4M3;
  if (name == "ue8m0") return DType::kUE8M0;
  return std::nullopt;
}

std::string_view to_string(ScaleMode mode) noexcept {
  switch (mode) {
    case ScaleMode::kBF16: return "bf16";
    case ScaleMode::kPtpc: return "ptpc";
    case ScaleMode::kBlockscale: return "blockscale";
    case ScaleMode::kMxfp8: return "mxfp8";
  }
  return "?";
}

std::optional<ScaleMode> parse_scale_mode(std::string_view name) noexcept {
  if (name == "bf16") return ScaleMode::kBF16;
  if (name == "ptpc") return ScaleMode::kPtpc;
  if (name == "blockscale") return ScaleMode::kBlockscale;
  if (name == "mxfp8") return ScaleMode::kMxfp8;
  return std::nullopt;
}

std::string_view to_string(ScaleLayout layout) noexcept {
  switch (layout) {
    case ScaleLayout::kRaw: return "raw";
    case ScaleLayout::kPacked: return "packed";
    case ScaleLayout::kMnMajor: return "mn-major";
  }
  return "?";
}

std::optional<ScaleLayout> parse_scale_layout(std::string_view name) noexcept {
  if (name == "raw") return ScaleLayout::kRaw;
  if (name == "packed") return ScaleLayout::kPacked;
  if (name == "mn-major") return ScaleLayout::kMnMajor;
  return std::nullopt;
}

ScaleGranularity scale_granularity(ScaleMode mode) noexcept {
  switch (mode) {
    case ScaleMode::kBF16: return {0, 0, 0, 0};
    case ScaleMode::kPtpc: return {1, 0, 1, 0};
    case ScaleMode::kBlockscale: return {1, 128, 128, 128};
    case ScaleMode::kMxfp8: return {1, 32, 32, 32};
  }
  return {};
}

}  // namespace weave
