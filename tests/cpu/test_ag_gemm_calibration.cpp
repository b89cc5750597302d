// AllGatherGemm's auto with a calibration table (AllGatherGemmConfig::calibration): per m the mode
// the table measured fastest (split-lsa or fused-ce) where the op can run it, the model elsewhere;
// a table naming fused-ce adds fused-ce's landed words to the window; a table for another op shape
// or with an explicit mode is refused naming the field. CPU only (the public planner).
#include <gtest/gtest.h>

#include <string>

#include "comm/protocol.hpp"
#include "comm/transport_build.hpp"
#include "fused/ag_gemm/plan.hpp"
#include "support/expect_error.hpp"
#include "support/scoped_file.hpp"
#include "weave/all_gather_gemm.hpp"

using namespace weave;

namespace {

AllGatherGemmConfig auto_config(const std::string& table, ScaleMode quant = ScaleMode::kBF16) {
  AllGatherGemmConfig c;
  c.n = 7168;
  c.k = 2048;
  c.m_max = 4096;
  c.quant = quant;
  c.calibration = table;
  return c;
}

std::string header(const char* quant, int world, const char* op = "ag-gemm") {
  return std::string("weave-calibration 1\nop ") + op + "\nquant " + quant + "\nout bf16\nn 7168\nk 2048\nworld " +
         std::to_string(world) + "\nwhere test\n";
}

// fused-ce at small m, split-lsa at m 1024, nothing near m 4096.
const char* kRows = "m 16 fused-ce\nm 128 fused-ce\nm 1024 split-lsa\n";

bool ce_built() { return comm::transport_compiled_in(Transport::kCe); }

}  // namespace

TEST(AgGemmCalibration, AutoTakesTheTablesModePerMAndTheModelElsewhere) {
  const test::ScopedTextFile table("weave-agm-cal", header("bf16", 2) + kRows);
  const AllGatherGemmConfig c = auto_config(table.path);
  const AllGatherGemmMode fused = ce_built() ? AllGatherGemmMode::kFusedCe : AllGatherGemmMode::kSplitLsa;
  for (int64_t m : {8, 16, 32, 100, 128, 200}) {
    const AllGatherGemmPlan p = all_gather_gemm_plan(c, 2, m);
    EXPECT_EQ(p.mode, fused) << "m " << m << ": " << p.reason;
    if (!ce_built()) continue;  // a build without the ce transport: the model, saying why
    EXPECT_NE(p.reason.find("calibration " + table.path + " (test): measured fastest near m = " + std::to_string(m)),
              std::string::npos) << p.reason;
    // fused-ce's own tile and chunks are in the plan, as for mode fused-ce.
    AllGatherGemmConfig explicit_ce = c;
    explicit_ce.calibration.clear();
    explicit_ce.mode = AllGatherGemmMode::kFusedCe;
    const AllGatherGemmPlan e = all_gather_gemm_plan(explicit_ce, 2, m);
    EXPECT_EQ(p.block_m, e.block_m);
    EXPECT_EQ(p.block_n, e.block_n);
    EXPECT_EQ(p.gemm_kernel, e.gemm_kernel);
  }
  const AllGatherGemmPlan lsa = all_gather_gemm_plan(c, 2, 1024);
  EXPECT_EQ(lsa.mode, AllGatherGemmMode::kSplitLsa);
  EXPECT_NE(lsa.reason.find("measured fastest near m = 1024"), std::string::npos) << lsa.reason;
  const AllGatherGemmPlan far = all_gather_gemm_plan(c, 2, 4096);  // 4x from every row: the model
  EXPECT_EQ(far.mode, AllGatherGemmMode::kSplitLsa);
  EXPECT_NE(far.reason.find("has no row within 2x of m = 4096; the model"), std::string::npos) << far.reason;
  // Without the table: the model (never fused-ce), at every m.
  for (int64_t m : {16, 128, 1024})
    EXPECT_EQ(all_gather_gemm_plan(auto_config(""), 2, m).mode, AllGatherGemmMode::kSplitLsa);
  // World 1 has nothing to gather whatever a table says (a world-1 table is for a world-1 op).
  const test::ScopedTextFile one("weave-agm-cal1", header("bf16", 1) + kRows);
  EXPECT_EQ(all_gather_gemm_plan(auto_config(one.path), 1, 16).mode, AllGatherGemmMode::kGemmOnly);
  // Ranks across NVLink domains run split-nccl, table or not.
  EXPECT_EQ(all_gather_gemm_plan(c, 2, 16, FusedPlanMachine{.nvlink_domain = false}).mode, AllGatherGemmMode::kSplitNccl);
}

// fused-ce's rows are taken only where fused-ce runs the quant: mxfp8's table falls to the model,
// the reason naming the table and why.
TEST(AgGemmCalibration, FusedCeRowsOfAQuantWithoutItFallToTheModel) {
  const test::ScopedTextFile table("weave-agm-calmx", header("mxfp8", 2) + kRows);
  const AllGatherGemmConfig c = auto_config(table.path, ScaleMode::kMxfp8);
  const AllGatherGemmPlan p = all_gather_gemm_plan(c, 2, 16);
  EXPECT_EQ(p.mode, AllGatherGemmMode::kSplitLsa);
  EXPECT_NE(p.reason.find("measured fused-ce fastest near m = 16, which cannot run here: no fused-ce kernel for mxfp8"),
            std::string::npos) << p.reason;
  EXPECT_FALSE(fused::agm_auto_hosts_fused_ce(c, 2, nullptr));
  // ... and its window holds no landed words.
  EXPECT_EQ(all_gather_gemm_window_bytes(c, 2), all_gather_gemm_window_bytes(auto_config("", ScaleMode::kMxfp8), 2));
}

// A table naming fused-ce makes the auto op hold fused-ce's landed words beside the split gathers;
// one that does not changes nothing.
TEST(AgGemmCalibration, ATableNamingFusedCeAddsItsWordsToTheWindow) {
  for (ScaleMode q : {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale}) {
    for (int w : {2, 4, 8}) {
      SCOPED_TRACE(std::string(to_string(q)) + " W" + std::to_string(w));
      const std::string quant(to_string(q));
      const test::ScopedTextFile with("weave-agm-calw", header(quant.c_str(), w) + kRows);
      const test::ScopedTextFile without("weave-agm-calo", header(quant.c_str(), w) + "m 16 split-lsa\n");
      const AllGatherGemmConfig c = auto_config(with.path, q);
      const std::optional<fused::Calibration> cal = fused::agm_calibration(c, w);
      ASSERT_TRUE(cal.has_value());
      WindowLayout layout;
      const fused::AgmLayout g = fused::add_agm_regions(layout, c, w, fused::kAgmBoundSplitBlocks, "agm", &*cal);
      EXPECT_TRUE(g.has_split) << "auto keeps its split gathers";
      const std::size_t plain = all_gather_gemm_window_bytes(auto_config("", q), w);
      EXPECT_EQ(all_gather_gemm_window_bytes(auto_config(without.path, q), w), plain);
      if (!ce_built()) {
        EXPECT_EQ(layout.find("agm.landed"), nullptr);
        EXPECT_EQ(all_gather_gemm_window_bytes(c, w), plain);
        continue;
      }
      const Region* landed = layout.find("agm.landed");
      ASSERT_NE(landed, nullptr) << layout.describe();
      EXPECT_EQ(landed->bytes, 4u * w * comm::kMaxChunks);
      EXPECT_EQ(all_gather_gemm_window_bytes(c, w), layout.total_bytes());
      EXPECT_GE(all_gather_gemm_window_bytes(c, w), plain);  // the window rounds up: the words may fit
      WindowLayout none;
      fused::add_agm_regions(none, auto_config("", q), w, fused::kAgmBoundSplitBlocks);
      EXPECT_EQ(none.find("agm.landed"), nullptr);
      const fused::AgmCapabilities caps = fused::agm_capabilities(c, fused::world_only(w), &*cal);
      EXPECT_TRUE(caps.hosts_fused);
      EXPECT_TRUE(caps.pulls);
      EXPECT_EQ(caps.hosted_split, AllGatherGemmMode::kSplitLsa);
    }
  }
}

TEST(AgGemmCalibration, ATableForAnotherShapeOrAnExplicitModeIsRefusedNamingTheField) {
  const test::ScopedTextFile table("weave-agm-calbad", header("bf16", 2) + kRows);
  AllGatherGemmConfig c = auto_config(table.path);
  c.k = 4096;
  EXPECT_NE(test::error_of([&] { all_gather_gemm_plan(c, 2, 16); }, Status::kInvalidArgument)
                .find("AllGatherGemmConfig.calibration '" + table.path + "' is for another op shape: k 2048 (this op: 4096)"),
            std::string::npos);
  c = auto_config(table.path);
  EXPECT_NE(test::error_of([&] { all_gather_gemm_window_bytes(c, 4); }, Status::kInvalidArgument).find("world 2 (this op: 4)"),
            std::string::npos);
  c.mode = AllGatherGemmMode::kFusedCe;
  EXPECT_NE(test::error_of([&] { all_gather_gemm_plan(c, 2, 16); }, Status::kInvalidArgument)
                .find("AllGatherGemmConfig.calibration: only mode auto consults a calibration (mode fused-ce is explicit)"),
            std::string::npos);
  // Another op's table (GemmAllGather's, "gemm-ag") is not this op's.
  const test::ScopedTextFile gag("weave-agm-calgag", header("bf16", 2, "gemm-ag") + "m 16 fused-lsa\n");
  EXPECT_NE(test::error_of([&] { all_gather_gemm_plan(auto_config(gag.path), 2, 16); }, Status::kInvalidArgument)
                .find("op gemm-ag (this op: ag-gemm)"),
            std::string::npos);
  const std::string missing = table.path + ".missing";
  EXPECT_NE(test::error_of([&] { all_gather_gemm_plan(auto_config(missing), 2, 16); }, Status::kInvalidArgument)
                .find(missing),
            std::string::npos);
}
