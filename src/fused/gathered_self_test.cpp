#include "fused/gathered_self_test.hpp"

#include <cuda_runtime.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "common/hash.hpp"
#include "fused/self_test_support.hpp"

namespace weave::fused {

namespace {

// Wrong elements of `got` (out [world m, n] of `out_bytes` per element) per source rank, against
// out[s m + i, j] = b_val(j, a_col(s, i)); the first named in `detail`, from rank `rank`'s view.
void check_rows(const std::vector<uint8_t>& got, size_t out_bytes, int world, int rank, int64_t m, int64_t n,
                const std::function<int64_t(int, int64_t)>& a_col, const std::function<int(int64_t, int64_t)>& b_val,
                std::vector<int64_t>& wrong_from_rank, std::string& detail) {
  for (int s = 0; s < world; ++s)
    for (int64_t i = 0; i < m; ++i) {
      const int64_t col = a_col(s, i);
      for (int64_t j = 0; j < n; ++j) {
        const size_t e = static_cast<size_t>((s * m + i) * n + j);
        float v = 0;
        if (out_bytes == 4) {
          std::memcpy(&v, &got[e * 4], 4);
        } else {
          uint16_t h = 0;
          std::memcpy(&h, &got[e * 2], 2);
          const uint32_t u = static_cast<uint32_t>(h) << 16;
          std::memcpy(&v, &u, 4);
        }
        const float want = static_cast<float>(b_val(j, col));
        if (!(v == want) && wrong_from_rank[s]++ == 0 && detail.empty()) {
          std::ostringstream os;
          os << "rank " << rank << ": row " << i << " of source rank " << s << ", column " << j << ": got " << v
             << ", expected " << want;
          detail = os.str();
        }
      }
    }
}

}  // namespace

SelfTestReport run_gathered_self_test(comm::Group& g, const comm::OpRuntime& rt, uint64_t seed, int64_t m,
                                      const GatheredSelfTest& t) {
  const int w = g.world_size(), r = g.rank();
  const int64_t n = t.n, k = t.k;
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  auto col_of = [&](int s, int64_t i) { return static_cast<int64_t>(mix64(seed * 131 + s * 1000003ull + i) % k); };
  auto b_val = [&](int64_t row, int64_t kk) {
    return static_cast<int>(mix64(seed ^ (static_cast<uint64_t>(row) << 32) ^ static_cast<uint64_t>(kk)) % 17) - 8;
  };
  const auto ops = make_self_test_operands(
      t.quant, t.scale_layout, m, n, k, g.device(), [&](int64_t i) { return col_of(r, i); },
      [&](int64_t row, int64_t kk) { return b_val(row, kk); });
  OwnedStream owned_stream;
  const cudaStream_t stream = owned_stream.s;
  SelfTestReport report;
  report.wrong_from_rank.assign(w, 0);
  std::string detail;
  const size_t out_elems = static_cast<size_t>(w * m * n);
  {
    comm::OpRuntime::CallGuard guard(rt, std::string(t.op) + "::self_test", stream);
    const std::vector<uint8_t> got = run_self_test_call(
        g, stream, t.out, out_elems * t.out_bytes, std::string(t.op) + "::self_test (" + t.describe() + ")",
        [&] { t.call(guard, ops->a_view, ops->b_view, ops->scales, stream); }, t.check);
    check_rows(got, t.out_bytes, w, r, m, n, col_of, b_val, report.wrong_from_rank, detail);
  }
  bool ok = true;
  for (auto v : report.wrong_from_rank) ok &= v == 0;
  report.caller_buffers_ok = ok;
  report.window_buffers_ok = ok;
  const std::string failed = g.failed_ranks(ok, std::string("the ") + t.op + " self-test outcome");
  report.ok = failed.empty();
  std::ostringstream os;
  os << t.describe() << ": m = " << m << " rows per rank, mode " << t.last_mode() << ": ";
  if (report.ok) os << t.ok_phrase;
  else os << "FAILED on rank(s) " << failed << (detail.empty() ? std::string() : "; " + detail);
  report.detail = os.str();
  return report;
}

}  // namespace weave::fused
