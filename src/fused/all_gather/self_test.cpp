// GemmAllGather::self_test: m rows of known per-rank values through the op's real path, every
// source rank's rows checked on every rank (fused/gathered_self_test.hpp: a transport that moves
// nothing leaves the peers' rows poisoned, misplaced rows hold another row's values).
#include "common/check.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/gathered_self_test.hpp"

namespace weave {

SelfTestReport GemmAllGather::self_test(std::int64_t m) {
  Impl& im = *impl_;
  const GemmAllGatherConfig& c = im.cfg;
  if (m == 0) m = std::min<int64_t>(c.m_max, 200);  // not a multiple of the tile: partial tiles too
  WEAVE_EXPECT_ARG(m >= 1 && m <= c.m_max, "GemmAllGather::self_test: m must be in 1..m_max (" << c.m_max << ")");
  fused::GatheredSelfTest t;
  t.op = "GemmAllGather";
  t.quant = c.quant;
  t.scale_layout = c.scale_layout;
  t.n = c.n;
  t.k = c.k;
  t.out = im.out_local();
  t.out_bytes = im.out_bytes;
  t.ok_phrase = "every source rank's rows arrived intact on every rank";
  t.describe = [&] { return im.describe(); };
  t.call = [&](comm::OpRuntime::CallGuard& guard, const TensorView& a, const TensorView& b, const GemmScales& s,
               cudaStream_t stream) { im.run_in(guard, m, a, b, s, nullptr, stream); };
  t.check = [&] { im.check(); };
  t.last_mode = [&] { return std::string(to_string(im.last)); };
  return fused::run_gathered_self_test(*im.group, *im.rt, im.self_test_seed++, m, t);
}

}  // namespace weave
