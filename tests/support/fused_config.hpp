// A fused op's config for tests: N, K (K_r for the reducing ops), m_max, quant and mode; the rest
// defaults (bf16 output, raw scales). CPU and GPU tests alike.
#pragma once
#include <cstdint>

#include "weave/gemm.hpp"

namespace weave::test {

template <class Config>
Config fused_op_config(ScaleMode quant, decltype(Config::mode) mode, int64_t n, int64_t k, int64_t m_max) {
  Config c;
  c.n = n;
  c.k = k;
  c.m_max = m_max;
  c.quant = quant;
  c.mode = mode;
  return c;
}

}  // namespace weave::test
