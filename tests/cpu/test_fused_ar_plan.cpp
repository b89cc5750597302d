// GemmAllReduce's pure parts on the CPU: the band/round schedule the fused kernel walks (every tile
// exactly once per rank, chunks never empty, counts that complete each chunk), a discrete-event
// simulation of W ranks x G persistent CTAs running that schedule with the kernel's waits and its
// deferred publication (it must always finish: no deadlock at any M, W, grid or chunk count), the
// window layout, the planner and validation; fused-ce's copy-stream walk (every chunk once per leg,
// and a chunk-level simulation of the ranks' GEMMs, trigger lanes and serial copy streams that must
// always finish, with a reordered walk as its negative control).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <string>

#include <unistd.h>

#include "fused/all_reduce/pull.hpp"
#include "fused/all_reduce/schedule.hpp"
#include "fused/all_reduce/tail.hpp"
#include "fused/all_reduce/plan.hpp"
#include "fused/model_rates.hpp"
#include "gemm/persistent_walk.hpp"
#include "support/expect_error.hpp"
#include "support/scoped_file.hpp"
#include "weave/gemm_all_reduce.hpp"

using namespace weave;

namespace {

struct Shape {
  int64_t m, n;
  int world, chunks;
};

std::vector<Shape> random_shapes(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Shape> v;
  for (int i = 0; i < count; ++i)
    v.push_back({1 + static_cast<int64_t>(rng() % 20000), 8 * (1 + static_cast<int64_t>(rng() % 600)),
                 1 + static_cast<int>(rng() % 8), 1 + static_cast<int>(rng() % 20)});
  return v;
}

// The layer the plan and layout tests size at: N = 7168, K_r = 2048, m_max = 16384 (TP2 of a
// 7168-wide model), bf16 unless the test sets quant and mode.
GemmAllReduceConfig model_layer() {
  GemmAllReduceConfig c;
  c.n = 7168;
  c.k = 2048;
  c.m_max = 16384;
  return c;
}

}  // namespace

TEST(FusedArSchedule, EveryTileOnceNoEmptyChunkAndCountsCompleteEachChunk) {
  for (const Shape& sh : random_shapes(600, 11)) {
    for (int r = 0; r < sh.world; ++r) {
      const fused::ArSchedule s = fused::ar_schedule(sh.m, sh.n, 128, 128, sh.world, r, sh.chunks);
      ASSERT_GE(s.max_chunks, 1);
      ASSERT_LE(s.max_chunks, comm::kMaxChunks);
      ASSERT_LE(s.segments, fused::kArMaxSegments);
      std::set<std::pair<int, int>> seen;
      const int tiles = s.m_blocks * s.n_blocks;
      for (int t = 0; t < tiles; ++t) {
        int mb = -1, nb = -1;
        fused::ar_tile_coords(s, t, mb, nb);
        ASSERT_TRUE(mb >= 0 && mb < s.m_blocks && nb >= 0 && nb < s.n_blocks) << "m " << sh.m << " tile " << t;
        ASSERT_TRUE(seen.insert({mb, nb}).second) << "m " << sh.m << " W" << sh.world << " rank " << r << ": tile ("
                                                  << mb << ", " << nb << ") twice";
      }
      EXPECT_EQ(static_cast<int>(seen.size()), tiles);
      uint64_t units = 0;
      for (int d = 0; d < sh.world; ++d) {
        EXPECT_LE(fused::ar_chunks_of(s, d), s.max_chunks) << "band 0 is the largest";
        for (int c = 0; c < fused::ar_chunks_of(s, d); ++c) {
          ASSERT_GT(fused::ar_chunk_rows(s, d, c), 0) << "empty chunk " << c << " of band " << d;
          units += fused::ar_chunk_units(s, d, c);
        }
      }
      EXPECT_EQ(units, 2ull * tiles);
      // Every row block maps to its band and to a chunk of it.
      for (int mb = 0; mb < s.m_blocks; ++mb) {
        const int d = fused::ar_band_of(s, mb), c = fused::ar_chunk_of(s, mb);
        ASSERT_TRUE(mb >= fused::ar_band_begin(s, d) && mb < fused::ar_band_end(s, d));
        ASSERT_TRUE(c >= 0 && c < fused::ar_chunks_of(s, d));
      }
    }
  }
}

namespace {

// W ranks x G CTAs, each CTA walking its rank's schedule with the kernel's own persistent walk
// (gemm/persistent_walk.hpp: items blockIdx, +G, ...). A remote tile needs nothing; its count
// lands when its CTA retires it, at the start of the CTA's next tile's epilogue (or at the CTA's
// end): the kernel's deferred tile_stored. An own tile
// of chunk c can be summed only once every peer's count of (band r, chunk c) is complete. One step
// lets every CTA that can, advance by one tile. Returns false on a step without progress (a
// deadlock). retire_first = false is the negative control: the epilogue waits for the partials
// BEFORE retiring (publishing) the previous tile.
bool simulate(const Shape& sh, int grid, bool retire_first) {
  const int w = sh.world;
  std::vector<fused::ArSchedule> sch;
  for (int r = 0; r < w; ++r) sch.push_back(fused::ar_schedule(sh.m, sh.n, 128, 128, w, r, sh.chunks));
  const int tiles = sch[0].m_blocks * sch[0].n_blocks;
  const int g = std::min(grid, tiles);
  // landed[d][c][src]: tiles of (band d, chunk c) from src whose counts landed.
  std::vector<std::vector<std::vector<int>>> landed(w, std::vector<std::vector<int>>(comm::kMaxChunks, std::vector<int>(w, 0)));
  struct Cta {
    int item = 0;         // the next item (the kernel's loop variable)
    int pending_mb = -1;  // the tile stored but not yet counted
  };
  std::vector<std::vector<Cta>> ctas(w, std::vector<Cta>(g));
  for (auto& rc : ctas)
    for (int b = 0; b < g; ++b) rc[b].item = gemm::persistent_first_item(b);
  auto retire = [&](int r, Cta& c) {
    if (c.pending_mb < 0) return false;
    landed[fused::ar_band_of(sch[r], c.pending_mb)][fused::ar_chunk_of(sch[r], c.pending_mb)][r] += 1;
    c.pending_mb = -1;
    return true;
  };
  auto complete = [&](int d, int c, int src) {
    return landed[d][c][src] == fused::ar_chunk_rows(sch[0], d, c) * sch[0].n_blocks;
  };
  int remaining = w * tiles;
  bool pending = true;
  while (remaining > 0 || pending) {
    bool progress = false;
    pending = false;
    for (int r = 0; r < w; ++r)
      for (int b = 0; b < g; ++b) {
        Cta& c = ctas[r][b];
        const int pos = c.item;
        if (pos >= tiles) {
          progress |= retire(r, c);  // finish(): the last tile is retired at the CTA's end
          continue;
        }
        int mb, nb;
        fused::ar_tile_coords(sch[r], pos, mb, nb);
        if (retire_first) progress |= retire(r, c);
        if (fused::ar_band_of(sch[r], mb) == r) {
          bool ready = true;
          for (int q = 0; q < w; ++q)
            if (q != r) ready &= complete(r, fused::ar_chunk_of(sch[r], mb), q);
          if (!ready) {
            pending |= c.pending_mb >= 0;
            continue;
          }
        }
        if (!retire_first) retire(r, c);
        c.pending_mb = mb;
        c.item = gemm::persistent_next_item(c.item, g);
        --remaining;
        progress = true;
      }
    for (auto& rc : ctas)
      for (auto& c : rc) pending |= c.pending_mb >= 0;
    if (!progress) return false;
  }
  return true;
}

}  // namespace

// The persistent walk the kernel and the simulation above step with (gemm/persistent_walk.hpp):
// stepping from the first item equals the closed form b + k * G, the CTAs together take every
// item exactly once, each CTA's last item is the one persistent_last_item names, and
// persistent_items_of counts the steps. A walk that skipped or repeated an item would fail here:
// the negative control steps by G + 1 and must be caught.
TEST(PersistentWalk, SteppingIsTheClosedFormAndCoversEveryItemOnce) {
  int walks = 0;
  for (int num_items : {0, 1, 2, 7, 64, 131, 132, 133, 1000, 4481})
    for (int grid : {1, 2, 3, 33, 66, 132, 200}) {
      std::vector<int> taken(num_items, 0);
      for (int b = 0; b < grid; ++b) {
        int k = 0, last = -1;
        for (int item = gemm::persistent_first_item(b); item < num_items;
             item = gemm::persistent_next_item(item, grid), ++k) {
          ASSERT_EQ(item, gemm::persistent_item(b, k, grid)) << "CTA " << b << " step " << k;
          ++taken[item];
          if (gemm::persistent_last_item(item, grid, num_items)) {
            EXPECT_EQ(last, -1) << "two last items of CTA " << b;
            last = item;
          }
        }
        EXPECT_EQ(k, gemm::persistent_items_of(b, grid, num_items)) << "CTA " << b << " G " << grid;
        EXPECT_EQ(last >= 0, k > 0) << "CTA " << b << ": a CTA with items has exactly one last item";
        if (k > 0) EXPECT_EQ(last, gemm::persistent_item(b, k - 1, grid));
        ++walks;
      }
      for (int i = 0; i < num_items; ++i)
        ASSERT_EQ(taken[i], 1) << "item " << i << " of " << num_items << " taken " << taken[i] << " times at G " << grid;
    }
  EXPECT_GT(walks, 0);
  // Negative control: the same coverage count over a walk that steps by G + 1 misses items (item G,
  // wherever there are more items than CTAs).
  int caught = 0, cases = 0;
  for (int num_items : {64, 133, 1000})
    for (int grid : {2, 3, 33, 63}) {
      std::vector<int> taken(num_items, 0);
      for (int b = 0; b < grid; ++b)
        for (int item = gemm::persistent_first_item(b); item < num_items;
             item = gemm::persistent_next_item(item, grid) + 1)
          ++taken[item];
      bool once = true;
      for (int t : taken) once &= t == 1;
      caught += !once;
      ++cases;
    }
  EXPECT_EQ(caught, cases) << "a walk stepping by G + 1 passed the coverage count";
}

TEST(FusedArSchedule, SimulatedRanksAndCtasAlwaysFinish) {
  auto shapes = random_shapes(300, 23);
  shapes.push_back({16384, 7168, 8, 16});
  shapes.push_back({8192, 7168, 2, 13});
  shapes.push_back({1, 512, 8, 1});
  int deadlocks_without_retire_first = 0;
  for (const Shape& sh : shapes)
    for (int grid : {1, 3, 32, 132}) {
      EXPECT_TRUE(simulate(sh, grid, true)) << "deadlock at m " << sh.m << " n " << sh.n << " W" << sh.world << " grid "
                                            << grid << " chunks " << sh.chunks;
      deadlocks_without_retire_first += sh.world > 1 && !simulate(sh, grid, false);
    }
  // Negative control: waiting for the partials before publishing the previous tile deadlocks.
  EXPECT_GT(deadlocks_without_retire_first, 0);
  std::printf("  negative control (wait before retiring): %d of %zu cases deadlock\n", deadlocks_without_retire_first,
              4 * shapes.size());
}

TEST(FusedArLayout, RegionsAtCapacityByMode) {
  GemmAllReduceConfig c = model_layer();
  for (auto mode : {GemmAllReduceMode::kAuto, GemmAllReduceMode::kFused, GemmAllReduceMode::kSplitLsa,
                    GemmAllReduceMode::kGemmOnly, GemmAllReduceMode::kFusedCe}) {
    c.mode = mode;
    WindowLayout layout;
    const fused::GarLayout g = fused::add_gar_regions(layout, c, 2, 264);
    EXPECT_EQ(g.has_staging, mode == GemmAllReduceMode::kAuto || mode == GemmAllReduceMode::kFused ||
                                 mode == GemmAllReduceMode::kFusedCe);
    EXPECT_EQ(g.has_pull, mode == GemmAllReduceMode::kFusedCe);  // the copy streams' words, fused-ce only
    if (g.has_pull) {
      const Region* pull = layout.find("gar.pull");
      ASSERT_NE(pull, nullptr);
      EXPECT_EQ(pull->kind, RegionKind::kControl) << "local words: no peer writes them";
      EXPECT_GE(pull->bytes, fused::kArPullBytes);
    }
    EXPECT_EQ(g.has_split, mode == GemmAllReduceMode::kAuto || mode == GemmAllReduceMode::kSplitLsa);
    EXPECT_EQ(g.band_cap_rows, 8192);
    if (g.has_staging) EXPECT_GE(g.slot_stride, uint64_t(8192) * 7168 * 2);
    EXPECT_EQ(layout.total_bytes(), gemm_all_reduce_window_bytes(c, 2));
  }
}

TEST(FusedArPlan, AutoChoosesByWavesAndModelAndRespectsExplicitModes) {
  GemmAllReduceConfig c = model_layer();
  c.quant = ScaleMode::kBlockscale;
  const auto small = fused::gar_plan(c, 2, 128, 132, true, true);
  EXPECT_NE(small.mode, GemmAllReduceMode::kFused) << small.reason;
  const auto big = fused::gar_plan(c, 2, 8192, 132, true, true);
  EXPECT_EQ(big.mode, GemmAllReduceMode::kFused) << big.reason;
  // The planner's tile: 256x128 (blockscale's large tile) gives every band 16 row blocks, so it is kept.
  EXPECT_EQ(big.block_m, 256);
  EXPECT_EQ(big.block_n, 128);
  EXPECT_EQ(big.chunks, 6);  // floor(13.6 waves / 2) = 6 asked of a band of 16 row blocks: 3 each -> 6
  EXPECT_EQ(big.chunk_blocks, 3);
  EXPECT_EQ(big.rounds, 7);
  EXPECT_EQ(big.bytes_rs, int64_t(8192) * 7168 * 2 / 2);
  EXPECT_EQ(fused::gar_plan(c, 2, 8192, 132, false, true).mode, GemmAllReduceMode::kSplitLsa);
  EXPECT_EQ(fused::gar_plan(c, 1, 8192, 132, true, true).mode, GemmAllReduceMode::kGemmOnly);
  c.mode = GemmAllReduceMode::kSplitCe;
  EXPECT_EQ(fused::gar_plan(c, 2, 8192, 132, true, true).mode, GemmAllReduceMode::kSplitCe);
}

// Decode-sized M: auto takes decode (GEMV + LL all-reduce) where it was measured faster (bf16 and
// mxfp8 raw, m <= 16) and says why; elsewhere it says why not (ptpc, blockscale: measured slower;
// mxfp8 packed: the GEMV reads raw scales); at world 1 weave::Gemm's route (the GEMV at m <= 8,
// every quant; mxfp8 to 32); an explicit decode at m > 32 keeps its mode and says it cannot run
// (run() raises).
TEST(FusedArPlan, AutoTakesDecodeAtDecodeSizedM) {
  GemmAllReduceConfig c = model_layer();
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    c.quant = q;
    c.scale_layout = ScaleLayout::kRaw;
    for (int64_t m : {1, 16, 17, 32}) {
      const auto p = fused::gar_plan(c, 2, m, 132, true, true);
      const bool want = (q == ScaleMode::kBF16 || q == ScaleMode::kMxfp8) && m <= 16;
      EXPECT_EQ(p.mode == GemmAllReduceMode::kDecode, want) << to_string(q) << " m " << m << ": " << p.reason;
      EXPECT_NE(p.reason.find(want ? "decode GEMV" : "decode not taken: measured slower"), std::string::npos)
          << p.reason;
    }
    EXPECT_NE(fused::gar_plan(c, 2, 33, 132, true, true).mode, GemmAllReduceMode::kDecode) << to_string(q);
    for (int64_t m : {1, 8, 9, 32, 33}) {
      const auto one = fused::gar_plan(c, 1, m, 132, true, true);
      const bool gemv = m <= 8 || (q == ScaleMode::kMxfp8 && m <= 32);
      EXPECT_EQ(one.mode, gemv ? GemmAllReduceMode::kDecode : GemmAllReduceMode::kGemmOnly)
          << to_string(q) << " world 1 m " << m << ": " << one.reason;
      EXPECT_NE(one.reason.find(gemv ? "world 1: nothing to reduce; weave::Gemm's route" : "world 1: nothing to reduce"),
                std::string::npos) << one.reason;
    }
  }
  c.quant = ScaleMode::kMxfp8;
  c.scale_layout = ScaleLayout::kPacked;
  c.quant = ScaleMode::kBF16;  // the layout only matters to mxfp8: decode stays available
  EXPECT_EQ(fused::gar_plan(c, 2, 16, 132, true, true).mode, GemmAllReduceMode::kDecode);
  c.quant = ScaleMode::kMxfp8;
  EXPECT_NE(fused::gar_decode_unsupported_reason(c, 16).find("raw scales only"), std::string::npos);
  c.scale_layout = ScaleLayout::kRaw;
  c.mode = GemmAllReduceMode::kDecode;
  const auto big = fused::gar_plan(c, 2, 64, 132, true, true);
  EXPECT_EQ(big.mode, GemmAllReduceMode::kDecode);
  EXPECT_NE(big.reason.find("cannot run m = 64"), std::string::npos) << big.reason;
  WindowLayout layout;
  const fused::GarLayout g = fused::add_gar_regions(layout, c, 2, 64);
  EXPECT_TRUE(g.has_split) << "decode hosts the lsa all-reduce";
  EXPECT_FALSE(g.has_staging) << "decode never runs the fused kernel";
  EXPECT_EQ(parse_gemm_all_reduce_mode("decode"), GemmAllReduceMode::kDecode);
  EXPECT_EQ(to_string(GemmAllReduceMode::kDecode), "decode");
}

TEST(FusedArValidate, EveryRuleNamed) {
  GemmAllReduceConfig c;
  c.n = 7168;
  c.k = 2048;
  c.m_max = 1024;
  EXPECT_EQ(GemmAllReduce::validate(c, 2), "");
  EXPECT_NE(GemmAllReduce::validate(c, 0).find("world"), std::string::npos);
  auto d = c;
  d.n = 7170;
  EXPECT_NE(GemmAllReduce::validate(d, 2).find("multiple of 8"), std::string::npos);
  d = c;
  d.quant = ScaleMode::kBlockscale;
  d.scale_layout = ScaleLayout::kMnMajor;  // blockscale's M-contiguous A scales
  EXPECT_EQ(GemmAllReduce::validate(d, 2), "");
  d.quant = ScaleMode::kMxfp8;
  EXPECT_NE(GemmAllReduce::validate(d, 2).find("applies to mode blockscale only"), std::string::npos);
  d = c;
  d.chunks = -1;
  EXPECT_NE(GemmAllReduce::validate(d, 2).find("chunks"), std::string::npos);
  d = c;
  d.k = 0;
  EXPECT_NE(GemmAllReduce::validate(d, 2).find("k (the per-rank K shard)"), std::string::npos);
  EXPECT_THROW(gemm_all_reduce_window_bytes(d, 2), Error);
}

TEST(FusedArModes, NamesRoundTrip) {
  for (auto m : {GemmAllReduceMode::kAuto, GemmAllReduceMode::kGemmOnly, GemmAllReduceMode::kSplitNccl,
                 GemmAllReduceMode::kSplitLsa, GemmAllReduceMode::kSplitCe, GemmAllReduceMode::kFused,
                 GemmAllReduceMode::kDecode, GemmAllReduceMode::kFusedRs, GemmAllReduceMode::kFusedCe,
                 GemmAllReduceMode::kDecodeFused})
    EXPECT_EQ(parse_gemm_all_reduce_mode(to_string(m)), m);
  EXPECT_EQ(to_string(GemmAllReduceMode::kDecodeFused), "decode-fused");
  EXPECT_FALSE(parse_gemm_all_reduce_mode("fused-lsa").has_value());  // GemmAllGather's name, not this op's
}

// decode-fused (the decode GEMV and the LL all-reduce in one kernel): explicit only (auto never takes
// it); an explicit op keeps its mode at m > 32 and says it cannot run; world 1 runs decode (nothing
// to reduce); its window holds the LL lines (2 copies x world x 32 tokens x N x 4 bytes) and no
// split collective or staging; it needs the NVLink domain; GemmReduceScatter has no such mode.
TEST(FusedArPlan, DecodeFusedIsExplicitAndItsWindowHoldsTheLines) {
  GemmAllReduceConfig c = model_layer();
  c.mode = GemmAllReduceMode::kDecodeFused;
  for (int64_t m : {1, 16, 32}) {
    const auto p = fused::gar_plan(c, 2, m, 132, true, true);
    EXPECT_EQ(p.mode, GemmAllReduceMode::kDecodeFused) << p.reason;
    EXPECT_NE(p.reason.find("mode decode-fused requested"), std::string::npos) << p.reason;
  }
  const auto big = fused::gar_plan(c, 2, 64, 132, true, true);
  EXPECT_NE(big.reason.find("cannot run m = 64"), std::string::npos) << big.reason;
  const auto one = fused::gar_plan(c, 1, 8, 132, true, true);
  EXPECT_EQ(one.mode, GemmAllReduceMode::kDecode) << one.reason;
  EXPECT_NE(one.reason.find("world 1"), std::string::npos) << one.reason;
  for (int world : {2, 8}) {
    WindowLayout layout;
    const fused::GarLayout g = fused::add_gar_regions(layout, c, world, 64);
    EXPECT_TRUE(g.has_decode_ll);
    EXPECT_FALSE(g.has_split) << "decode-fused runs no split collective";
    EXPECT_FALSE(g.has_staging);
    const Region* r = layout.find("gar.decode_ll");
    ASSERT_NE(r, nullptr) << layout.describe();
    EXPECT_EQ(r->bytes, 2u * static_cast<size_t>(world) * 32u * static_cast<size_t>(c.n) * 4u);  // n: 56 whole bands
    EXPECT_EQ(r->offset, g.decode_ll);
  }
  WindowLayout one_rank;
  EXPECT_FALSE(fused::add_gar_regions(one_rank, c, 1, 64).has_decode_ll) << "world 1: nothing to exchange";
  // Never the model's choice (a calibration table can name it: the next test).
  c.mode = GemmAllReduceMode::kAuto;
  for (int64_t m : {1, 8, 32}) EXPECT_NE(fused::gar_plan(c, 2, m, 132, true, true).mode, GemmAllReduceMode::kDecodeFused);
  // Needs every rank in one NVLink domain, as decode.
  c.mode = GemmAllReduceMode::kDecodeFused;
  fused::Placement apart = fused::world_only(2);
  apart.nvlink_domain = false;
  EXPECT_NE(fused::gar_capabilities(c, apart).unavailable.find("NVLink domain"), std::string::npos);
  EXPECT_TRUE(fused::gar_capabilities(c, fused::world_only(2)).unavailable.empty());
  c.quant = ScaleMode::kMxfp8;
  c.scale_layout = ScaleLayout::kPacked;
  EXPECT_NE(fused::gar_capabilities(c, fused::world_only(2)).unavailable.find("raw scales only"), std::string::npos);
  // Its lines carry M x N x 2 bytes in 32 bits: validate names the rule.
  c = model_layer();
  c.mode = GemmAllReduceMode::kDecodeFused;
  c.m_max = 32;
  c.n = int64_t(1) << 26;
  EXPECT_NE(GemmAllReduce::validate(c, 2).find("decode-fused needs n < 2^26"), std::string::npos)
      << GemmAllReduce::validate(c, 2);
  c.mode = GemmAllReduceMode::kDecode;
  EXPECT_EQ(GemmAllReduce::validate(c, 2).find("2^26"), std::string::npos);
}

// auto takes decode-fused only from a calibration table that measured it fastest: only then does
// the op host its lines (the window grows by exactly their region), and only where its GEMV fits one
// wave (decode_fused_available) is it taken; else the model runs and the reason says why.
TEST(FusedArPlan, AutoTakesDecodeFusedOnlyFromACalibrationTable) {
  const test::ScopedTextFile table("weave-gar-df",
                                  "weave-calibration 1\nop gemm-ar\nquant bf16\nn 7168\nk 2048\nworld 2\nwhere test\n"
                                  "m 1 decode-fused\nm 8 decode-fused\nm 32 decode\nm 4096 split-lsa\n");
  const std::string& path = table.path;
  GemmAllReduceConfig c = model_layer();
  c.m_max = 4096;
  const size_t plain = gemm_all_reduce_window_bytes(c, 2);
  const auto all_reduce = fused::ArLeg::kAllReduce;
  EXPECT_FALSE(fused::gar_hosts_decode_fused(c, 2, all_reduce, nullptr)) << "no table: no lines";
  c.calibration = path;
  const std::optional<fused::Calibration> cal = fused::gar_calibration(c, 2);
  ASSERT_TRUE(cal.has_value());
  EXPECT_TRUE(fused::gar_hosts_decode_fused(c, 2, all_reduce, &*cal));
  EXPECT_FALSE(fused::gar_hosts_decode_fused(c, 1, all_reduce, &*cal)) << "world 1: nothing to exchange";
  EXPECT_FALSE(fused::gar_hosts_decode_fused(c, 2, fused::ArLeg::kReduceScatter, &*cal))
      << "no decode in GemmReduceScatter";
  EXPECT_EQ(gemm_all_reduce_window_bytes(c, 2), plain + 2u * 2u * 32u * static_cast<size_t>(c.n) * 4u);
  for (int64_t m : {1, 4, 8, 12}) {
    const auto p = fused::gar_plan(c, 2, m, 132, true, true, 0, &*cal, fused::ArLeg::kAllReduce, true);
    EXPECT_EQ(p.mode, GemmAllReduceMode::kDecodeFused) << m << ": " << p.reason;
    EXPECT_NE(p.reason.find("calibration " + path + " (test): measured fastest"), std::string::npos) << p.reason;
    // Where its GEMV does not fit one wave at this m, the model's choice, with the reason.
    const auto q = fused::gar_plan(c, 2, m, 132, true, true, 0, &*cal, fused::ArLeg::kAllReduce, false);
    EXPECT_EQ(q.mode, GemmAllReduceMode::kDecode) << m << ": " << q.reason;
    EXPECT_NE(q.reason.find("calibration's decode-fused cannot run here (its GEMV at this m does not fit one wave"),
              std::string::npos) << q.reason;
  }
  EXPECT_EQ(fused::gar_plan(c, 2, 32, 132, true, true, 0, &*cal, fused::ArLeg::kAllReduce, true).mode,
            GemmAllReduceMode::kDecode);
  EXPECT_EQ(fused::gar_plan(c, 2, 4096, 132, true, true, 0, &*cal, fused::ArLeg::kAllReduce, true).mode,
            GemmAllReduceMode::kSplitLsa);
  // The public plan (a described machine) assumes the one wave fits.
  EXPECT_EQ(gemm_all_reduce_plan(c, 2, 8, FusedPlanMachine{}).mode, GemmAllReduceMode::kDecodeFused);
  // A quant the GEMV cannot read never hosts it (mxfp8 packed scales).
  GemmAllReduceConfig mx = c;
  mx.calibration.clear();
  mx.quant = ScaleMode::kMxfp8;
  mx.scale_layout = ScaleLayout::kPacked;
  table.write("weave-calibration 1\nop gemm-ar\nquant mxfp8\nlayout packed\nn 7168\nk 2048\nworld 2\nwhere test\n"
              "m 1 decode-fused\n");
  mx.calibration = path;
  const std::optional<fused::Calibration> mx_cal = fused::gar_calibration(mx, 2);
  EXPECT_FALSE(fused::gar_hosts_decode_fused(mx, 2, all_reduce, mx_cal ? &*mx_cal : nullptr));
}

// fused-ce: explicit only (auto never takes it), fused at world 1 (nothing to copy), modelled with
// its copy chains: never under the fused SM model, and over the GEMM by at least the last round's
// two chains.
TEST(FusedArPlan, FusedCeIsExplicitWorld1RunsAsFusedAndItsModelCountsTheChains) {
  GemmAllReduceConfig c = model_layer();
  c.quant = ScaleMode::kBlockscale;
  c.mode = GemmAllReduceMode::kFusedCe;
  EXPECT_EQ(fused::gar_plan(c, 1, 1024, 132, true, true).mode, GemmAllReduceMode::kFused);
  const auto ce = fused::gar_plan(c, 2, 8192, 132, true, true);
  EXPECT_EQ(ce.mode, GemmAllReduceMode::kFusedCe) << ce.reason;
  c.mode = GemmAllReduceMode::kFused;
  const auto sm = fused::gar_plan(c, 2, 8192, 132, true, true);
  EXPECT_GE(ce.model_fused_us, sm.model_gemm_us + 2 * fused::kModelledCeChainUs);
  EXPECT_EQ(ce.bytes_rs, sm.bytes_rs);
  EXPECT_EQ(ce.chunks, sm.chunks);
  c.mode = GemmAllReduceMode::kAuto;
  for (int64_t m : {1, 128, 1024, 8192, 16384})
    EXPECT_NE(fused::gar_plan(c, 2, m, 132, true, true).mode, GemmAllReduceMode::kFusedCe);
}

namespace {

// fused-ce at chunk granularity: each rank's GEMM walks its segments in order (one worker: the
// most constrained order), an own chunk waits until every peer's partial of it landed; each of a
// rank's hardware queues runs its copy events one after another, each when its chunk is ready at
// the peer (trigger lane: RS c after the peer's segment of band r chunk c, AG c after the peer's
// own chunk c). `queues` gives a rank's queues and their events. True if every rank finishes.
struct Pull {
  int q, leg, c;
};
using Queues = std::vector<std::vector<Pull>>;
using QueueModel = Queues (*)(const fused::ArSchedule& s, int r, int w);

// Rank r's GEMM walks its segments in order while it can (an own chunk waits until every peer's
// partial of it landed); done[r][d][c] marks its tile set of (band d, chunk c). True if it moved.
bool advance_gemm(const std::vector<fused::ArSchedule>& sch, int r, std::vector<int>& seg,
                  std::vector<std::vector<std::vector<char>>>& done,
                  const std::vector<std::vector<std::vector<char>>>& landed) {
  const int w = static_cast<int>(sch.size());
  const fused::ArSchedule& s = sch[r];
  bool moved = false;
  while (seg[r] < s.segments) {
    const int m_blk = s.first_m_blk[seg[r]];
    const int d = fused::ar_band_of(s, m_blk), c = fused::ar_chunk_of(s, m_blk);
    bool ready = true;
    if (d == r)
      for (int q = 0; q < w; ++q) ready &= q == r || landed[r][c][q];
    if (!ready) break;
    done[r][d][c] = 1;
    ++seg[r];
    moved = true;
  }
  return moved;
}

bool simulate_pulls(const Shape& sh, QueueModel model) {
  const int w = sh.world;
  std::vector<fused::ArSchedule> sch;
  for (int r = 0; r < w; ++r) sch.push_back(fused::ar_schedule(sh.m, sh.n, 128, 128, w, r, sh.chunks));
  // done[r][d][c]: rank r computed its tile set of (band d, chunk c): a partial (d != r) or final.
  std::vector<std::vector<std::vector<char>>> done(w, std::vector<std::vector<char>>(w, std::vector<char>(comm::kMaxChunks, 0)));
  // landed[r][c][q]: q's partial of rank r's chunk c is in r's staging.
  std::vector<std::vector<std::vector<char>>> landed(w, std::vector<std::vector<char>>(comm::kMaxChunks, std::vector<char>(w, 0)));
  std::vector<int> seg(w, 0);
  std::vector<Queues> queues;
  std::vector<std::vector<size_t>> at(w);
  for (int r = 0; r < w; ++r) {
    queues.push_back(model(sch[r], r, w));
    at[r].assign(queues[r].size(), 0);
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < w; ++r) {
      progress |= advance_gemm(sch, r, seg, done, landed);
      for (size_t i = 0; i < queues[r].size(); ++i)
        while (at[r][i] < queues[r][i].size()) {
          const Pull& e = queues[r][i][at[r][i]];
          const bool ready = e.leg == fused::kArPullRs ? done[e.q][r][e.c] : done[e.q][e.q][e.c];
          if (!ready) break;
          if (e.leg == fused::kArPullRs) landed[r][e.c][e.q] = 1;
          ++at[r][i];
          progress = true;
        }
    }
  }
  for (int r = 0; r < w; ++r) {
    if (seg[r] < sch[r].segments) return false;
    for (size_t i = 0; i < queues[r].size(); ++i)
      if (at[r][i] < queues[r][i].size()) return false;
  }
  return true;
}

// The op: its enqueue order (ar_pull_enqueue_order), on one queue per copy stream ...
Queues op_streams(const fused::ArSchedule& s, int r, int w) {
  Queues qs(w > 1 ? w - 1 : 0);
  fused::ar_pull_enqueue_order(s, r, w, [&](int st, int leg, int c) { qs[st - 1].push_back({comm::peer_at(r, st, w), leg, c}); });
  return qs;
}
// ... and with every copy stream on one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1).
Queues op_one_queue(const fused::ArSchedule& s, int r, int w) {
  Queues qs(1);
  fused::ar_pull_enqueue_order(s, r, w, [&](int st, int leg, int c) { qs[0].push_back({comm::peer_at(r, st, w), leg, c}); });
  return qs;
}
// Negative control: every gather before any reduce-scatter pull, one queue per stream.
Queues gathers_first(const fused::ArSchedule& s, int r, int w) {
  Queues qs;
  for (int st = 1; st < w; ++st) {
    const int q = comm::peer_at(r, st, w);
    qs.emplace_back();
    for (int c = 0; c < fused::ar_chunks_of(s, q); ++c) qs.back().push_back({q, fused::kArPullAg, c});
    for (int c = 0; c < fused::ar_chunks_of(s, r); ++c) qs.back().push_back({q, fused::kArPullRs, c});
  }
  return qs;
}
// Negative control: the streams enqueued stream-major (each stream's whole walk, then the next's),
// on one hardware queue: the order the op had before.
Queues stream_major_one_queue(const fused::ArSchedule& s, int r, int w) {
  Queues qs(1);
  for (int st = 1; st < w; ++st) {
    const int q = comm::peer_at(r, st, w);
    fused::ar_pull_walk(s, r, q, [&](int leg, int c) { qs[0].push_back({q, leg, c}); });
  }
  return qs;
}

// The emulated world's hazard: every rank's copy events on ONE hardware queue (ranks' streams of one
// GPU colliding on a queue). Events in `order`, (rank, pull); the queue runs its head when ready.
struct RankPull {
  int r;
  Pull e;
};
bool simulate_world_queue(const Shape& sh, const std::vector<RankPull>& order) {
  const int w = sh.world;
  std::vector<fused::ArSchedule> sch;
  for (int r = 0; r < w; ++r) sch.push_back(fused::ar_schedule(sh.m, sh.n, 128, 128, w, r, sh.chunks));
  std::vector<std::vector<std::vector<char>>> done(w, std::vector<std::vector<char>>(w, std::vector<char>(comm::kMaxChunks, 0)));
  std::vector<std::vector<std::vector<char>>> landed(w, std::vector<std::vector<char>>(comm::kMaxChunks, std::vector<char>(w, 0)));
  std::vector<int> seg(w, 0);
  size_t at = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < w; ++r) progress |= advance_gemm(sch, r, seg, done, landed);
    while (at < order.size()) {
      const RankPull& x = order[at];
      const bool ready = x.e.leg == fused::kArPullRs ? done[x.e.q][x.r][x.e.c] : done[x.e.q][x.e.q][x.e.c];
      if (!ready) break;
      if (x.e.leg == fused::kArPullRs) landed[x.r][x.e.c][x.e.q] = 1;
      ++at;
      progress = true;
    }
  }
  for (int r = 0; r < w; ++r)
    if (seg[r] < sch[r].segments) return false;
  return at == order.size();
}

// The round of an event (ar_pull_enqueue_order: round k holds RS k and AG k - 1).
int pull_round(const Pull& e) { return e.leg == fused::kArPullRs ? e.c : e.c + 1; }

}  // namespace

// The walk covers every chunk of both legs exactly once, in round order, and each copy stream's
// events in the op's enqueue order are its walk; the simulated ranks and copy streams always
// finish, on separate queues and on one shared queue; pulling the gathers first deadlocks, and so
// does stream-major enqueueing on a shared queue (the orders matter).
TEST(FusedArPull, WalkCoversEveryChunkOnceAndTheRanksAlwaysFinish) {
  auto shapes = random_shapes(400, 31);
  shapes.push_back({16384, 7168, 8, 16});
  shapes.push_back({100, 512, 2, 1});  // band 1 empty
  shapes.push_back({4096, 7168, 3, 4});
  int deadlocks = 0, multi = 0, shared_deadlocks = 0, three_plus = 0;
  for (const Shape& sh : shapes) {
    for (int r = 0; r < sh.world; ++r) {
      const auto s = fused::ar_schedule(sh.m, sh.n, 128, 128, sh.world, r, sh.chunks);
      const Queues enqueued = op_streams(s, r, sh.world);
      for (int st = 1; st < sh.world; ++st) {
        const int q = comm::peer_at(r, st, sh.world);
        std::set<std::pair<int, int>> seen;
        int last_round = -1;
        size_t i = 0;
        fused::ar_pull_walk(s, r, q, [&](int leg, int c) {
          EXPECT_TRUE(seen.insert({leg, c}).second) << "an event twice";
          const int round = leg == fused::kArPullRs ? c : c + 1;  // when it becomes ready at q
          EXPECT_GE(round, last_round) << "out of round order";
          last_round = round;
          EXPECT_LT(fused::ar_pull_trigger(leg, st, c), fused::ar_pull_landed(1, 0));
          ASSERT_LT(i, enqueued[st - 1].size());
          EXPECT_EQ(enqueued[st - 1][i].leg, leg);
          EXPECT_EQ(enqueued[st - 1][i].c, c);
          ++i;
        });
        EXPECT_EQ(i, enqueued[st - 1].size()) << "the op enqueues stream " << st << "'s walk, nothing else";
        EXPECT_EQ(seen.size(), size_t(fused::ar_chunks_of(s, r) + fused::ar_chunks_of(s, q)));
        for (int c = 0; c < fused::ar_chunks_of(s, r); ++c) {
          const fused::ArChunkRows rows = fused::ar_chunk_row_range(s, r, c, 128, sh.m);
          EXPECT_GT(rows.rows, 0);
          EXPECT_LE(rows.first + rows.rows, sh.m);
        }
      }
    }
    EXPECT_TRUE(simulate_pulls(sh, op_streams)) << "m " << sh.m << " W" << sh.world << " chunks " << sh.chunks;
    EXPECT_TRUE(simulate_pulls(sh, op_one_queue))
        << "one shared queue: m " << sh.m << " W" << sh.world << " chunks " << sh.chunks;
    if (sh.world > 1) {
      ++multi;
      deadlocks += !simulate_pulls(sh, gathers_first);
    }
    if (sh.world >= 3) {
      ++three_plus;
      shared_deadlocks += !simulate_pulls(sh, stream_major_one_queue);
    }
  }
  EXPECT_GT(deadlocks, 0) << "negative control: gathers before reduce-scatter pulls must deadlock somewhere";
  EXPECT_GT(shared_deadlocks, 0) << "negative control: stream-major on one queue must deadlock somewhere at W >= 3";
  std::printf("  negative controls: gathers first deadlock %d of %d multi-rank shapes; stream-major on one queue "
              "%d of %d shapes at W >= 3\n",
              deadlocks, multi, shared_deadlocks, three_plus);
  EXPECT_LE(fused::ar_pull_arrived(fused::kArMaxWorld - 1, comm::kMaxChunks - 1) + 1, fused::kArPullWords);
}

// Ranks that share one GPU (the emulated world) can have copy streams on one hardware queue. Each
// rank enqueueing its whole call before the next rank does (rank-major, what unordered host threads
// can produce) deadlocks there; enqueueing round by round across ranks (round k of every rank before
// round k + 1 of any: a host lockstep per round) always finishes.
TEST(FusedArPull, RanksSharingOneQueueFinishWhenEnqueuedRoundByRound) {
  auto shapes = random_shapes(400, 37);
  shapes.push_back({1, 512, 2, 4});  // one row: band 1 empty
  shapes.push_back({100, 512, 2, 1});
  shapes.push_back({16384, 7168, 8, 16});
  int multi = 0, rank_major_deadlocks = 0;
  for (const Shape& sh : shapes) {
    if (sh.world < 2) continue;
    ++multi;
    std::vector<std::vector<Pull>> per_rank(sh.world);
    int rounds = 0;
    for (int r = 0; r < sh.world; ++r) {
      const auto s = fused::ar_schedule(sh.m, sh.n, 128, 128, sh.world, r, sh.chunks);
      fused::ar_pull_enqueue_order(s, r, sh.world, [&](int st, int leg, int c) {
        per_rank[r].push_back({comm::peer_at(r, st, sh.world), leg, c});
        rounds = std::max(rounds, pull_round(per_rank[r].back()) + 1);
      });
    }
    std::vector<RankPull> rank_major, round_major;
    for (int r = 0; r < sh.world; ++r)
      for (const Pull& e : per_rank[r]) rank_major.push_back({r, e});
    for (int k = 0; k < rounds; ++k)
      for (int r = 0; r < sh.world; ++r)
        for (const Pull& e : per_rank[r])
          if (pull_round(e) == k) round_major.push_back({r, e});
    ASSERT_EQ(round_major.size(), rank_major.size());
    EXPECT_TRUE(simulate_world_queue(sh, round_major)) << "m " << sh.m << " W" << sh.world << " chunks " << sh.chunks;
    rank_major_deadlocks += !simulate_world_queue(sh, rank_major);
  }
  EXPECT_GT(rank_major_deadlocks, 0) << "negative control: rank-major on one queue must deadlock somewhere";
  std::printf("  rank-major enqueueing on one shared queue deadlocks %d of %d multi-rank shapes\n", rank_major_deadlocks,
              multi);
}

// fused-rs's tail: one CTA per row of the own band at most, at most the cap, at least one (a rank
// with an empty band still ends the call).
TEST(FusedArTail, GridCoversTheOwnBandWithinTheCapAndWorld1RunsAsFused) {
  GemmAllReduceConfig c;
  c.n = 512;
  c.k = 256;
  c.m_max = 4096;
  c.mode = GemmAllReduceMode::kFusedRs;
  EXPECT_EQ(fused::gar_plan(c, 1, 1024, 132, true, true).mode, GemmAllReduceMode::kFused);  // no staging at world 1
  EXPECT_EQ(fused::gar_plan(c, 2, 1024, 132, true, true).mode, GemmAllReduceMode::kFusedRs);
  const auto s = fused::ar_schedule(4096, 512, 128, 128, 2, 0, 4);
  EXPECT_EQ(fused::ar_tail_grid(s, 0, 4096, 128, 65), 65);
  EXPECT_EQ(fused::ar_tail_grid(s, 1, 4096, 128, 4096), 2048);
  const auto one = fused::ar_schedule(100, 512, 128, 128, 2, 1, 1);  // one row block: band 1 is empty
  EXPECT_EQ(fused::ar_tail_grid(one, 0, 100, 128, 65), 65);
  EXPECT_EQ(fused::ar_tail_grid(one, 1, 100, 128, 65), 1);
  EXPECT_EQ(fused::ar_tail_grid(one, 0, 100, 128, 0), 1);
}

// The calibration table auto consults (fused/calibration.hpp): parsed with every rule named,
// looked up by the nearest M in log2 within a factor 2, checked against the op's shape, and
// followed by the planner where the op can run the mode (else the model decides).
TEST(FusedArCalibration, ParseLookUpMatchAndPlan) {
  const std::string text =
      "weave-calibration 1\n# a comment\nop gemm-ar\nquant blockscale\nn 7168\nk 2048\nworld 2\nwhere 2-emu\n"
      "m 4096 split-lsa\nm 1 decode\nm 1024 fused\n";
  const fused::Calibration c = fused::parse_calibration(text, "t.txt");
  ASSERT_EQ(c.rows.size(), 3u);
  EXPECT_EQ(c.rows[0].m, 1);  // sorted
  EXPECT_EQ(c.best_for(1), "decode");
  EXPECT_EQ(c.best_for(2), "decode");        // a factor 2 away
  EXPECT_EQ(c.best_for(3000), "split-lsa");  // nearer 4096 than 1024 in log2
  EXPECT_EQ(c.best_for(1500), "fused");
  EXPECT_FALSE(c.best_for(16).has_value());     // 4x from 1 and 64x from 1024: the model
  EXPECT_FALSE(c.best_for(16384).has_value());  // 4x past the largest
  EXPECT_EQ(c.mismatch("gemm-ar", ScaleMode::kBlockscale, ScaleLayout::kRaw, DType::kBF16, 7168, 2048, 2), "");
  EXPECT_NE(c.mismatch("gemm-ar", ScaleMode::kBF16, ScaleLayout::kRaw, DType::kBF16, 7168, 4096, 4).find("quant blockscale"),
            std::string::npos);
  EXPECT_EQ(fused::parse_calibration(c.to_text(), "round trip").to_text(), c.to_text());
  for (const auto& [bad, needle] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty"},
           {"weave-calibration 2\n", "first line"},
           {"weave-calibration 1\nop gemm-ar\nquant fp4\n", "unknown quant 'fp4'"},
           {"weave-calibration 1\nop gemm-ar\nn 0\n", "'n' needs an integer >= 1"},
           {"weave-calibration 1\nop gemm-ar\nn 8\nk 8\nworld 2\n", "no 'm M MODE' rows"},
           {"weave-calibration 1\nop gemm-ar\nn 8\nk 8\nworld 2\nm 4 fused\nm 4 decode\n", "M = 4 appears twice"},
           {"weave-calibration 1\nshape 3\n", "unknown key 'shape'"}}) {
    const std::string msg = test::error_of([&] { fused::parse_calibration(bad, "bad.txt"); }, Status::kInvalidArgument);
    EXPECT_NE(msg.find("calibration bad.txt"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
  EXPECT_NE(test::error_of([] { fused::load_calibration("/nonexistent/t.txt"); }, Status::kInvalidArgument)
                .find("cannot be read"),
            std::string::npos);

  GemmAllReduceConfig cfg;
  cfg.n = 7168;
  cfg.k = 2048;
  cfg.m_max = 8192;
  cfg.quant = ScaleMode::kBlockscale;
  // The model takes fused at 4096 (NVLink arithmetic); the measured table says split-lsa.
  EXPECT_EQ(fused::gar_plan(cfg, 2, 4096, 132, true, true).mode, GemmAllReduceMode::kFused);
  const auto p = fused::gar_plan(cfg, 2, 4096, 132, true, true, 0, &c);
  EXPECT_EQ(p.mode, GemmAllReduceMode::kSplitLsa) << p.reason;
  EXPECT_NE(p.reason.find("calibration t.txt (2-emu): measured fastest"), std::string::npos) << p.reason;
  EXPECT_EQ(fused::gar_plan(cfg, 2, 1, 132, true, true, 0, &c).mode, GemmAllReduceMode::kDecode);
  // A measured mode this op cannot run here falls back to the model: fused without its kernel.
  EXPECT_EQ(fused::gar_plan(cfg, 2, 1024, 132, false, true, 0, &c).mode, GemmAllReduceMode::kSplitLsa);
  EXPECT_EQ(fused::gar_plan(cfg, 2, 1024, 132, true, true, 0, &c).mode, GemmAllReduceMode::kFused);
  // Explicit modes never consult it; world 1 stays gemm-only.
  cfg.mode = GemmAllReduceMode::kSplitCe;
  EXPECT_EQ(fused::gar_plan(cfg, 2, 4096, 132, true, true, 0, &c).mode, GemmAllReduceMode::kSplitCe);
  cfg.mode = GemmAllReduceMode::kAuto;
  EXPECT_EQ(fused::gar_plan(cfg, 1, 4096, 132, true, true, 0, &c).mode, GemmAllReduceMode::kGemmOnly);
}
