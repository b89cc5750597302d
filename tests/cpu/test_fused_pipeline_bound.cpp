// The GEMM-pipeline bound of a fused kernel whose consumers wait for peers inside the pipeline
// (fused/pipeline_record.hpp): it must outlast the longest chain of comm waits one tile's epilogue
// can make (GemmAllReduce's combine: W - 1 peers in turn, each up to the comm timeout T), with a
// margin, at every world, so the comm wait that names the peer fires before the pipeline aborts.
#include <gtest/gtest.h>

#include "fused/pipeline_record.hpp"

namespace weave::fused {
namespace {

TEST(FusedPipelineBound, OutlastsTheCombinesChainOfPeerWaitsAtEveryWorld) {
  for (double t : {0.1, 1.0, 10.0, 600.0})
    for (int w = 1; w <= 8; ++w) {
      const double chain_s = (w > 1 ? w - 1 : 1) * t;
      const double bound_s = static_cast<double>(peer_waiting_pipeline_bound_ns(w, t)) * 1e-9;
      EXPECT_GE(bound_s, chain_s + t + 5.0 - 1e-6) << "W " << w << ", T " << t << " s";
    }
  // World 2 keeps the bound the kernels were measured with: 2 T + 5 s.
  EXPECT_EQ(peer_waiting_pipeline_bound_ns(2, 30.0), 65'000'000'000ull);
  // The old fixed 2 T + 5 s fell below the chain at W = 8 with T = 30 s (7 T = 210 s > 65 s).
  EXPECT_GT(peer_waiting_pipeline_bound_ns(8, 30.0), 210'000'000'000ull);
}

}  // namespace
}  // namespace weave::fused
