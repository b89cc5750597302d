// What the fused operators' pure planners (gemm_all_reduce_plan, gemm_all_gather_plan) assume of
// the machine an op would run on. A constructed op plans with what it found instead (its plan(m)).
#pragma once

#include "weave/export.hpp"

namespace weave WEAVE_API {

struct FusedPlanMachine {
  int num_sms = 132;           // CTAs per rank: the SM count of one GPU (H100 SXM / H200: 132)
  bool nvlink_domain = true;   // every rank in one NVLink domain (fused, split-lsa, split-ce, decode need it)
  bool nccl = true;            // an NCCL communicator exists (split-nccl needs it)
  bool fused_kernels = true;   // false: plan as if this build had no fused kernel (`--no-fused`)
};

}  // namespace weave
