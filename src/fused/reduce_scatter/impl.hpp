// The state behind weave::GemmReduceScatter (internal): GemmAllReduce's Impl with the leg
// kReduceScatter (fused/all_reduce/impl.hpp), so both operators share one window layout (prefix
// "grs."), GEMM kernels, schedule, protocol and self-test. What differs lives there behind `leg`:
// the split collective (reduce-scatter in place, in + r * count == out), the fused kernel's
// no_gather (own tiles stored here only), the output view (band r: rows [r m / w, (r + 1) m / w))
// and the rule that m is a multiple of the world (fused: of world x 128).
#pragma once
#include <memory>

#include "comm/group.hpp"
#include "fused/all_reduce/hooks.hpp"
#include "fused/all_reduce/impl.hpp"
#include "weave/gemm_reduce_scatter.hpp"

namespace weave {

namespace fused {
// GemmReduceScatter's names for GemmAllReduce's modes (the modes it has) and back.
GemmAllReduceMode grs_ar_mode(GemmReduceScatterMode mode);
GemmReduceScatterMode grs_mode(GemmAllReduceMode mode);
// The GemmAllReduce configuration that runs `c` (field by field; the leg is the Impl's).
GemmAllReduceConfig grs_ar_config(const GemmReduceScatterConfig& c);
GemmReduceScatterPlan grs_plan_of(const GemmAllReducePlan& p);
}  // namespace fused

struct GemmReduceScatter::Impl {
  std::shared_ptr<comm::Group> owned_group;
  GemmReduceScatterConfig cfg;
  std::unique_ptr<GemmAllReduce::Impl> ar;  // leg kReduceScatter

  static Impl& of(GemmReduceScatter& op) { return *op.impl_; }  // tests reach the state through it
  // Collective (as GemmReduceScatter's constructor) over any group; hooks: the tests' controls.
  static std::unique_ptr<GemmReduceScatter> create(comm::Group& g, const GemmReduceScatterConfig& config,
                                                   const fused::GemmAllReduceHooks& hooks = {});
  static std::unique_ptr<GemmReduceScatter> wrap(std::unique_ptr<Impl> im);
};

}  // namespace weave
