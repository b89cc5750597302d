// The fused operators' capability records (fused/capabilities.hpp): what each mode hosts and can
// run for every placement, checked against rules written out here independently of the code, and
// the window layout reading the record's mode-only part.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fused/all_gather/plan.hpp"
#include "fused/all_reduce/plan.hpp"

namespace weave {
namespace {

std::vector<fused::Placement> placements(int world) {
  std::vector<fused::Placement> out;
  for (bool nvlink : {true, false})
    for (bool nccl : {true, false})
      for (bool kernel : {true, false}) {
        fused::Placement at;
        at.world = world;
        at.nvlink_domain = nvlink;
        at.domain_ranks = nvlink ? world : 1;
        at.nccl = nccl;
        at.fused_kernel = kernel;
        at.group = "test group";
        out.push_back(at);
      }
  return out;
}

std::string where(const fused::Placement& at) {
  return "world " + std::to_string(at.world) + (at.nvlink_domain ? ", one NVLink domain" : ", no NVLink domain") +
         (at.nccl ? ", NCCL" : ", no NCCL") + (at.fused_kernel ? ", kernel built" : ", no kernel");
}

TEST(FusedCapabilities, GemmAllReduceModesAgainstTheirRules) {
  using M = GemmAllReduceMode;
  for (M mode : {M::kAuto, M::kGemmOnly, M::kSplitNccl, M::kSplitLsa, M::kSplitCe, M::kFused, M::kDecode, M::kFusedRs,
                 M::kFusedCe})
    for (int world : {1, 2, 4})
      for (const fused::Placement& at : placements(world)) {
        GemmAllReduceConfig cfg;
        cfg.n = 7168;
        cfg.k = 2048;
        cfg.m_max = 1024;
        cfg.mode = mode;
        const fused::GarCapabilities c = fused::gar_capabilities(cfg, at);
        const std::string what = std::string(to_string(mode)) + ", " + where(at);
        const bool fused_mode = mode == M::kFused || mode == M::kFusedRs || mode == M::kFusedCe;
        const bool needs_nvlink = fused_mode || mode == M::kDecode || mode == M::kSplitLsa || mode == M::kSplitCe;
        bool runs = true;
        if (fused_mode && !at.fused_kernel) runs = false;
        if (needs_nvlink && !at.nvlink_domain) runs = false;
        if (mode == M::kSplitNccl && !at.nccl) runs = false;
        if (mode == M::kAuto && !at.nvlink_domain && !at.nccl) runs = false;
        EXPECT_EQ(c.unavailable.empty(), runs) << what << ": " << c.unavailable;
        if (fused_mode && !at.fused_kernel) EXPECT_NE(c.unavailable.find("no fused kernel"), std::string::npos) << what;
        EXPECT_EQ(c.fused, at.fused_kernel && at.nvlink_domain && world > 1) << what;
        EXPECT_EQ(c.pulls, mode == M::kFusedCe && world > 1) << what;
        EXPECT_EQ(c.hosts_fused, world > 1 && (mode == M::kAuto || fused_mode)) << what;
        const bool auto_over_nccl = mode == M::kAuto && !at.nvlink_domain && world > 1;
        EXPECT_EQ(c.plan_mode, auto_over_nccl ? M::kSplitNccl : mode) << what;
        const M hosted = mode == M::kSplitCe ? M::kSplitCe
                         : (mode == M::kAuto || mode == M::kDecode || mode == M::kSplitLsa) ? M::kSplitLsa
                                                                                              : M::kAuto;
        EXPECT_EQ(c.hosted_split, world > 1 ? hosted : M::kAuto) << what;
        EXPECT_EQ(c.split, auto_over_nccl ? M::kSplitNccl : hosted) << what;
      }
}

TEST(FusedCapabilities, GemmAllGatherModesAgainstTheirRules) {
  using M = GemmAllGatherMode;
  for (M mode : {M::kAuto, M::kGemmOnly, M::kSplitNccl, M::kSplitLsa, M::kSplitCe, M::kFusedLsa, M::kFusedCe})
    for (int world : {1, 2, 4})
      for (const fused::Placement& at : placements(world)) {
        GemmAllGatherConfig cfg;
        cfg.n = 7168;
        cfg.k = 2048;
        cfg.m_max = 1024;
        cfg.mode = mode;
        const fused::GagCapabilities c = fused::gag_capabilities(cfg, at);
        const std::string what = std::string(to_string(mode)) + ", " + where(at);
        const bool fused_mode = mode == M::kFusedLsa || mode == M::kFusedCe;
        const bool needs_nvlink = fused_mode || mode == M::kSplitLsa || mode == M::kSplitCe;
        bool runs = true;
        if (fused_mode && !at.fused_kernel) runs = false;
        if (needs_nvlink && !at.nvlink_domain) runs = false;
        if (mode == M::kSplitNccl && !at.nccl) runs = false;
        if (mode == M::kAuto && !at.nvlink_domain && !at.nccl) runs = false;
        EXPECT_EQ(c.unavailable.empty(), runs) << what << ": " << c.unavailable;
        EXPECT_EQ(c.fused, at.fused_kernel && at.nvlink_domain) << what;  // world 1 runs the fused kernel too
        EXPECT_EQ(c.pulls, mode == M::kFusedCe && world > 1) << what;
        const bool auto_over_nccl = mode == M::kAuto && !at.nvlink_domain && world > 1;
        EXPECT_EQ(c.plan_mode, auto_over_nccl ? M::kSplitNccl : mode) << what;
        const M hosted = mode == M::kSplitCe ? M::kSplitCe : (mode == M::kAuto || mode == M::kSplitLsa) ? M::kSplitLsa
                                                                                                         : M::kAuto;
        EXPECT_EQ(c.hosted_split, world > 1 ? hosted : M::kAuto) << what;
        EXPECT_EQ(c.split, auto_over_nccl ? M::kSplitNccl : hosted) << what;
      }
}

// The errors a constructor raises name the rule and the placement.
TEST(FusedCapabilities, UnavailableNamesTheRule) {
  fused::Placement split_domains;
  split_domains.world = 4;
  split_domains.nvlink_domain = false;
  split_domains.domain_ranks = 2;
  split_domains.fused_kernel = true;
  split_domains.group = "nccl rank 0/4 on GPU 0";
  GemmAllReduceConfig ar;
  ar.n = 7168;
  ar.k = 2048;
  ar.m_max = 64;
  ar.mode = GemmAllReduceMode::kFused;
  EXPECT_EQ(fused::gar_capabilities(ar, split_domains).unavailable,
            "GemmAllReduce: mode fused needs every rank in one NVLink domain (2 of 4 ranks are)");
  ar.mode = GemmAllReduceMode::kSplitNccl;
  EXPECT_EQ(fused::gar_capabilities(ar, split_domains).unavailable,
            "GemmAllReduce: mode split-nccl needs an NCCL communicator; nccl rank 0/4 on GPU 0 has none");
  GemmAllGatherConfig ag;
  ag.n = 7168;
  ag.k = 2048;
  ag.m_max = 64;
  ag.mode = GemmAllGatherMode::kAuto;
  EXPECT_EQ(fused::gag_capabilities(ag, split_domains).unavailable,
            "GemmAllGather: ranks are not in one NVLink domain and there is no NCCL communicator");
}

// The window reserves what the record's mode-only part says it hosts, and nothing it does not.
TEST(FusedCapabilities, TheWindowHoldsWhatTheRecordHosts) {
  using M = GemmAllReduceMode;
  for (M mode : {M::kAuto, M::kGemmOnly, M::kSplitNccl, M::kSplitLsa, M::kSplitCe, M::kFused, M::kDecode, M::kFusedRs,
                 M::kFusedCe})
    for (int world : {1, 2, 8}) {
      GemmAllReduceConfig cfg;
      cfg.n = 4096;
      cfg.k = 1024;
      cfg.m_max = 512;
      cfg.mode = mode;
      WindowLayout layout;
      const fused::GarLayout g = fused::add_gar_regions(layout, cfg, world, 8);
      const fused::GarCapabilities c = fused::gar_capabilities(cfg, fused::world_only(world));
      const std::string what = std::string(to_string(mode)) + " W" + std::to_string(world);
      EXPECT_EQ(g.has_staging, c.hosts_fused) << what;
      EXPECT_EQ(g.has_pull, c.pulls) << what;
      EXPECT_EQ(g.has_split, c.hosted_split != M::kAuto) << what;
    }
  using G = GemmAllGatherMode;
  for (G mode : {G::kAuto, G::kGemmOnly, G::kSplitNccl, G::kSplitLsa, G::kSplitCe, G::kFusedLsa, G::kFusedCe})
    for (int world : {1, 2, 8}) {
      GemmAllGatherConfig cfg;
      cfg.n = 4096;
      cfg.k = 1024;
      cfg.m_max = 512;
      cfg.mode = mode;
      WindowLayout layout;
      const fused::GagLayout g = fused::add_gag_regions(layout, cfg, world, 8, 132);
      EXPECT_EQ(g.has_split, fused::gag_capabilities(cfg, fused::world_only(world)).hosted_split != G::kAuto)
          << to_string(mode) << " W" << world;
    }
}

}  // namespace
}  // namespace weave
