// GemmAllGather::self_test(m, b, scale_b): the known-values self-test, then a check that every
// rank passes the same B (and scales). B must be identical on every rank (the op gathers rows
// C_s = A_s B^T); a rank whose B differs computes wrong rows that every rank receives, and no wait
// or flag can notice. Each rank fingerprints its B on its GPU (fused/weights_fingerprint.hpp),
// the fingerprints are all-gathered, and a rank outside the majority is named. With two ranks (or
// no majority) the odd one cannot be told: every rank's fingerprint is reported.
#include <cuda_runtime.h>

#include <map>
#include <sstream>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/weights_fingerprint.hpp"
#include "gemm/operands.hpp"

namespace weave {

SelfTestReport GemmAllGather::self_test(std::int64_t m, TensorView b, TensorView scale_b) {
  Impl& im = *impl_;
  comm::Group& g = *im.group;
  const GemmAllGatherConfig& c = im.cfg;
  // The caller's arguments first, before any GPU work (every rank raises alike on a shape rule).
  expect_matrix(b, "B", MatrixRule{gemm::gemm_input_dtype(c.quant), c.n, c.k, true, true, g.device()});
  WEAVE_EXPECT_ARG(scale_b.rank == 0 || (scale_b.rank == 2 && scale_b.device == g.device()),
                   "argument 'scale_b': a rank-2 tensor on cuda:" << g.device() << " or none (got "
                                                                  << scale_b.describe() << ")");
  SelfTestReport report = self_test(m);

  WEAVE_CHECK_CUDA(cudaSetDevice(g.device()));
  const OwnedDeviceMemory words(16);
  const OwnedStream st;
  auto* fp = static_cast<std::uint64_t*>(words.p);
  fused::enqueue_fingerprint(b, fp, st.s);
  if (scale_b.rank == 2) fused::enqueue_fingerprint(scale_b, fp + 1, st.s);
  else WEAVE_CHECK_CUDA(cudaMemsetAsync(fp + 1, 0, 8, st.s));
  std::uint64_t h[2] = {0, 0};
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(h, fp, 16, cudaMemcpyDeviceToHost, st.s));
  comm::sync_stream_bounded(st.s, g.timeout_s(), "GemmAllGather::self_test: fingerprinting B");
  const std::uint64_t mine = h[0] * 0x9E3779B97F4A7C15ull ^ h[1];
  const std::vector<std::uint64_t> all = g.all_gather(mine, "the fingerprints of every rank's B");

  std::map<std::uint64_t, int> votes;
  for (std::uint64_t v : all) ++votes[v];
  if (votes.size() == 1) {
    report.detail += "; B (and scale_b) identical on every rank";
    return report;
  }
  std::uint64_t majority = 0;
  int best = 0, ties = 0;
  for (const auto& [v, n] : votes) {
    if (n > best) best = n, majority = v, ties = 0;
    else if (n == best) ++ties;
  }
  std::ostringstream os;
  if (ties == 0 && best > 1) {
    os << "B differs across ranks: rank(s) ";
    bool first = true;
    for (int s = 0; s < g.world_size(); ++s)
      if (all[s] != majority) os << (first ? "" : ",") << s, first = false;
    os << " differ from the other " << best << " (B must be identical on every rank)";
  } else {
    os << "B differs across ranks (no majority, so the odd rank cannot be told; B must be identical on every "
          "rank): fingerprints";
    for (int s = 0; s < g.world_size(); ++s) os << " rank " << s << "=" << std::hex << all[s] << std::dec;
  }
  report.ok = false;
  report.detail = os.str() + "; " + report.detail;
  return report;
}

}  // namespace weave
