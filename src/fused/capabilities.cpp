#include "fused/capabilities.hpp"

#include "comm/group.hpp"
#include "weave/fused_plan.hpp"

namespace weave::fused {

Placement placement_of(const comm::Group& g, bool fused_kernel) {
  Placement at;
  at.world = g.world_size();
  at.domain_ranks = g.lsa_team_size();
  at.nvlink_domain = at.domain_ranks == at.world;
  at.nccl = g.nccl() != nullptr;
  at.fused_kernel = fused_kernel;
  at.group = g.describe();
  return at;
}

Placement placement_of(const FusedPlanMachine& machine, int world, bool fused_kernel) {
  Placement at;
  at.world = world;
  at.nvlink_domain = machine.nvlink_domain;
  at.nccl = machine.nccl;
  at.fused_kernel = machine.fused_kernels && fused_kernel;
  at.group = "the machine planned for";
  return at;
}

}  // namespace weave::fused
