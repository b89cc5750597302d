// GemmAllReduce::self_test: m rows of known per-rank values through the op's real path, every output
// element checked on every rank against a closed-form sum (a transport that moves nothing leaves
// peers' terms out; a misplaced tile puts another row's terms in).
//
// Values: rank s's B_s[n, k] = small integers in [-8, 8] hashed from (s, n, k, seed) (exact in bf16
// and e4m3); rank s's A row i is one-hot at column col(s, i), value 1 (in the fp8 modes every scale
// block a power of two with the values divided by it: fused/self_test_support.hpp). So rank s's
// partial is P_s[i, n] = B_s[n, col(s, i)] and
// out[i, n] = sum_s P_s[i, n] exactly (|sum| <= 64 is exact in bf16), in any mode; the reference
// needs no GEMM and no data from peers. A wrong element whose error is exactly -P_s is counted
// against source s (its term did not arrive) when no other source's term explains it; any other
// error is counted as unattributed. The
// expected value is the all-reduce in every mode: gemm-only, which moves nothing, fails (the
// self-test's negative control). GemmReduceScatter's Impl (leg kReduceScatter) checks its band.
#include <cuda_runtime.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "common/hash.hpp"
#include "fused/self_test_support.hpp"
#include "fused/all_reduce/impl.hpp"
#include "weave/quant.hpp"

namespace weave {

SelfTestReport GemmAllReduce::self_test(std::int64_t m) { return impl_->self_test(m); }

SelfTestReport GemmAllReduce::Impl::self_test(std::int64_t m) {
  Impl& im = *this;
  comm::Group& g = *im.group;
  const GemmAllReduceConfig& c = im.cfg;
  const int w = g.world_size(), r = g.rank();
  const bool rs = leg == fused::ArLeg::kReduceScatter;
  const std::string what = std::string(op_name()) + "::self_test";
  // Not a multiple of the tile: partial tiles, several bands (decode: the GEMV's M <= 32, partial
  // n8 tiles). Reduce-scatter: a multiple of the world (fused: of world x 128, its bands' rule).
  if (m == 0) {
    m = std::min<int64_t>(c.m_max, fused::gar_decode_mode(c.mode) ? 29 : 300);
    if (rs && c.mode == GemmAllReduceMode::kFused && w > 1)
      m = std::min<int64_t>(c.m_max, 2 * w * fused::kGrsFusedRows) / (w * fused::kGrsFusedRows) * (w * fused::kGrsFusedRows);
    else if (rs)
      m = m / w * w;
  }
  WEAVE_EXPECT_ARG(m >= 1 && m <= c.m_max, what << ": m must be in 1..m_max (" << c.m_max << "), got " << m);
  WEAVE_EXPECT_ARG(!rs || m % w == 0, what << ": m must be a multiple of the world (" << w << "), got " << m);
  const int64_t n = c.n, k = c.k;
  const uint64_t seed = im.self_test_seed++;
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  auto col_of = [&](int s, int64_t i) { return static_cast<int64_t>(mix64(seed * 131 + s * 1000003ull + i) % k); };
  auto b_val = [&](int s, int64_t row, int64_t kk) {
    return static_cast<int>(mix64(seed ^ (uint64_t(s + 1) << 56) ^ (static_cast<uint64_t>(row) << 28) ^
                                  static_cast<uint64_t>(kk)) %
                            17) -
           8;
  };
  const int dev = g.device();
  const auto ops = fused::make_self_test_operands(
      c.quant, c.scale_layout, m, n, k, dev, [&](int64_t i) { return col_of(r, i); },
      [&](int64_t row, int64_t kk) { return b_val(r, row, kk); });
  const TensorView a = ops->a_view, b = ops->b_view;
  const GemmScales scales = ops->scales;
  OwnedStream owned_stream;
  const cudaStream_t stream = owned_stream.s;
  SelfTestReport report;
  report.wrong_from_rank.assign(w, 0);
  int64_t unattributed = 0;
  std::ostringstream detail;
  const int64_t row0 = out_row0(m), rows = out_rows(m);
  const size_t out_elems = static_cast<size_t>(rows * n);
  char* out_bytes = out_local() + static_cast<size_t>(row0 * n) * 2;
  {
    // One call guard over the poison and the call: no other thread's call of this op lands between.
    comm::OpRuntime::CallGuard guard(*im.rt, rs ? "GemmReduceScatter::self_test" : "GemmAllReduce::self_test", stream);
    const std::vector<uint8_t> bytes = fused::run_self_test_call(
        g, stream, out_bytes, out_elems * 2, what + " (" + im.describe() + ")",
        [&] { im.run_in(guard, m, a, b, scales, nullptr, stream); }, [&] { im.check(); });
    std::vector<uint16_t> got(out_elems);
    std::memcpy(got.data(), bytes.data(), bytes.size());
    std::vector<int64_t> cols(w);
    for (int64_t i = row0; i < row0 + rows; ++i) {
      for (int s = 0; s < w; ++s) cols[s] = col_of(s, i);
      for (int64_t j = 0; j < n; ++j) {
        int want = 0;
        for (int s = 0; s < w; ++s)
          want += b_val(s, j, cols[s]);
        const uint32_t u = static_cast<uint32_t>(got[static_cast<size_t>((i - row0) * n + j)]) << 16;
        float v = 0;
        std::memcpy(&v, &u, 4);
        if (v == static_cast<float>(want)) continue;
        int source = -1, explained = 0;  // attributed only when exactly one source's term explains it
        for (int s = 0; s < w; ++s) {
          const int term = b_val(s, j, cols[s]);
          if (term != 0 && v == static_cast<float>(want - term)) {
            source = s;
            ++explained;
          }
        }
        if (explained != 1) source = -1;
        if (source >= 0) ++report.wrong_from_rank[source];
        else ++unattributed;
        if (detail.tellp() == 0)
          detail << "rank " << r << ": row " << i << ", column " << j << ": got " << v << ", expected " << want
                 << (source >= 0 ? " (source rank " + std::to_string(source) + "'s term missing)" : std::string());
      }
    }
  }
  bool ok = unattributed == 0;
  for (auto v : report.wrong_from_rank) ok &= v == 0;
  report.caller_buffers_ok = ok;
  report.window_buffers_ok = ok;
  const std::string failed = g.failed_ranks(ok, "the " + std::string(op_name()) + " self-test outcome");
  report.ok = failed.empty();
  std::ostringstream os;
  os << im.describe() << ": m = " << m << " rows, mode " << to_string(im.last) << ": ";
  if (report.ok) {
    os << "every element" << (rs ? " of every rank's band" : "") << " is the sum of every source rank's term, on every rank";
  } else {
    os << "FAILED on rank(s) " << failed;
    if (unattributed) os << "; " << unattributed << " wrong element(s) not explained by one missing source";
    if (detail.tellp()) os << "; " << detail.str();
  }
  report.detail = os.str();
  return report;
}

}  // namespace weave
