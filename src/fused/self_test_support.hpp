// What the fused operators' self-tests share (GemmAllGather, GemmAllReduce).
//
// Operands: exact values whose GEMM
// is known in closed form. A [m, k] is one-hot (row i holds 1 at column a_col(i)), B [n, k] holds
// the small integers b_val(row, kk) in [-8, 8] (exact in bf16 and e4m3). In the fp8 modes every
// scale block (ptpc: a row; blockscale: 1x128 of A, 128x128 of B; mxfp8: 1x32, raw or packed) has
// its own power of two 2^e, e in 0..3, and the values stored in that block are divided by it, so
// (A B^T)[i, j] = b_val(j, a_col(i)) exactly in every mode, and a scale applied to the wrong block,
// or not at all, shows. Device memory owned here, freed on every path.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "common/cuda_owned.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"
#include "weave/tensor.hpp"

namespace weave::fused {

struct SelfTestOperands {
  std::unique_ptr<OwnedDeviceMemory> a, b, scale_a, scale_b;
  TensorView a_view, b_view;
  GemmScales scales;  // views of scale_a / scale_b (empty for bf16)
};

// The same on the host, in the raw layouts of ref::QuantMatrix (A's scales [m, blocks], B's
// [ceil(n / rows per block), blocks]; ptpc [rows]): CPU-testable with ref::dequantize.
struct SelfTestHostOperands {
  ref::QuantMatrix a, b;
};
SelfTestHostOperands make_self_test_host_operands(ScaleMode quant, int64_t m, int64_t n, int64_t k,
                                                  const std::function<int64_t(int64_t)>& a_col,
                                                  const std::function<int(int64_t, int64_t)>& b_val);

// Builds them on device `dev` (synchronous copies). quant / layout as weave::Gemm takes them.
std::unique_ptr<SelfTestOperands> make_self_test_operands(ScaleMode quant, ScaleLayout layout, int64_t m, int64_t n,
                                                          int64_t k, int dev,
                                                          const std::function<int64_t(int64_t)>& a_col,
                                                          const std::function<int(int64_t, int64_t)>& b_val);

// The call step: poison `bytes` of this rank's output at `out` (nothing a peer writes before every
// rank has: bounded sync, then a barrier), enqueue `call` on `stream`, wait for it (bounded by the
// group's timeout, naming `what`), run `check` (the op's recorded timeouts), barrier again (every
// peer's stores into this rank's window are complete, in the emulated world too), and return the
// output's bytes.
std::vector<uint8_t> run_self_test_call(const comm::Group& g, cudaStream_t stream, void* out, size_t bytes,
                                        const std::string& what, const std::function<void()>& call,
                                        const std::function<void()>& check);

}  // namespace weave::fused
