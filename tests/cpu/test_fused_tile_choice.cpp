// The fused operators' GEMM tile on the CPU (fused/tile_choice.hpp): every tile an op may choose
// has its fused and local instances built; GemmAllGather runs weave::Gemm's tile wherever the
// standalone planner does not split K; GemmAllReduce keeps its bands in whole, pipelined row
// blocks (GemmReduceScatter: whole-tile bands); the window's staging holds the largest band of
// every tile at every m; a forced tile that is not built is refused naming the built ones.
#include <gtest/gtest.h>

#include <random>

#include "fused/all_gather/plan.hpp"
#include "fused/all_reduce/plan.hpp"
#include "fused/tile_choice.hpp"
#include "gemm/dispatch.hpp"
#include "support/expect_error.hpp"

using namespace weave;

namespace {

struct Quant {
  ScaleMode mode;
  ScaleLayout layout;
  DType out;
};
constexpr Quant kAgQuants[] = {{ScaleMode::kBF16, ScaleLayout::kRaw, DType::kBF16},
                               {ScaleMode::kBF16, ScaleLayout::kRaw, DType::kF32},
                               {ScaleMode::kPtpc, ScaleLayout::kRaw, DType::kBF16},
                               {ScaleMode::kBlockscale, ScaleLayout::kRaw, DType::kBF16},
                               {ScaleMode::kBlockscale, ScaleLayout::kMnMajor, DType::kBF16},
                               {ScaleMode::kMxfp8, ScaleLayout::kRaw, DType::kBF16},
                               {ScaleMode::kMxfp8, ScaleLayout::kPacked, DType::kBF16}};

GemmAllGatherConfig ag_config(const Quant& q, int64_t n, int64_t k, int64_t m_max) {
  GemmAllGatherConfig c;
  c.n = n;
  c.k = k;
  c.m_max = m_max;
  c.quant = q.mode;
  c.scale_layout = q.layout;
  c.out_dtype = q.out;
  return c;
}

GemmAllReduceConfig ar_config(const Quant& q, int64_t n, int64_t k, int64_t m_max) {
  GemmAllReduceConfig c;
  c.n = n;
  c.k = k;
  c.m_max = m_max;
  c.quant = q.mode;
  c.scale_layout = q.layout;
  return c;
}

}  // namespace

// Every candidate tile has both instances (the op looks them up once and fails construction
// otherwise); the full build has the planner's tiles for each mode, mxfp8 its one.
TEST(FusedTileChoice, EveryCandidateHasItsFusedAndLocalInstance) {
  for (const Quant& q : kAgQuants) {
    const GemmAllGatherConfig ag = ag_config(q, 7168, 2048, 4096);
    const auto ag_tiles = fused::gag_tile_candidates(ag);
    for (const auto& t : ag_tiles) {
      EXPECT_NE(fused::gag_fused_kernel(ag, t.block_m, t.block_n), nullptr) << t.kernel;
      EXPECT_NE(gemm::find_gemm_instance(q.mode, q.out, gemm::EpilogueKind::kStoreLocal, t.block_m, t.block_n,
                                         gemm::instance_scale_layout(q.mode, q.layout)),
                nullptr)
          << t.kernel;
    }
    EXPECT_EQ(ag_tiles.size(), gemm::gemm_tile_candidates(GemmProblem{.m = 4096, .n = 7168, .k = 2048, .mode = q.mode,
                                                                      .scale_layout = q.layout, .out_dtype = q.out})
                                   .size())
        << "GemmAllGather: every local tile has its fused twin (" << fused::fused_tiles_list(ag_tiles) << ")";
    if (q.out != DType::kBF16) continue;
    const GemmAllReduceConfig ar = ar_config(q, 7168, 2048, 4096);
    const auto ar_tiles = fused::gar_tile_candidates(ar);
    for (const auto& t : ar_tiles) EXPECT_NE(fused::gar_fused_kernel(ar, t.block_m, t.block_n), nullptr) << t.kernel;
    EXPECT_GE(ar_tiles.size(), q.mode == ScaleMode::kMxfp8 ? 1u : 4u) << fused::fused_tiles_list(ar_tiles);
  }
}

// GemmAllGather's GEMM leg at weave::Gemm's tile: wherever the standalone planner (on the op's CTAs)
// runs the tiles without a K split, the op runs its tile; where it splits K, the op runs the tile
// the rule picks unsplit (the fused epilogue stores final tiles).
TEST(FusedTileChoice, AllGatherRunsTheStandaloneTileWhereItDoesNotSplitK) {
  std::mt19937_64 rng(41);
  int same = 0;
  for (int i = 0; i < 400; ++i) {
    const Quant& q = kAgQuants[rng() % std::size(kAgQuants)];
    const int64_t n = 128 * (1 + static_cast<int64_t>(rng() % 64)), k = 128 * (1 + static_cast<int64_t>(rng() % 64));
    const int64_t m = 33 + static_cast<int64_t>(rng() % 8000);
    const int ctas = 132 / (1 + static_cast<int>(rng() % 4));
    const GemmAllGatherConfig c = ag_config(q, n, k, 8192);
    const GemmPlan mine = fused::gag_tile_plan(c, m, ctas, fused::gag_tile_candidates(c));
    EXPECT_EQ(mine.split_k, 1);
    EXPECT_EQ(mine.grid, std::min<int64_t>(mine.tiles, ctas));
    GemmProblem p{.m = m, .n = n, .k = k, .mode = q.mode, .scale_layout = q.layout, .out_dtype = q.out};
    GemmPlanOverrides o;
    if (q.mode == ScaleMode::kMxfp8) o.mx_route = MxRoute::kNative;
    if (q.mode == ScaleMode::kBlockscale && q.layout == ScaleLayout::kRaw) o.scale_a_route = ScaleARoute::kAsGiven;
    const GemmPlan alone = gemm_plan(p, ctas, o);
    if (alone.gemv || alone.split_k > 1) continue;
    EXPECT_EQ(mine.block_m, alone.block_m) << "m " << m << " n " << n << " k " << k << " ctas " << ctas << ": " << alone.reason;
    EXPECT_EQ(mine.block_n, alone.block_n) << "m " << m << " n " << n << " k " << k << " ctas " << ctas;
    ++same;
  }
  EXPECT_GT(same, 200) << "most cases must compare";
}

// GemmAllReduce: the tile's fused schedule cuts every band into kGarMinBandChunks chunks where
// some candidate's does (else one the op may run), unless every such tile costs the GEMM more than
// kGarPipelinedTileMaxCost times the planner's free pick; 64-row tiles only at
// m <= 128; GemmReduceScatter's bands whole tiles wherever its fused mode can run m. Split and
// fused plan the same tile (one function of m).
TEST(FusedTileChoice, AllReduceKeepsItsBandsPipelined) {
  std::mt19937_64 rng(42);
  int pipelined = 0;
  for (int i = 0; i < 2000; ++i) {
    const Quant& q = kAgQuants[(rng() % 2 == 0) ? 0 : 2 + rng() % 5];
    const int world = 2 + static_cast<int>(rng() % 7);
    const bool rs = rng() % 3 == 0;
    int64_t m = 1 + static_cast<int64_t>(rng() % 16384);
    if (rs) m = std::max<int64_t>(world, m / world * world);
    const int ctas = 132 / world;
    const GemmAllReduceConfig c = ar_config(q, 7168, 2048, 16384);
    const auto cands = fused::gar_tile_candidates(c);
    const auto leg = rs ? fused::ArLeg::kReduceScatter : fused::ArLeg::kAllReduce;
    const GemmPlan t = fused::gar_tile_plan(c, world, m, ctas, cands, {}, leg);
    const std::string at = std::string(to_string(q.mode)) + " W" + std::to_string(world) + " m " + std::to_string(m) +
                           (rs ? " (reduce-scatter)" : "") + ": " + std::to_string(t.block_m) + "x" +
                           std::to_string(t.block_n);
    const bool whole = rs && fused::grs_fused_fits(m, world);
    auto chunks = [&](int bm, int bn) -> int64_t {
      if (bm == 64 && m > gemm::kHalfRowTileMaxM) return 0;
      if (whole && m % (int64_t(world) * bm) != 0) return 0;
      const fused::ArSchedule s = fused::ar_schedule(m, c.n, bm, bn, world, 0, fused::gar_chunks(c, m, ctas, bm, bn));
      return s.max_chunks;
    };
    const GemmProblem p{.m = m, .n = c.n, .k = c.k, .mode = q.mode, .scale_layout = q.layout, .out_dtype = DType::kBF16};
    auto cost = [&](const gemm::TileCandidate& x) { return gemm::tile_cost(p, ctas, x.block_m, x.block_n); };
    int64_t best = 0;
    double free_cost = 1e300;  // the planner's pick: the least cost among the tiles it offers at m
    for (const auto& cand : cands) {
      best = std::max(best, std::min<int64_t>(chunks(cand.block_m, cand.block_n), fused::kGarMinBandChunks));
      const bool allowed = !whole || m % (int64_t(world) * cand.block_m) == 0;
      if (allowed && (cand.block_m != 64 || m <= gemm::kHalfRowTileMaxM)) free_cost = std::min(free_cost, cost(cand));
    }
    const gemm::TileCandidate picked{.block_m = t.block_m, .block_n = t.block_n};
    EXPECT_LE(cost(picked), fused::kGarPipelinedTileMaxCost * free_cost * (1 + 1e-9)) << at;
    if (best > 0 && chunks(t.block_m, t.block_n) < best) {
      for (const auto& cand : cands)  // passed over only where every pipelined tile costs too much
        if (chunks(cand.block_m, cand.block_n) >= best)
          EXPECT_GT(cost(cand), fused::kGarPipelinedTileMaxCost * free_cost) << at << " over " << cand.block_m << "x"
                                                                              << cand.block_n;
    } else {
      pipelined += best == fused::kGarMinBandChunks;
    }
    if (whole) EXPECT_EQ(m % (int64_t(world) * t.block_m), 0) << at;
    EXPECT_EQ(t.split_k, 1) << at;
  }
  EXPECT_GT(pipelined, 500) << "most cases must have a pipelined tile to keep";
}

// The staging slot holds the largest band any candidate tile makes at any m <= m_max.
TEST(FusedTileChoice, StagingHoldsTheLargestBandOfEveryTile) {
  std::mt19937_64 rng(43);
  for (int i = 0; i < 300; ++i) {
    const Quant& q = kAgQuants[(rng() % 2 == 0) ? 0 : 2 + rng() % 5];
    const int world = 1 + static_cast<int>(rng() % 8);
    const int64_t m_max = 1 + static_cast<int64_t>(rng() % 20000);
    GemmAllReduceConfig c = ar_config(q, 7168, 2048, m_max);
    c.mode = GemmAllReduceMode::kFused;
    WindowLayout layout;
    const fused::GarLayout g = fused::add_gar_regions(layout, c, world, 264);
    for (const auto& t : fused::gar_tile_candidates(c))
      for (int64_t m : {m_max, 1 + static_cast<int64_t>(rng() % m_max)}) {
        const fused::ArSchedule s = fused::ar_schedule(m, c.n, t.block_m, t.block_n, world, 0, 1);
        for (int d = 0; d < world; ++d) {
          const int64_t rows = std::min<int64_t>(int64_t(fused::ar_band_end(s, d)) * t.block_m, m) -
                               std::min<int64_t>(int64_t(fused::ar_band_begin(s, d)) * t.block_m, m);
          EXPECT_LE(rows, g.band_cap_rows) << "tile " << t.block_m << " W" << world << " m " << m;
        }
      }
  }
}

TEST(FusedTileChoice, AForcedTileMustBeBuilt) {
  const GemmAllGatherConfig ag = ag_config(kAgQuants[5], 7168, 2048, 4096);  // mxfp8: 128x128 only
  const std::string why =
      test::error_of([&] { fused::gag_tile_plan(ag, 512, 132, fused::gag_tile_candidates(ag), {256, 128}); });
  EXPECT_NE(why.find("forced fused tile 256x128: not built"), std::string::npos) << why;
  EXPECT_NE(why.find("(built: 128x128)"), std::string::npos) << why;
  const GemmAllReduceConfig ar = ar_config(kAgQuants[0], 7168, 2048, 4096);
  const GemmPlan forced = fused::gar_tile_plan(ar, 2, 4096, 132, fused::gar_tile_candidates(ar), {64, 128});
  EXPECT_EQ(forced.block_m, 64);  // a forced tile runs at any m
  EXPECT_EQ(forced.split_k, 1);
}

TEST(FusedTileChoice, KernelNamesOnOneLine) {
  EXPECT_EQ(fused::kernel_names_line({}), "");
  EXPECT_EQ(fused::kernel_names_line({"sm90_gemm_bf16_bf16_allgather_128x128x64"}),
            "sm90_gemm_bf16_bf16_allgather_128x128x64");
  EXPECT_EQ(fused::kernel_names_line({"sm90_x_allgather_128x128x64", "sm90_x_allgather_64x128x64"}),
            "sm90_x_allgather_{128x128x64,64x128x64}");
  EXPECT_EQ(fused::kernel_names_line({"a_1", "b_2"}), "a_1,b_2");
}
