// What a fused op can run, resolved once from its mode, its world and where it runs: the op's
// constructor (from its group and this build) and the public planners (from FusedPlanMachine) make
// the same record with the operator's *_capabilities(), and the window layout, the plan and enqueue
// read it instead of re-reading the mode.
#pragma once
#include <string>

#include "weave/fused_plan.hpp"

namespace weave::comm {
class Group;
}

namespace weave::fused {

// The facts of a placement that decide what a fused op can run.
struct Placement {
  int world = 1;
  bool nvlink_domain = true;  // every rank in one NVLink (LSA) domain
  int domain_ranks = 0;       // ranks in this rank's NVLink domain, for the errors (0: not known)
  bool nccl = false;          // an NCCL communicator (split-nccl can run)
  bool fused_kernel = false;  // this build has the op's fused kernel for its quant (and out dtype)
  std::string group;          // the group as the errors name it
};

template <class Mode>
struct Capabilities {
  // From the mode and the world alone, so a window's size is known before an op exists:
  bool hosts_fused = false;  // the fused kernel's regions (GemmAllReduce: its staging)
  Mode hosted_split{};       // the split collective the window holds (split-lsa / split-ce); kAuto: none
  bool pulls = false;        // fused-ce: copy streams pulling the peers' rows, and their words
  bool mx_bf16_route = false;  // mxfp8 may run on the bf16 route (fused/mx_route.hpp): its kernels and buffers
  // From the placement:
  bool fused = false;    // the fused kernel can run here
  Mode split{};          // the split mode this op runs (hosted_split, or split-nccl for auto across domains)
  Mode plan_mode{};      // the mode the planner reads: the requested one, or split-nccl as above
  std::string unavailable;  // why the requested mode cannot run here ("" if it can); the constructor raises it
};

// A placement of `world` ranks and nothing else known: enough for a record's mode-only part.
inline Placement world_only(int world) {
  Placement at;
  at.world = world;
  return at;
}

// The placement of an op built on `g` (fused_kernel: this build has its kernel).
Placement placement_of(const comm::Group& g, bool fused_kernel);
// The placement a public planner describes (machine.fused_kernels = false: plan as if none were built).
Placement placement_of(const FusedPlanMachine& machine, int world, bool fused_kernel);

// CTAs per rank: the SMs this rank may use (its share of the GPU), at most max_sms where set.
inline int ctas_per_rank(int sm_share, int max_sms) { return max_sms > 0 && max_sms < sm_share ? max_sms : sm_share; }

// "<d> of <w> ranks are" (how many ranks share this rank's NVLink domain), for the errors.
inline std::string domain_ranks_phrase(const Placement& at) {
  if (at.domain_ranks <= 0) return "they are not";
  return std::to_string(at.domain_ranks) + " of " + std::to_string(at.world) + " ranks are";
}

}  // namespace weave::fused
