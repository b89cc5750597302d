// GemmAllGather::self_test: m rows of known per-rank values through the op's real path, every
// source rank's rows checked on every rank (fused/gathered_self_test.hpp: a transport that moves
// nothing leaves the peers' rows poisoned, misplaced rows hold another row's values).
#include "fused/all_gather/impl.hpp"
#include "fused/gathered_self_test.hpp"

namespace weave {

SelfTestReport GemmAllGather::self_test(std::int64_t m) {
  return fused::gathered_self_test_of(*impl_, "GemmAllGather", impl_->out_local(),
                                      "every source rank's rows arrived intact on every rank", m);
}

}  // namespace weave
