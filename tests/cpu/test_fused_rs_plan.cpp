// GemmReduceScatter's pure planning (GemmAllReduce's planner with the leg kReduceScatter,
// fused/all_reduce/plan.hpp): its rules (m a multiple of the world; fused only where the bands are
// whole tiles), its volumes (one leg: (W - 1) / W of the partial), its model (no gather), its
// window (the split collective is a reduce-scatter of m_max / W rows per rank) and its names.
#include <gtest/gtest.h>

#include "fused/all_reduce/plan.hpp"
#include "fused/reduce_scatter/impl.hpp"
#include "support/expect_error.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/gemm_reduce_scatter.hpp"

using namespace weave;

namespace {

GemmReduceScatterConfig rs_config(GemmReduceScatterMode mode, ScaleMode quant = ScaleMode::kBF16) {
  GemmReduceScatterConfig c;
  c.n = 7168;
  c.k = 2048;
  c.m_max = 16384;
  c.quant = quant;
  c.mode = mode;
  return c;
}

}  // namespace

TEST(FusedRsPlan, ModeNamesRoundTripAndMapOntoTheAllReducesModes) {
  for (auto m : {GemmReduceScatterMode::kAuto, GemmReduceScatterMode::kGemmOnly, GemmReduceScatterMode::kSplitNccl,
                 GemmReduceScatterMode::kSplitLsa, GemmReduceScatterMode::kSplitCe, GemmReduceScatterMode::kFused}) {
    EXPECT_EQ(parse_gemm_reduce_scatter_mode(to_string(m)), m);
    EXPECT_EQ(to_string(fused::grs_ar_mode(m)), to_string(m)) << "the same name in both operators";
    if (m != GemmReduceScatterMode::kAuto) EXPECT_EQ(fused::grs_mode(fused::grs_ar_mode(m)), m);
  }
  for (const char* gone : {"decode", "fused-rs", "fused-ce", "fused-lsa", ""})
    EXPECT_FALSE(parse_gemm_reduce_scatter_mode(gone).has_value()) << gone;
}

TEST(FusedRsPlan, ConfigCarriesEveryFieldToTheAllReduce) {
  GemmReduceScatterConfig c = rs_config(GemmReduceScatterMode::kFused, ScaleMode::kMxfp8);
  c.scale_layout = ScaleLayout::kPacked;
  c.exact_own = true;
  c.chunks = 3;
  c.mx_route = MxRoute::kNative;
  c.calibration = "x.txt";
  c.max_sms = 60;
  const GemmAllReduceConfig a = fused::grs_ar_config(c);
  EXPECT_EQ(a.n, c.n);
  EXPECT_EQ(a.k, c.k);
  EXPECT_EQ(a.m_max, c.m_max);
  EXPECT_EQ(a.quant, c.quant);
  EXPECT_EQ(a.scale_layout, c.scale_layout);
  EXPECT_EQ(a.mode, GemmAllReduceMode::kFused);
  EXPECT_EQ(a.exact_own, c.exact_own);
  EXPECT_EQ(a.chunks, c.chunks);
  EXPECT_EQ(a.mx_route, c.mx_route);
  EXPECT_EQ(a.calibration, c.calibration);
  EXPECT_EQ(a.max_sms, c.max_sms);
}

TEST(FusedRsPlan, ValidateNamesItsOwnRulesAndTheAllReducesRules) {
  EXPECT_EQ(GemmReduceScatter::validate(rs_config(GemmReduceScatterMode::kAuto), 8), "");
  auto c = rs_config(GemmReduceScatterMode::kAuto);
  c.m_max = 3;
  EXPECT_NE(GemmReduceScatter::validate(c, 4).find("m_max must be >= the world (4)"), std::string::npos);
  c = rs_config(GemmReduceScatterMode::kFused);
  c.m_max = 1000;
  const std::string why = GemmReduceScatter::validate(c, 8);
  EXPECT_NE(why.find("mode fused needs m_max >= world x 128 = 1024"), std::string::npos) << why;
  EXPECT_EQ(GemmReduceScatter::validate(c, 1), "") << "world 1 has one band: any m";
  c = rs_config(GemmReduceScatterMode::kAuto);
  c.n = 100;  // the all-reduce's rule: rows start 16-byte aligned
  EXPECT_NE(GemmReduceScatter::validate(c, 2).find("n must be a multiple of 8"), std::string::npos);
  EXPECT_NE(test::error_of([&] { gemm_reduce_scatter_window_bytes(c, 2); }).find("n must be a multiple of 8"),
            std::string::npos);
}

TEST(FusedRsPlan, MMustBeAMultipleOfTheWorldAndFusedNeedsWholeTileBands) {
  const auto autoc = rs_config(GemmReduceScatterMode::kAuto);
  std::string msg = test::error_of([&] { gemm_reduce_scatter_plan(autoc, 4, 1001); });
  EXPECT_NE(msg.find("argument 'm' must be a multiple of the world (4)"), std::string::npos) << msg;
  msg = test::error_of([&] { gemm_reduce_scatter_plan(autoc, 2, 0); });
  EXPECT_NE(msg.find("argument 'm'"), std::string::npos) << msg;
  // 8190 rows at W = 2: 4095 per rank, no whole tiles -> split with the reason; 8192 -> fused.
  const GemmReduceScatterPlan odd = gemm_reduce_scatter_plan(autoc, 2, 8190);
  EXPECT_EQ(odd.mode, GemmReduceScatterMode::kSplitLsa);
  EXPECT_NE(odd.reason.find("not a multiple of world x 128 = 256"), std::string::npos) << odd.reason;
  const GemmReduceScatterPlan even = gemm_reduce_scatter_plan(autoc, 2, 8192);
  EXPECT_EQ(even.mode, GemmReduceScatterMode::kFused) << even.reason;
  // An explicit fused at such m: planned as asked, the reason says it cannot run (run() refuses it).
  const GemmReduceScatterPlan asked = gemm_reduce_scatter_plan(rs_config(GemmReduceScatterMode::kFused), 4, 4100);
  EXPECT_EQ(asked.mode, GemmReduceScatterMode::kFused);
  EXPECT_NE(asked.reason.find("cannot run m = 4100"), std::string::npos) << asked.reason;
  // Few waves: split, as the all-reduce.
  EXPECT_EQ(gemm_reduce_scatter_plan(autoc, 2, 256).mode, GemmReduceScatterMode::kSplitLsa);
}

TEST(FusedRsPlan, OneLegOfBytesAndNoGatherInTheModel) {
  for (int world : {2, 4, 8}) {
    SCOPED_TRACE("W" + std::to_string(world));
    const int64_t m = 8192;
    const GemmReduceScatterPlan rs = gemm_reduce_scatter_plan(rs_config(GemmReduceScatterMode::kFused), world, m);
    GemmAllReduceConfig arc = fused::grs_ar_config(rs_config(GemmReduceScatterMode::kFused));
    const GemmAllReducePlan ar = gemm_all_reduce_plan(arc, world, m);
    EXPECT_EQ(rs.bytes_rs, m * 7168 * 2 * (world - 1) / world);
    EXPECT_EQ(rs.bytes_rs, ar.bytes_rs) << "the reduce-scatter leg is the all-reduce's first";
    EXPECT_EQ(rs.model_gemm_us, ar.model_gemm_us);
    EXPECT_LT(rs.model_comm_us, ar.model_comm_us) << "one leg, not two";
    EXPECT_LT(rs.model_split_us, ar.model_split_us);
    EXPECT_LE(rs.model_fused_us, ar.model_fused_us);
    EXPECT_EQ(rs.grid, ar.grid);
    EXPECT_EQ(rs.chunks, ar.chunks);
    EXPECT_EQ(rs.band_blocks, m / 128 / world) << "bands of m / W rows";
  }
  EXPECT_EQ(gemm_reduce_scatter_plan(rs_config(GemmReduceScatterMode::kAuto), 1, 4096).mode,
            GemmReduceScatterMode::kGemmOnly);
}

TEST(FusedRsPlan, FollowsTheMachineAndNeverTakesDecode) {
  const auto autoc = rs_config(GemmReduceScatterMode::kAuto);
  FusedPlanMachine apart;
  apart.nvlink_domain = false;
  EXPECT_EQ(gemm_reduce_scatter_plan(autoc, 2, 8192, apart).mode, GemmReduceScatterMode::kSplitNccl);
  FusedPlanMachine no_kernels;
  no_kernels.fused_kernels = false;
  EXPECT_EQ(gemm_reduce_scatter_plan(autoc, 2, 8192, no_kernels).mode, GemmReduceScatterMode::kSplitLsa);
  // The all-reduce takes decode at m <= 16 in bf16; the reduce-scatter has no decode mode.
  for (int64_t m : {2, 8, 16, 32}) {
    const GemmReduceScatterPlan p = gemm_reduce_scatter_plan(autoc, 2, m);
    EXPECT_EQ(p.mode, GemmReduceScatterMode::kSplitLsa) << "m " << m << ": " << p.reason;
    EXPECT_EQ(p.reason.find("decode"), std::string::npos) << p.reason;
  }
  FusedPlanMachine few;
  few.num_sms = 0;
  EXPECT_NE(test::error_of([&] { gemm_reduce_scatter_plan(autoc, 2, 8192, few); }).find("num_sms"), std::string::npos);
}

TEST(FusedRsPlan, WindowHoldsAReduceScatterOfABandPerRank) {
  const auto c = rs_config(GemmReduceScatterMode::kSplitLsa);
  for (int world : {2, 4, 8}) {
    const comm::OpShape s = fused::gar_split_shape(fused::grs_ar_config(c), world, 64, fused::ArLeg::kReduceScatter);
    EXPECT_EQ(s.op, CollectiveOp::kReduceScatter);
    EXPECT_EQ(s.max_count, static_cast<size_t>(c.m_max / world * c.n)) << "elements of one rank's output";
    EXPECT_TRUE(s.external_buffers) << "in place on the op's output region";
  }
  // The collective resolves its algorithm as plan_collective does; the op's constructor refuses a
  // layout whose shape differs (split-ce: the ce reduce-scatter's auto is its push).
  for (auto mode : {GemmReduceScatterMode::kSplitLsa, GemmReduceScatterMode::kSplitCe}) {
    const auto cfg = fused::grs_ar_config(rs_config(mode));
    const bool ce = mode == GemmReduceScatterMode::kSplitCe;
    PlanInputs in;
    in.op = CollectiveOp::kReduceScatter;
    in.bytes = static_cast<size_t>(cfg.m_max / 2 * cfg.n) * 2;
    in.transport = ce ? Transport::kCe : Transport::kLsa;
    const CollectivePlan cp = plan_collective(in);
    EXPECT_EQ(fused::gar_split_shape(cfg, 2, 64, fused::ArLeg::kReduceScatter).algorithm, cp.algorithm)
        << to_string(mode);
  }
  // The same regions as the all-reduce's op, named grs.*, no larger (its collective is smaller).
  WindowLayout layout;
  const fused::GarLayout g =
      fused::add_gar_regions(layout, fused::grs_ar_config(rs_config(GemmReduceScatterMode::kAuto)), 2, 64, "grs",
                             fused::ArLeg::kReduceScatter);
  EXPECT_TRUE(g.has_split);
  EXPECT_TRUE(g.has_staging);
  EXPECT_FALSE(g.has_pull);
  GemmAllReduceConfig arc = fused::grs_ar_config(rs_config(GemmReduceScatterMode::kAuto));
  EXPECT_LE(gemm_reduce_scatter_window_bytes(rs_config(GemmReduceScatterMode::kAuto), 2),
            gemm_all_reduce_window_bytes(arc, 2));
}
