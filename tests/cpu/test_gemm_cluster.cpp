// 2-CTA clusters of the tiled GEMM (gemm/kernel.cuh "Clusters"), on the CPU: the pairing of the
// kernel's own walk (every cluster takes two vertically adjacent tiles of one column, the same
// number each, every real tile once per K split) and the planner's override rules.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "gemm/dispatch.hpp"
#include "gemm/persistent_walk.hpp"
#include "gemm/planner.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"

namespace weave {
namespace {

// Steps every CTA of a grid through the kernel's cluster walk (the functions gemm/kernel.cuh runs:
// cluster_pair_rows on the grouped order, persistent_item) and checks the pairing.
void check_cluster_walk(int m_blocks, int n_blocks, int group_rows, int split, int grid) {
  const std::string what = "m_blocks " + std::to_string(m_blocks) + " n_blocks " + std::to_string(n_blocks) +
                           " group_rows " + std::to_string(group_rows) + " split " + std::to_string(split) +
                           " grid " + std::to_string(grid);
  const int rows = gemm::cluster_pair_rows(m_blocks), groups = gemm::cluster_pair_rows(group_rows);
  const int tiles = rows * n_blocks, items = tiles * split;
  ASSERT_EQ(items % 2, 0) << what;
  std::vector<int> seen(static_cast<size_t>(items), 0);
  for (int c = 0; c < grid / 2; ++c) {
    const int cta0 = 2 * c, cta1 = 2 * c + 1;
    ASSERT_EQ(gemm::persistent_items_of(cta0, grid, items), gemm::persistent_items_of(cta1, grid, items))
        << what << ": cluster " << c << "'s CTAs take different item counts (one would wait forever for its peer's B)";
    for (int k = 0; k < gemm::persistent_items_of(cta0, grid, items); ++k) {
      const int i0 = gemm::persistent_item(cta0, k, grid), i1 = gemm::persistent_item(cta1, k, grid);
      ASSERT_EQ(i0 / tiles, i1 / tiles) << what << ": a pair across K splits";
      int m0, n0, m1, n1;
      gemm::grouped_tile_coords(i0 % tiles, rows, n_blocks, groups, m0, n0);
      gemm::grouped_tile_coords(i1 % tiles, rows, n_blocks, groups, m1, n1);
      ASSERT_EQ(n0, n1) << what << ": cluster " << c << " item " << k << " pairs two columns (no shared B)";
      ASSERT_EQ(m0 % 2, 0) << what;
      ASSERT_EQ(m1, m0 + 1) << what << ": cluster " << c << " item " << k;
      ASSERT_LT(m0, m_blocks) << what << ": a pair of two empty tiles";
      ++seen[static_cast<size_t>(i0)];
      ++seen[static_cast<size_t>(i1)];
    }
  }
  // Every item once: each real tile of each split, and the empty partners of an odd last row.
  for (int i = 0; i < items; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << what << ": item " << i;
}

TEST(GemmClusterWalk, PairsShareAColumnAndAdjacentRowsEveryTileOnce) {
  check_cluster_walk(1, 1, 8, 1, 2);     // one tile: its partner is the empty row below
  check_cluster_walk(3, 5, 8, 1, 132);   // odd rows, more CTAs than items
  check_cluster_walk(64, 56, 8, 1, 132); // 8192 x 7168 in 128x128 tiles
  check_cluster_walk(7, 9, 3, 2, 20);    // odd group, split-K
  std::mt19937 rng(20261207);
  for (int t = 0; t < 3000; ++t) {
    const int m = 1 + static_cast<int>(rng() % 40), n = 1 + static_cast<int>(rng() % 40);
    const int g = 1 + static_cast<int>(rng() % 16), s = 1 + static_cast<int>(rng() % 3);
    const int grid = 2 * (1 + static_cast<int>(rng() % 66));
    check_cluster_walk(m, n, g, s, grid);
  }
}

// The walk without the rounding (a negative control for the check above): an odd row count or
// odd group pairs tiles of different columns somewhere.
TEST(GemmClusterWalk, WithoutTheRoundingTheCheckFails) {
  const int m_blocks = 3, n_blocks = 4, group_rows = 3, grid = 4;
  bool split_column = false;
  const int tiles = m_blocks * n_blocks;
  for (int c = 0; c < grid / 2; ++c)
    for (int k = 0; k < gemm::persistent_items_of(2 * c + 1, grid, tiles); ++k) {
      int m0, n0, m1, n1;
      gemm::grouped_tile_coords(gemm::persistent_item(2 * c, k, grid), m_blocks, n_blocks, group_rows, m0, n0);
      gemm::grouped_tile_coords(gemm::persistent_item(2 * c + 1, k, grid), m_blocks, n_blocks, group_rows, m1, n1);
      split_column = split_column || n0 != n1;
    }
  EXPECT_TRUE(split_column);
}

GemmProblem fp8(int64_t m, int64_t n, int64_t k) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.mode = ScaleMode::kPtpc;
  return p;
}

std::vector<gemm::TileCandidate> with_clusters() {
  return {{128, 128, 128, 6, "t128", "f128", 1}, {256, 128, 128, 4, "t256", "f256", 1},
          {128, 128, 128, 6, "t128_c2", "", 2}, {256, 128, 128, 4, "t256_c2", "", 2}};
}

TEST(GemmPlanCluster, OnlyWhereAskedForOnAnEvenGridOfWholePairs) {
  const auto cands = with_clusters();
  // The planner's choice: no clusters (not measured faster yet).
  const GemmPlan plain = gemm::gemm_plan_tiles(fp8(4096, 7168, 2048), 132, {}, cands);
  EXPECT_EQ(plain.cluster, 1);
  EXPECT_EQ(plain.kernel.find("_c2"), std::string::npos);
  GemmPlanOverrides o;
  o.cluster = 1;
  EXPECT_EQ(gemm::gemm_plan_tiles(fp8(4096, 7168, 2048), 132, o, cands).kernel, plain.kernel);
  o.cluster = 2;
  const GemmPlan c2 = gemm::gemm_plan_tiles(fp8(4096, 7168, 2048), 132, o, cands);
  EXPECT_EQ(c2.cluster, 2);
  EXPECT_EQ(c2.kernel, plain.kernel + "_c2");  // the same tile rule over the cluster instances
  EXPECT_EQ(c2.grid, 132);
  EXPECT_NE(c2.reason.find("2-CTA clusters"), std::string::npos) << c2.reason;
  // 3 row blocks of 128: the pair walk covers 4 (an empty partner), so 4 x 2 items; grid even.
  o.block_m = 128;
  o.block_n = 128;
  const GemmPlan odd = gemm::gemm_plan_tiles(fp8(300, 256, 1024), 132, o, cands);
  EXPECT_EQ(odd.tiles, 6);
  EXPECT_EQ(odd.grid, 8);
  EXPECT_NE(odd.reason.find("empty tile"), std::string::npos) << odd.reason;
  // An odd SM count: whole pairs only.
  EXPECT_EQ(gemm::gemm_plan_tiles(fp8(8192, 8192, 1024), 133, o, cands).grid, 132);
  // No split-K twin of the cluster instances: the split rule does not split them.
  EXPECT_EQ(gemm::gemm_plan_tiles(fp8(256, 1024, 16384), 132, o, cands).split_k, 1);
}

TEST(GemmPlanCluster, RefusalsNameTheOverride) {
  const auto cands = with_clusters();
  auto refused = [&](const GemmPlanOverrides& o, int sms, std::vector<gemm::TileCandidate> c, Status status,
                     const std::string& needle) {
    try {
      gemm::gemm_plan_tiles(fp8(4096, 7168, 2048), sms, o, c);
      ADD_FAILURE() << "not refused: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), status) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  GemmPlanOverrides o;
  o.cluster = 3;
  refused(o, 132, cands, Status::kInvalidArgument, "override 'cluster'");
  o.cluster = 2;
  o.grid = 7;
  refused(o, 132, cands, Status::kInvalidArgument, "override 'grid' = 7: 2-CTA clusters");
  o.grid = 0;
  refused(o, 1, cands, Status::kInvalidArgument, "needs at least 2 SMs");
  refused(o, 132, {cands[0], cands[1]}, Status::kUnsupported, "no instance of 2-CTA clusters");
}

// The built table: every _c2 instance is a plain fp8 GEMM of 2-CTA clusters with 128-row tiles or
// more, and the public planner takes the tiled kernels (not the GEMV) where a cluster is forced.
TEST(GemmPlanCluster, BuiltInstancesAndThePublicPlanner) {
  int clustered = 0;
  for (const auto& i : gemm::gemm_instances()) {
    const bool named = std::string(i.name).find("_c2") != std::string::npos;
    EXPECT_EQ(named, i.cluster_m == 2) << i.name;
    if (i.cluster_m != 2) continue;
    ++clustered;
    EXPECT_TRUE(i.mode == ScaleMode::kPtpc || i.mode == ScaleMode::kBlockscale) << i.name;
    EXPECT_GE(i.block_m, 128) << i.name;
    EXPECT_EQ(gemm::find_gemm_instance(i.mode, i.out_dtype, i.epilogue, i.block_m, i.block_n, i.scale_layout, 2), &i);
  }
  if (clustered == 0) GTEST_SKIP() << "no cluster instances in this build (WEAVE_GEMM_KERNELS narrowed)";
  GemmPlanOverrides o;
  o.cluster = 2;
  const GemmPlan p = gemm_plan(fp8(4, 7168, 2048), 132, o);
  EXPECT_FALSE(p.gemv);
  EXPECT_EQ(p.cluster, 2);
  EXPECT_NE(p.kernel.find("_c2"), std::string::npos) << p.kernel;
  GemmProblem raw = fp8(4096, 7168, 2048);
  raw.mode = ScaleMode::kBlockscale;
  raw.scale_layout = ScaleLayout::kMnMajor;
  EXPECT_EQ(gemm_plan(raw, 132, o).cluster, 2);
  GemmProblem bf = fp8(4096, 7168, 2048);
  bf.mode = ScaleMode::kBF16;
  try {
    gemm_plan(bf, 132, o);
    ADD_FAILURE() << "bf16 has no cluster instance";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported) << e.what();
  }
}

}  // namespace
}  // namespace weave
