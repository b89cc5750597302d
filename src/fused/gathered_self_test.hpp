// The self-test of the operators whose output is every rank's rows, [world m, N] with rank s's rows
// A_s B^T for one B (GemmAllGather, AllGatherGemm): m rows of known per-rank values through the op's
// real path, every source rank's rows checked on every rank.
//
// Values (fused/self_test_support.hpp): B[n, k] small integers hashed from (n, k, seed); rank s's A
// row i one-hot at column col(s, i) (in the fp8 modes every scale block a power of two with the
// values divided by it). So out[s m + i, n] = B[n, col(s, i)] exactly, in any mode and out dtype, and
// the reference needs no GEMM: rows that never arrived hold the poison or another call's values.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>

#include "comm/group.hpp"
#include "comm/op_runtime.hpp"
#include "common/check.hpp"
#include "weave/collectives.hpp"
#include "weave/gemm.hpp"

namespace weave::fused {

struct GatheredSelfTest {
  const char* op = "";            // "GemmAllGather": the guard's and the errors' name
  ScaleMode quant = ScaleMode::kBF16;
  ScaleLayout scale_layout = ScaleLayout::kRaw;
  int64_t n = 0, k = 0;
  void* out = nullptr;            // this rank's output of the call ([world m, N], dense rows)
  size_t out_bytes = 2;           // per element: 2 (bf16) or 4 (fp32)
  const char* ok_phrase = "";     // what a pass says ("every source rank's rows arrived intact ...")
  std::function<std::string()> describe;  // the op's describe()
  // Enqueues one call of m rows with these operands inside the guard (the op's run_in).
  std::function<void(comm::OpRuntime::CallGuard&, const TensorView& a, const TensorView& b, const GemmScales&,
                     cudaStream_t)> call;
  std::function<void()> check;              // the op's check()
  std::function<std::string()> last_mode;  // the mode the call ran, after it
};

// Collective and synchronising: one call of m rows (1 <= m, checked by the caller) with the values
// of `seed`, under one call guard of `rt` (no other thread's call of the op lands between the poison
// and the call); ok on every rank only if every rank saw every source right.
SelfTestReport run_gathered_self_test(comm::Group& g, const comm::OpRuntime& rt, uint64_t seed, int64_t m,
                                      const GatheredSelfTest& t);

// An op's self_test(m) over its Impl (GemmAllGather's, AllGatherGemm's: cfg, out_bytes, group, rt,
// self_test_seed, last, describe(), check(), run_in()); its output at `out`. m = 0: 200 rows (not a
// multiple of the tile: partial tiles too), at most m_max.
template <class Impl>
SelfTestReport gathered_self_test_of(Impl& im, const char* op, void* out, const char* ok_phrase, int64_t m) {
  const auto& c = im.cfg;
  if (m == 0) m = std::min<int64_t>(c.m_max, 200);
  WEAVE_EXPECT_ARG(m >= 1 && m <= c.m_max, op << "::self_test: m must be in 1..m_max (" << c.m_max << ")");
  GatheredSelfTest t;
  t.op = op;
  t.quant = c.quant;
  t.scale_layout = c.scale_layout;
  t.n = c.n;
  t.k = c.k;
  t.out = out;
  t.out_bytes = im.out_bytes;
  t.ok_phrase = ok_phrase;
  t.describe = [&] { return im.describe(); };
  t.call = [&](comm::OpRuntime::CallGuard& guard, const TensorView& a, const TensorView& b, const GemmScales& s,
               cudaStream_t stream) { im.run_in(guard, m, a, b, s, nullptr, stream); };
  t.check = [&] { im.check(); };
  t.last_mode = [&] { return std::string(to_string(im.last)); };
  return run_gathered_self_test(*im.group, *im.rt, im.self_test_seed++, m, t);
}

}  // namespace weave::fused
