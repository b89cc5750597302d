// The GEMM planner and problem validation, on the CPU: the tile rule on explicit candidate lists,
// every refusal rule by name, overrides, and the registered instance table.
#include <gtest/gtest.h>

#include <string>

#include "gemm/dispatch.hpp"
#include "gemm/planner.hpp"
#include "gemv/gemv.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"

namespace weave {
namespace {

GemmProblem problem(int64_t m, int64_t n, int64_t k, ScaleMode mode = ScaleMode::kBF16, DType out = DType::kBF16) {
  GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.mode = mode;
  p.out_dtype = out;
  return p;
}

std::vector<gemm::TileCandidate> three_tiles() {
  return {{128, 128, 64, 6, "t128x128"}, {128, 256, 64, 4, "t128x256"}, {256, 128, 64, 4, "t256x128"}};
}

bool mentions(const std::vector<std::string>& v, const std::string& needle) {
  for (const auto& s : v)
    if (s.find(needle) != std::string::npos) return true;
  return false;
}

TEST(GemmPlanValidate, AcceptsWellFormedProblems) {
  EXPECT_EQ(gemm_validate_problem(problem(1, 8, 8)), "");
  EXPECT_EQ(gemm_validate_problem(problem(1000, 7168, 640, ScaleMode::kPtpc)), "");
  EXPECT_EQ(gemm_validate_problem(problem(129, 136, 128, ScaleMode::kBlockscale, DType::kF32)), "");
  EXPECT_TRUE(gemm::gemm_problem_violations(problem(7, 4, 16, ScaleMode::kPtpc, DType::kF32)).empty());
}

TEST(GemmPlanValidate, NamesEveryBrokenRule) {
  auto v = gemm::gemm_problem_violations(problem(0, 0, 0));
  EXPECT_TRUE(mentions(v, "m must be >= 1"));
  EXPECT_TRUE(mentions(v, "n must be >= 1"));
  EXPECT_TRUE(mentions(v, "k must be >= 1"));

  v = gemm::gemm_problem_violations(problem(64, 12, 100));  // bf16: k % 8, n % 8 (bf16 out)
  EXPECT_EQ(v.size(), 2u);
  EXPECT_TRUE(mentions(v, "k must be a multiple of 8"));
  EXPECT_TRUE(mentions(v, "n must be a multiple of 8"));

  v = gemm::gemm_problem_violations(problem(64, 6, 24, ScaleMode::kPtpc, DType::kF32));  // e4m3: k % 16; fp32 n % 4
  EXPECT_TRUE(mentions(v, "k must be a multiple of 16"));
  EXPECT_TRUE(mentions(v, "n must be a multiple of 4"));

  v = gemm::gemm_problem_violations(problem(64, 256, 192, ScaleMode::kBlockscale));
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("multiple of 128 for blockscale"), std::string::npos);

  auto p = problem(64, 256, 256, ScaleMode::kPtpc);
  p.scale_layout = ScaleLayout::kPacked;
  EXPECT_TRUE(mentions(gemm::gemm_problem_violations(p), "applies to mode mxfp8 only"));

  p = problem(64, 256, 256, ScaleMode::kPtpc, DType::kE4M3);
  EXPECT_TRUE(mentions(gemm::gemm_problem_violations(p), "out_dtype must be bf16 or fp32"));

  p = problem(int64_t{1} << 31, 256, 256);
  EXPECT_TRUE(mentions(gemm::gemm_problem_violations(p), "< 2^31"));

  // mxfp8 is not a tiled-kernel mode; at m > 32 nothing takes it.
  p = problem(64, 256, 256, ScaleMode::kMxfp8);
  EXPECT_TRUE(mentions(gemm::gemm_problem_violations(p), "mxfp8"));
  EXPECT_NE(gemm_validate_problem(p), "");
}

TEST(GemmPlanValidate, JoinsAllReasonsAndThrowsFromPlan) {
  const std::string r = gemm_validate_problem(problem(0, 12, 100));
  EXPECT_NE(r.find("m must be"), std::string::npos);
  EXPECT_NE(r.find("k must be"), std::string::npos);
  EXPECT_THROW(gemm_plan(problem(0, 12, 100), 132), Error);
  try {
    gemm_plan(problem(64, 256, 192, ScaleMode::kBlockscale), 132);
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("multiple of 128"), std::string::npos);
  }
}

TEST(GemmPlanTiles, LargestTileThatCoversTheSms) {
  // 8192^2: every tile covers 132 SMs; the largest area wins, tie (no waste either way) -> wider N.
  auto plan = gemm::gemm_plan_tiles(problem(8192, 8192, 8192), 132, {}, three_tiles());
  EXPECT_EQ(plan.block_m, 128);
  EXPECT_EQ(plan.block_n, 256);
  EXPECT_EQ(plan.tiles, 64 * 32);
  EXPECT_EQ(plan.grid, 132);
  EXPECT_EQ(plan.kernel, "t128x256");
  EXPECT_NE(plan.reason.find("cover"), std::string::npos);

  // 2048^2: the 32K-element tiles give 128 < 132 tiles; 128x128 gives 256.
  plan = gemm::gemm_plan_tiles(problem(2048, 2048, 7168), 132, {}, three_tiles());
  EXPECT_EQ(plan.block_m, 128);
  EXPECT_EQ(plan.block_n, 128);
  EXPECT_EQ(plan.tiles, 256);
  EXPECT_EQ(plan.grid, 132);
}

TEST(GemmPlanTiles, TieOnAreaGoesToLessPadding) {
  // M = 384 (3 x 128), N = 8192: 128x256 wastes nothing, 256x128 pads 128 rows.
  auto plan = gemm::gemm_plan_tiles(problem(384, 8192, 1024), 32, {}, three_tiles());
  EXPECT_EQ(plan.block_m, 128);
  EXPECT_EQ(plan.block_n, 256);
  // Transposed: N = 384 -> 256x128 wastes nothing.
  plan = gemm::gemm_plan_tiles(problem(8192, 384, 1024), 32, {}, three_tiles());
  EXPECT_EQ(plan.block_m, 256);
  EXPECT_EQ(plan.block_n, 128);
}

TEST(GemmPlanTiles, NoTileCoversTheSmsTakesTheLargestGrid) {
  // M = 64, N = 8192: 32 / 64 / 64 tiles, all < 132: the largest grid is 64 tiles; of the two,
  // 128x128 pads less than 256x128.
  auto plan = gemm::gemm_plan_tiles(problem(64, 8192, 1280), 132, {}, three_tiles());
  EXPECT_EQ(plan.tiles, 64);
  EXPECT_EQ(plan.block_m, 128);
  EXPECT_EQ(plan.block_n, 128);
  EXPECT_EQ(plan.grid, 64);
  EXPECT_NE(plan.reason.find("largest grid"), std::string::npos);
  // M = 1 is planned like any other M (TMA zero-fills the missing rows).
  plan = gemm::gemm_plan_tiles(problem(1, 256, 64), 132, {}, three_tiles());
  EXPECT_EQ(plan.tiles, 2);
  EXPECT_EQ(plan.grid, 2);
}

TEST(GemmPlanTiles, OverridesAreHonouredOrRefused) {
  GemmPlanOverrides o;
  o.block_m = 256;
  o.block_n = 128;
  o.grid = 7;
  auto plan = gemm::gemm_plan_tiles(problem(8192, 8192, 8192), 132, o, three_tiles());
  EXPECT_EQ(plan.block_m, 256);
  EXPECT_EQ(plan.grid, 7);
  EXPECT_NE(plan.reason.find("override"), std::string::npos);

  o = {};
  o.block_m = 64;
  o.block_n = 64;
  try {
    gemm::gemm_plan_tiles(problem(8192, 8192, 8192), 132, o, three_tiles());
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("128x256"), std::string::npos) << e.what();  // lists what is built
  }
  o = {};
  o.block_m = 128;  // block_n missing
  EXPECT_THROW(gemm::gemm_plan_tiles(problem(256, 256, 64), 132, o, three_tiles()), Error);
  o = {};
  o.split_k = 2;
  EXPECT_THROW(gemm::gemm_plan_tiles(problem(256, 256, 64), 132, o, three_tiles()), Error);
  o = {};
  o.grid = -1;
  EXPECT_THROW(gemm::gemm_plan_tiles(problem(256, 256, 64), 132, o, three_tiles()), Error);
  EXPECT_THROW(gemm::gemm_plan_tiles(problem(256, 256, 64), 0, {}, three_tiles()), Error);
  try {
    gemm::gemm_plan_tiles(problem(256, 256, 64), 132, {}, {});
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kUnsupported);
  }
}

TEST(GemmPlanInstances, TableIsConsistent) {
  const auto& all = gemm::gemm_instances();
  if (all.empty()) GTEST_SKIP() << "no GEMM instances in this build (WEAVE_GEMM_KERNELS narrowed to none)";
  for (const auto& i : all) {
    const std::string name = i.name;
    const std::string tile = std::to_string(i.block_m) + "x" + std::to_string(i.block_n) + "x" + std::to_string(i.block_k);
    EXPECT_NE(name.find(tile), std::string::npos) << name;
    EXPECT_NE(name.find(std::string("_") + std::string(to_string(i.out_dtype)) + "_store"), std::string::npos) << name;
    EXPECT_GE(i.stages, 2) << name;
    EXPECT_LE(i.smem_bytes, 232448) << name;
    EXPECT_EQ(i.threads, 384) << name;
    EXPECT_EQ(i.block_k * (i.mode == ScaleMode::kBF16 ? 2 : 1), 128) << name;
    EXPECT_NE(i.launch, nullptr);
    EXPECT_NE(i.prepare, nullptr);
    EXPECT_EQ(gemm::find_gemm_instance(i.mode, i.out_dtype, i.epilogue, i.block_m, i.block_n), &i);
    if (i.mode == ScaleMode::kBlockscale) EXPECT_EQ(i.block_n, 128) << "blockscale tiles cover one B scale block";
  }
}

TEST(GemmPlanInstances, PlanUsesBuiltKernelsAndGemvForDecode) {
  auto p = problem(8192, 7168, 2048, ScaleMode::kPtpc);
  if (gemm::gemm_tile_candidates(p).empty()) GTEST_SKIP() << "ptpc/bf16 instances not built";
  auto plan = gemm_plan(p, 132);
  EXPECT_FALSE(plan.gemv);
  EXPECT_NE(gemm::find_gemm_instance(p.mode, p.out_dtype, gemm::EpilogueKind::kStoreLocal, plan.block_m, plan.block_n),
            nullptr);
  EXPECT_NE(plan.kernel.find("ptpc"), std::string::npos);

  // Decode: m <= 32 goes to the GEMV when it implements the problem, unless a tile is forced.
  p = problem(16, 7168, 2048, ScaleMode::kBF16);
  if (detail::gemv_unsupported_reason(p).empty()) {
    plan = gemm_plan(p, 132);
    EXPECT_TRUE(plan.gemv);
    EXPECT_EQ(plan.kernel, "gemv");
    GemmPlanOverrides o;
    o.block_m = 128;
    o.block_n = 128;
    plan = gemm_plan(p, 132, o);
    EXPECT_FALSE(plan.gemv);
  }
  p = problem(33, 7168, 2048, ScaleMode::kBF16);
  EXPECT_FALSE(gemm_plan(p, 132).gemv);
}

}  // namespace
}  // namespace weave

namespace weave {
namespace {
TEST(GemmPlanTiles, GroupRowsDefaultAndOverride) {
  auto plan = gemm::gemm_plan_tiles(problem(4096, 4096, 4096), 132, {}, three_tiles());
  EXPECT_EQ(plan.group_rows, 8);
  GemmPlanOverrides o;
  o.group_rows = 16;
  EXPECT_EQ(gemm::gemm_plan_tiles(problem(4096, 4096, 4096), 132, o, three_tiles()).group_rows, 16);
  o.group_rows = -1;
  EXPECT_THROW(gemm::gemm_plan_tiles(problem(4096, 4096, 4096), 132, o, three_tiles()), Error);
}
}  // namespace
}  // namespace weave
