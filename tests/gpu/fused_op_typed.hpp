// The typed emulated-world suite of the fused operators: EmulatedFusedOp<Trait> over FusedOps, the
// cases named EmulatedFusedOp/<op>.<behaviour> (e.g. EmulatedFusedOp/GemmAllGather.RandomisedSoak;
// "Emulated*" is what scripts/gpu_all.sh runs). Its tests: test_fused_ops_typed.cu (self-tests,
// numerics, calibration, the caller's out, bad inputs) and test_fused_ops_typed_protocol.cu
// (back-to-back calls, graph replays, timeouts, disagreeing m, the soak). A new fused operator: a
// trait (fused_op_traits.hpp says what it supplies) and its entry in FusedOps.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "fused_op_traits.hpp"
#include "fused_op_traits_all_gather.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/gpu.hpp"

namespace weave::test {

template <class Traits>
class EmulatedFusedOp : public ::testing::Test {};

using FusedOps = ::testing::Types<AllGatherTraits, AllReduceTraits>;

// EmulatedFusedOp/GemmAllGather rather than EmulatedFusedOp/0.
struct FusedOpName {
  template <class Traits>
  static std::string GetName(int) {
    return Traits::kName;
  }
};

TYPED_TEST_SUITE(EmulatedFusedOp, FusedOps, FusedOpName);

}  // namespace weave::test
