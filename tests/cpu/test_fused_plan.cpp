// GemmAllGather's pure parts on the CPU: the chunks the fused kernel counts (every tile counted
// exactly once, no empty chunk, at most kMaxChunks), the window layout at capacity, the planner's
// choices, validation messages, mode names; and the cross-rank agreement checks every op uses.
#include <gtest/gtest.h>

#include <random>

#include "comm/group.hpp"
#include "fused/ag_gemm/plan.hpp"
#include "fused/all_gather/schedule.hpp"
#include "fused/all_gather/plan.hpp"
#include "fused/all_reduce/plan.hpp"
#include "support/expect_error.hpp"

using namespace weave;

TEST(FusedAgChunks, EveryTileCountedOnceNoEmptyChunkAtAnyM) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t m = 1 + rng() % 40000, n = 8 * (1 + rng() % 1024);
    const fused::AgChunks c = fused::ag_chunks(m, n, 128, 128);
    ASSERT_GE(c.chunks, 1);
    ASSERT_LE(c.chunks, comm::kMaxChunks);
    uint64_t units = 0;
    for (int ch = 0; ch < c.chunks; ++ch) {
      const uint32_t u = fused::ag_chunk_units(c, ch);
      ASSERT_GT(u, 0u) << "m " << m << " chunk " << ch << " is empty";
      units += u;
    }
    EXPECT_EQ(units, 2ull * c.m_blocks * c.n_blocks) << "m " << m << " n " << n;
    // Every row block maps to a chunk, in order, and the last one to the last chunk.
    EXPECT_EQ(fused::ag_chunk_of(c, 0), 0);
    EXPECT_EQ(fused::ag_chunk_of(c, c.m_blocks - 1), c.chunks - 1);
    for (int mb = 1; mb < c.m_blocks; ++mb) EXPECT_LE(fused::ag_chunk_of(c, mb) - fused::ag_chunk_of(c, mb - 1), 1);
  }
}

TEST(FusedAgChunks, SmallAndLargeM) {
  EXPECT_EQ(fused::ag_chunks(1, 256, 128, 128).chunks, 1);
  EXPECT_EQ(fused::ag_chunks(128 * 5, 256, 128, 128).chunks, 5);
  const auto big = fused::ag_chunks(128 * 17, 256, 128, 128);  // 17 row blocks: 9 chunks of 2 (last 1)
  EXPECT_EQ(big.per, 2);
  EXPECT_EQ(big.chunks, 9);
  EXPECT_EQ(fused::ag_chunk_units(big, 8), 2u * 1 * 2);
}

namespace {
GemmAllGatherConfig cfg_of(GemmAllGatherMode mode, int64_t m_max = 4096) {
  GemmAllGatherConfig c;
  c.n = 2048;
  c.k = 7168;
  c.m_max = m_max;
  c.out_dtype = DType::kF32;
  c.mode = mode;
  return c;
}
}  // namespace

TEST(FusedAgLayout, RegionsAtCapacityAndSplitRegionsWithoutBuffersOfTheirOwn) {
  for (int world : {1, 2, 4, 8})
    for (GemmAllGatherMode mode : {GemmAllGatherMode::kAuto, GemmAllGatherMode::kGemmOnly, GemmAllGatherMode::kSplitLsa,
                                   GemmAllGatherMode::kSplitCe, GemmAllGatherMode::kFusedLsa, GemmAllGatherMode::kFusedCe}) {
      WindowLayout layout;
      const auto g = fused::add_gag_regions(layout, cfg_of(mode), world, 132, 132);
      EXPECT_EQ(g.out_bytes, uint64_t(world) * 4096 * 2048 * 4);
      // The split modes' K-split partials: local, 16-byte aligned, none where no split GEMM runs.
      const bool splits = mode != GemmAllGatherMode::kFusedLsa && mode != GemmAllGatherMode::kFusedCe;
      EXPECT_EQ(g.partials_bytes > 0, splits) << to_string(mode);
      EXPECT_EQ(layout.find("gag.partials") != nullptr, splits) << to_string(mode);
      EXPECT_EQ(g.partials % 16, 0u);
      const bool hosts_split = world > 1 && (mode == GemmAllGatherMode::kAuto || mode == GemmAllGatherMode::kSplitLsa ||
                                             mode == GemmAllGatherMode::kSplitCe);
      EXPECT_EQ(g.has_split, hosts_split) << to_string(mode) << " W" << world;
      EXPECT_EQ(layout.find("gag.split.in"), nullptr) << "the split all-gather gathers gag.out in place";
      EXPECT_EQ(layout.find("gag.split.out"), nullptr);
      // Regions never overlap (the allocator's rule) and gag.out is 16-byte aligned for TMA.
      const auto& rs = layout.regions();
      for (size_t i = 0; i < rs.size(); ++i)
        for (size_t j = i + 1; j < rs.size(); ++j)
          EXPECT_TRUE(rs[i].end() <= rs[j].offset || rs[j].end() <= rs[i].offset) << rs[i].name << " / " << rs[j].name;
      EXPECT_EQ(g.out % 16, 0u);
      // Sized before the op exists: an upper bound (the split grid cap assumed at its largest).
      EXPECT_GE(gemm_all_gather_window_bytes(cfg_of(mode), world), layout.total_bytes());
      EXPECT_LE(gemm_all_gather_window_bytes(cfg_of(mode), world), layout.total_bytes() + 8192);
    }
}

// Several ops in one window (weave::create_sharing_window): each op's regions under its own
// prefix, none overlapping another's; two GemmAllGathers under one prefix are refused by name.
TEST(FusedSharedWindow, EveryOpsRegionsUnderItsPrefixNeverOverlap) {
  WindowLayout layout;
  const auto ag0 = fused::add_gag_regions(layout, cfg_of(GemmAllGatherMode::kAuto), 4, 132, 132, "ag0");
  const auto ag1 = fused::add_gag_regions(layout, cfg_of(GemmAllGatherMode::kFusedCe, 1024), 4, 132, 132, "ag1");
  GemmAllReduceConfig ar;
  ar.n = 7168;
  ar.k = 2048;
  ar.m_max = 4096;
  const auto ar0 = fused::add_gar_regions(layout, ar, 4, 132, "ar0");
  // The sequence-parallel pair (create_sharing_window's "rs<i>" and "agm<i>" lists).
  GemmAllReduceConfig rs_cfg = ar;  // GemmReduceScatter runs GemmAllReduce's Impl with the reduce-scatter leg
  rs_cfg.mode = GemmAllReduceMode::kAuto;
  const auto rs0 = fused::add_gar_regions(layout, rs_cfg, 4, 132, "rs0", fused::ArLeg::kReduceScatter);
  AllGatherGemmConfig agm;
  agm.n = 7168;
  agm.k = 8192;
  agm.m_max = 1024;
  agm.quant = ScaleMode::kPtpc;
  const auto agm0 = fused::add_agm_regions(layout, agm, 4, 132, "agm0");
  EXPECT_NE(layout.find("rs0.staging"), nullptr);
  EXPECT_NE(layout.find("agm0.sa"), nullptr);
  EXPECT_NE(layout.find("agm0.split.a.control"), nullptr) << "auto hosts its gathers under its own prefix";
  EXPECT_TRUE(rs0.control != ar0.control && agm0.a != ag0.out && agm0.control != rs0.control);
  EXPECT_NE(layout.find("ag0.out"), nullptr);
  EXPECT_NE(layout.find("ag1.control"), nullptr);
  EXPECT_NE(layout.find("ar0.staging"), nullptr);
  EXPECT_NE(layout.find("ag0.split.control"), nullptr) << "auto hosts its split all-gather under its own prefix";
  EXPECT_TRUE(ag0.out != ag1.out && ag1.control != ar0.control && ar0.out != ag0.out);
  const auto& rs = layout.regions();
  for (size_t i = 0; i < rs.size(); ++i)
    for (size_t j = i + 1; j < rs.size(); ++j)
      EXPECT_TRUE(rs[i].end() <= rs[j].offset || rs[j].end() <= rs[i].offset) << rs[i].name << " / " << rs[j].name;
  const std::string msg =
      test::error_of([&] { fused::add_gag_regions(layout, cfg_of(GemmAllGatherMode::kAuto), 4, 132, 132, "ag0"); });
  EXPECT_NE(msg.find("'ag0.control': name already used"), std::string::npos) << msg;
}

// A calibration table for gemm-ag: auto follows its measured best where the op can run it (not
// fused-lsa without the kernel), the out dtype is part of the shape, explicit modes ignore it.
TEST(FusedAgPlan, AutoFollowsACalibrationTable) {
  const auto autoc = cfg_of(GemmAllGatherMode::kAuto, 16384);
  const fused::Calibration c = fused::parse_calibration(
      "weave-calibration 1\nop gemm-ag\nquant " + std::string(to_string(autoc.quant)) + "\nout " +
          std::string(to_string(autoc.out_dtype)) + "\nn " + std::to_string(autoc.n) + "\nk " +
          std::to_string(autoc.k) + "\nworld 2\nm 128 fused-lsa\nm 8192 split-lsa\n",
      "ag.txt");
  EXPECT_EQ(c.mismatch("gemm-ag", autoc.quant, autoc.scale_layout, autoc.out_dtype, autoc.n, autoc.k, 2), "");
  const DType other = autoc.out_dtype == DType::kF32 ? DType::kBF16 : DType::kF32;
  EXPECT_NE(c.mismatch("gemm-ag", autoc.quant, autoc.scale_layout, other, autoc.n, autoc.k, 2).find("out "),
            std::string::npos);
  // The model: split at 128, fused at 8192; the table: the other way round.
  const auto small = fused::gag_plan(autoc, 2, 128, 132, true, true, 0, &c);
  EXPECT_EQ(small.mode, GemmAllGatherMode::kFusedLsa) << small.reason;
  EXPECT_NE(small.reason.find("calibration ag.txt: measured fastest near m = 128"), std::string::npos) << small.reason;
  EXPECT_EQ(fused::gag_plan(autoc, 2, 8192, 132, true, true, 0, &c).mode, GemmAllGatherMode::kSplitLsa);
  EXPECT_EQ(fused::gag_plan(autoc, 2, 128, 132, false, true, 0, &c).mode, GemmAllGatherMode::kSplitLsa);
  EXPECT_EQ(fused::gag_plan(autoc, 2, 1000000, 132, true, true, 0, &c).mode,
            fused::gag_plan(autoc, 2, 1000000, 132, true, true).mode)
      << "outside the table's reach: the model";
  EXPECT_EQ(fused::gag_plan(cfg_of(GemmAllGatherMode::kSplitCe, 16384), 2, 128, 132, true, true, 0, &c).mode,
            GemmAllGatherMode::kSplitCe);
  // A table naming fused-ce (which auto does not host: no copy streams) is not followed: the model.
  const fused::Calibration ce = fused::parse_calibration(
      "weave-calibration 1\nop gemm-ag\nquant " + std::string(to_string(autoc.quant)) + "\nout " +
          std::string(to_string(autoc.out_dtype)) + "\nn " + std::to_string(autoc.n) + "\nk " +
          std::to_string(autoc.k) + "\nworld 2\nm 8192 fused-ce\n",
      "ce.txt");
  EXPECT_EQ(fused::gag_plan(autoc, 2, 8192, 132, true, true, 0, &ce).mode, fused::gag_plan(autoc, 2, 8192, 132, true, true).mode);
}

TEST(FusedAgPlan, AutoChoosesByWavesAndModelAndRespectsExplicitModes) {
  const auto autoc = cfg_of(GemmAllGatherMode::kAuto, 16384);
  EXPECT_EQ(fused::gag_plan(autoc, 1, 2048, 132, true, true).mode, GemmAllGatherMode::kGemmOnly);
  // M = 128: 64 tiles of 64x64 on 132 CTAs, under 1.5 waves: split.
  const auto small = fused::gag_plan(autoc, 2, 128, 132, true, true);
  EXPECT_EQ(small.mode, GemmAllGatherMode::kSplitLsa);
  EXPECT_NE(small.reason.find("waves"), std::string::npos) << small.reason;
  // M = 8192: the planner's 128x256 tile (bf16), 512 tiles, 3.9 waves: the broadcast hides under the GEMM.
  const auto big = fused::gag_plan(autoc, 2, 8192, 132, true, true);
  EXPECT_EQ(big.mode, GemmAllGatherMode::kFusedLsa) << big.reason;
  EXPECT_LT(big.model_fused_us, big.model_split_us);
  EXPECT_EQ(big.block_m, 128);
  EXPECT_EQ(big.block_n, 256);
  EXPECT_EQ(big.tiles, 64 * 8);
  EXPECT_EQ(big.bytes_per_peer, int64_t(8192) * 2048 * 4);
  // Without the fused kernel auto never picks it.
  EXPECT_EQ(fused::gag_plan(autoc, 2, 8192, 132, false, true).mode, GemmAllGatherMode::kSplitLsa);
  for (GemmAllGatherMode m : {GemmAllGatherMode::kGemmOnly, GemmAllGatherMode::kSplitCe, GemmAllGatherMode::kFusedLsa,
                              GemmAllGatherMode::kFusedCe, GemmAllGatherMode::kSplitNccl})
    EXPECT_EQ(fused::gag_plan(cfg_of(m, 16384), 4, 100, 132, true, true).mode, m);
}

// fused-ce's model: the copy streams' chains of the chunks that complete with the last group of
// row blocks run after the GEMM, ~10 us each (docs/perf/fused.md): at m = 1024 (8 row blocks, one
// group) every chunk's chain follows the GEMM; at m = 8192 only the last group's two chunks do.
TEST(FusedAgPlan, FusedCeModelPaysTheLastGroupsChainsAfterTheGemm) {
  const auto small = fused::gag_plan(cfg_of(GemmAllGatherMode::kFusedCe, 16384), 2, 1024, 66, true, true);
  EXPECT_EQ(small.mode, GemmAllGatherMode::kFusedCe);
  EXPECT_EQ(small.chunks, 8);
  EXPECT_GE(small.model_fused_us, small.model_gemm_us + 8 * 10);
  EXPECT_LT(small.model_fused_us, small.model_gemm_us + 8 * 10 + 60);
  const auto big = fused::gag_plan(cfg_of(GemmAllGatherMode::kFusedCe, 16384), 2, 8192, 66, true, true);
  EXPECT_EQ(big.chunks, 16);
  EXPECT_GE(big.model_fused_us, std::max(big.model_gemm_us, big.model_comm_us - 12) + 2 * 10);
  EXPECT_LT(big.model_fused_us, big.model_split_us);
  // fused-lsa's model is not changed by it.
  EXPECT_EQ(fused::gag_plan(cfg_of(GemmAllGatherMode::kFusedLsa, 16384), 2, 1024, 66, true, true).model_fused_us,
            fused::gag_plan(cfg_of(GemmAllGatherMode::kAuto, 16384), 2, 1024, 66, true, true).model_fused_us);
}

TEST(FusedAgValidate, EveryRuleNamed) {
  EXPECT_EQ(GemmAllGather::validate(cfg_of(GemmAllGatherMode::kAuto), 2), "");
  auto c = cfg_of(GemmAllGatherMode::kAuto);
  c.n = 2044;
  EXPECT_NE(GemmAllGather::validate(c, 2).find("n must be a multiple of 8"), std::string::npos);
  c = cfg_of(GemmAllGatherMode::kAuto);
  c.quant = ScaleMode::kBlockscale;
  EXPECT_NE(GemmAllGather::validate(c, 2).find("bf16 output"), std::string::npos);
  c = cfg_of(GemmAllGatherMode::kAuto);
  c.m_max = 0;
  EXPECT_NE(GemmAllGather::validate(c, 2).find("m_max"), std::string::npos);
  c = cfg_of(GemmAllGatherMode::kAuto);
  c.quant = ScaleMode::kBlockscale;
  c.out_dtype = DType::kBF16;
  c.scale_layout = ScaleLayout::kMnMajor;  // blockscale's M-contiguous A scales
  EXPECT_EQ(GemmAllGather::validate(c, 2), "");
  c.quant = ScaleMode::kPtpc;
  EXPECT_NE(GemmAllGather::validate(c, 2).find("applies to mode blockscale only"), std::string::npos);
  EXPECT_NE(GemmAllGather::validate(cfg_of(GemmAllGatherMode::kAuto), 0).find("world"), std::string::npos);
  c = cfg_of(GemmAllGatherMode::kAuto);
  c.k = 100;  // not a multiple of the GEMM's K rule
  EXPECT_NE(GemmAllGather::validate(c, 2).find("per-rank GEMM"), std::string::npos);
  const std::string msg = test::error_of([&] { gemm_all_gather_window_bytes(c, 2); });
  EXPECT_NE(msg.find("per-rank GEMM"), std::string::npos) << msg;
}

TEST(FusedAgModes, NamesRoundTrip) {
  for (auto m : {GemmAllGatherMode::kAuto, GemmAllGatherMode::kGemmOnly, GemmAllGatherMode::kSplitNccl,
                 GemmAllGatherMode::kSplitLsa, GemmAllGatherMode::kSplitCe, GemmAllGatherMode::kFusedLsa,
                 GemmAllGatherMode::kFusedCe})
    EXPECT_EQ(parse_gemm_all_gather_mode(to_string(m)), m);
  EXPECT_FALSE(parse_gemm_all_gather_mode("fused").has_value());
}

TEST(GroupAgreement, MismatchAndFailedStepsNameRanks) {
  EXPECT_NO_THROW(comm::check_agreement({5, 5, 5}, 0, "x"));
  std::string msg = test::error_of([] { comm::check_agreement({5, 6, 5}, 2, "the op"); }, Status::kMismatch);
  EXPECT_NE(msg.find("rank 2: ranks disagree on the op"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1=6"), std::string::npos) << msg;
  EXPECT_NO_THROW(comm::check_outcomes({1, 1}, true, 0, "step", ""));
  msg = test::error_of([] { comm::check_outcomes({1, 0, 0}, true, 0, "step", ""); }, Status::kUnavailable);
  EXPECT_NE(msg.find("failed on rank(s) 1,2"), std::string::npos) << msg;
  msg = test::error_of([] { comm::check_outcomes({1, 0}, false, 1, "step", "because"); }, Status::kUnavailable);
  EXPECT_NE(msg.find("rank 1: step failed: because"), std::string::npos) << msg;
}
