// GemmAllGather::self_test: m rows of known per-rank values through the op's real path, every
// source rank's rows checked on every rank (a transport that moves nothing leaves the peers' rows
// poisoned, misplaced rows hold another row's values).
//
// Values: B[n, k] = small integers in [-8, 8] hashed from (n, k, seed) (exact in bf16 and e4m3);
// rank s's A row i is one-hot at column col(s, i), value 1 (in the fp8 modes every scale block a
// power of two with the values divided by it: fused/self_test_support.hpp). So out[s*m + i, n] =
// B[n, col(s, i)] exactly, in any mode and out dtype, and the reference needs no GEMM.
#include <cuda_runtime.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "common/hash.hpp"
#include "fused/self_test_support.hpp"
#include "fused/all_gather/impl.hpp"
#include "weave/quant.hpp"

namespace weave {

SelfTestReport GemmAllGather::self_test(std::int64_t m) {
  Impl& im = *impl_;
  comm::Group& g = *im.group;
  const GemmAllGatherConfig& c = im.cfg;
  if (m == 0) m = std::min<int64_t>(c.m_max, 200);  // not a multiple of the tile: partial tiles too
  WEAVE_EXPECT_ARG(m >= 1 && m <= c.m_max, "GemmAllGather::self_test: m must be in 1..m_max (" << c.m_max << ")");
  const int w = g.world_size(), r = g.rank();
  const int64_t n = c.n, k = c.k;
  const uint64_t seed = im.self_test_seed++;
  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  auto col_of = [&](int s, int64_t i) { return static_cast<int64_t>(mix64(seed * 131 + s * 1000003ull + i) % k); };
  auto b_val = [&](int64_t row, int64_t kk) {
    return static_cast<int>(mix64(seed ^ (static_cast<uint64_t>(row) << 32) ^ static_cast<uint64_t>(kk)) % 17) - 8;
  };
  const int dev = g.device();
  const auto ops = fused::make_self_test_operands(
      c.quant, c.scale_layout, m, n, k, dev, [&](int64_t i) { return col_of(r, i); },
      [&](int64_t row, int64_t kk) { return b_val(row, kk); });
  const TensorView a = ops->a_view, b = ops->b_view;
  const GemmScales scales = ops->scales;
  OwnedStream owned_stream;
  const cudaStream_t stream = owned_stream.s;
  SelfTestReport report;
  report.wrong_from_rank.assign(w, 0);
  std::string detail;
  const size_t ob = im.out_bytes, out_elems = static_cast<size_t>(w * m * n);
  {
    // One call guard over the poison and the call: no other thread's call of this op lands between.
    comm::OpRuntime::CallGuard guard(*im.rt, "GemmAllGather::self_test", stream);
    const std::vector<uint8_t> got = fused::run_self_test_call(
        g, stream, im.out_local(), out_elems * ob, "GemmAllGather::self_test (" + im.describe() + ")",
        [&] { im.run_in(guard, m, a, b, scales, nullptr, stream); }, [&] { im.check(); });
    fused::check_gathered_one_hot(got, ob, w, r, m, n, col_of, b_val, report.wrong_from_rank, detail);
  }
  bool ok = true;
  for (auto v : report.wrong_from_rank) ok &= v == 0;
  report.caller_buffers_ok = ok;
  report.window_buffers_ok = ok;
  const std::string failed = g.failed_ranks(ok, "the GemmAllGather self-test outcome");
  report.ok = failed.empty();
  std::ostringstream os;
  os << im.describe() << ": m = " << m << " rows per rank, mode " << to_string(im.last) << ": ";
  if (report.ok) os << "every source rank's rows arrived intact on every rank";
  else os << "FAILED on rank(s) " << failed << (detail.empty() ? std::string() : "; " + detail);
  report.detail = os.str();
  return report;
}

}  // namespace weave
