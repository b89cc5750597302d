// AllGatherGemm::self_test: m rows of known per-rank values through the op's real path, every
// source rank's output rows checked on every rank. The values are GemmAllGather's self-test's
// (fused/self_test_support.hpp): rank s's A row i is one-hot at column col(s, i), B small integers,
// so out[s m + i, n] = B[n, col(s, i)] exactly in every mode; rows whose A (or scales) never
// arrived hold another call's values, or the poison.
#include <cuda_runtime.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "common/hash.hpp"
#include "fused/ag_gemm/impl.hpp"
#include "fused/self_test_support.hpp"

namespace weave {

SelfTestReport AllGatherGemm::self_test(std::int64_t m) {
  Impl& im = *impl_;
  comm::Group& g = *im.group;
  const AllGatherGemmConfig& c = im.cfg;
  if (m == 0) m = std::min<int64_t>(c.m_max, 200);  // not a multiple of the tile: partial tiles too
  WEAVE_EXPECT_ARG(m >= 1 && m <= c.m_max, "AllGatherGemm::self_test: m must be in 1..m_max (" << c.m_max << ")");
  const int w = g.world_size(), r = g.rank();
  const int64_t n = c.n, k = c.k;
  const uint64_t seed = im.self_test_seed++;
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  auto col_of = [&](int s, int64_t i) { return static_cast<int64_t>(mix64(seed * 131 + s * 1000003ull + i) % k); };
  auto b_val = [&](int64_t row, int64_t kk) {
    return static_cast<int>(mix64(seed ^ (static_cast<uint64_t>(row) << 32) ^ static_cast<uint64_t>(kk)) % 17) - 8;
  };
  const auto ops = fused::make_self_test_operands(
      c.quant, c.scale_layout, m, n, k, g.device(), [&](int64_t i) { return col_of(r, i); },
      [&](int64_t row, int64_t kk) { return b_val(row, kk); });
  OwnedStream owned_stream;
  const cudaStream_t stream = owned_stream.s;
  SelfTestReport report;
  report.wrong_from_rank.assign(w, 0);
  std::string detail;
  const size_t ob = im.out_bytes, out_elems = static_cast<size_t>(w * m * n);
  {
    comm::OpRuntime::CallGuard guard(*im.rt, "AllGatherGemm::self_test", stream);
    const std::vector<uint8_t> got = fused::run_self_test_call(
        g, stream, im.local(im.gl.out), out_elems * ob, "AllGatherGemm::self_test (" + im.describe() + ")",
        [&] { im.run_in(guard, m, ops->a_view, ops->b_view, ops->scales, nullptr, stream); }, [&] { im.check(); });
    fused::check_gathered_one_hot(got, ob, w, r, m, n, col_of, b_val, report.wrong_from_rank, detail);
  }
  bool ok = true;
  for (auto v : report.wrong_from_rank) ok &= v == 0;
  report.caller_buffers_ok = ok;
  report.window_buffers_ok = ok;
  const std::string failed = g.failed_ranks(ok, "the AllGatherGemm self-test outcome");
  report.ok = failed.empty();
  std::ostringstream os;
  os << im.describe() << ": m = " << m << " rows per rank, mode " << to_string(im.last) << ": ";
  if (report.ok) os << "every source rank's rows were gathered and multiplied right on every rank";
  else os << "FAILED on rank(s) " << failed << (detail.empty() ? std::string() : "; " + detail);
  report.detail = os.str();
  return report;
}

}  // namespace weave
