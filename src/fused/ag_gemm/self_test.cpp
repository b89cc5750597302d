// AllGatherGemm::self_test: m rows of known per-rank values through the op's real path, every
// source rank's output rows checked on every rank (fused/gathered_self_test.hpp; the values are
// GemmAllGather's, whose output this op's equals): rows whose A (or scales) never arrived hold
// another call's values, or the poison.
#include "fused/ag_gemm/impl.hpp"
#include "fused/gathered_self_test.hpp"

namespace weave {

SelfTestReport AllGatherGemm::self_test(std::int64_t m) {
  return fused::gathered_self_test_of(*impl_, "AllGatherGemm", impl_->local(impl_->gl.out),
                                      "every source rank's rows were gathered and multiplied right on every rank", m);
}

}  // namespace weave
