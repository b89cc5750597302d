// Internal to the reference numerics: the scale grid of each mode, the consistency check of a
// QuantMatrix, and dequantisation into fp32 or fp64.
#pragma once
#include <cstdint>
#include <vector>

#include "weave/quant.hpp"

namespace weave::ref::detail {

// One scale covers group_rows x group_k elements; the scale tensor is [scale_rows, scale_cols].
// bf16 has no scales (all zero); ptpc is [rows, 1] with group_k = cols.
struct ScaleGrid {
  int64_t group_rows = 0, group_k = 0;
  int64_t scale_rows = 0, scale_cols = 0;
};

// Throws kInvalidArgument for an unknown mode or operand, or cols not a multiple of the K group.
ScaleGrid scale_grid(ScaleMode mode, Operand operand, int64_t rows, int64_t cols);

// Throws kInvalidArgument (naming `what` and the field) when q's vectors do not match its shape.
ScaleGrid expect_consistent(const QuantMatrix& q, Operand operand, const char* what);

// element x scale in fp64: exact (e4m3 has 4 significant bits, the scale 24), unlike the fp32
// product dequantize() returns for ptpc and blockscale.
std::vector<double> dequantize_f64(const QuantMatrix& q, Operand operand, const char* what);

}  // namespace weave::ref::detail
