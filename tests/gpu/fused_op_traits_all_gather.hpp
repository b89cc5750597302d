// GemmAllGather's trait for the typed emulated-world suite (fused_op_traits.hpp says what a trait
// supplies), and the one-hot operands its own tests (test_gemm_all_gather.cu) use too. Bodies:
// fused_op_traits_all_gather.cu.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "fused/all_gather/hooks.hpp"
#include "fused_op_traits.hpp"
#include "fused/all_gather/plan.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/gemm_all_gather.hpp"

namespace weave::test {

// One-hot operands with closed-form outputs (bf16), for protocol tests (OneHotOperands): B [n, k]
// the same on every rank. Then out[s*m + i, j] = B[j, onehot_col(seed, s, i)] exactly.
float ag_b_value(int64_t row, int64_t col);

struct AgOneHot : OneHotOperands {
  AgOneHot(int64_t m_max, int64_t n, int64_t k, int rank)
      : OneHotOperands(m_max, n, k, rank, [](int, int64_t row, int64_t col) { return ag_b_value(row, col); }) {}
  float b_value(int64_t row, int64_t col) const { return ag_b_value(row, col); }
  // Wrong elements of out [world*m, n] of `dt` (bf16 or fp32; dense rows), per source rank.
  std::vector<int64_t> wrong(const void* out, DType dt, uint64_t seed, int world, int64_t m) const;
  std::vector<int64_t> wrong(const std::vector<uint16_t>& out, uint64_t seed, int world, int64_t m) const {
    return wrong(out.data(), DType::kBF16, seed, world, m);
  }
  // EXPECTs 0 wrong elements from every source rank, naming `what` and the source.
  void expect_right(const std::vector<uint8_t>& out, DType dt, uint64_t seed, int world, int64_t m,
                    const std::string& what) const;
};

// One variant's closed form on the device: each gathered row's one-hot column (and, for ptpc
// operands, test::ptpc_row_scale of its source and row).
struct AgDeviceExpect {
  bench::DeviceBuffer cols, row_scales;  // int [world*m]; float [world*m] (empty without ptpc)
  const AgOneHot* oh;
  int64_t rows;
  AgDeviceExpect(const AgOneHot& oh, uint64_t seed, int world, int64_t m, bool with_ptpc);
  // Adds the wrong elements of `out` (bf16 [world*m, n]; ptpc: each row times its scale) to *wrong.
  void count_wrong(const void* out, bool ptpc, unsigned long long* wrong, int blocks, cudaStream_t st) const;
};

// The reference of a fused output of random operands: every source rank's rows against
// gpu_reference_gemm(A_s, B) (a plain CUDA-core GEMM, not weave's kernel), within the GEMM
// tolerance and the whole-output relative-L2 bound. bs[0] is B (the same on every rank).
struct AgReference {
  const QuantCase& q;
  GemmProblem p;
  const std::vector<bench::DeviceOperand>& as;
  const bench::DeviceOperand& b;
  int dev;
  cudaStream_t st;
  AgReference(const QuantCase& q, const GemmProblem& p, const std::vector<bench::DeviceOperand>& as,
              const std::vector<bench::DeviceOperand>& bs, int rank, int dev, cudaStream_t st)
      : q(q), p(p), as(as), b(bs[0]), dev(dev), st(st) { (void)rank; }
  void expect_close(const std::vector<uint8_t>& out, const std::string& arm) const;
};

struct AllGatherTraits {
  using Op = GemmAllGather;
  using Config = GemmAllGatherConfig;
  using Hooks = fused::GemmAllGatherHooks;  // the internal testing hooks
  using Mode = GemmAllGatherMode;
  using OneHot = AgOneHot;
  using DeviceExpect = AgDeviceExpect;
  using Reference = AgReference;
  static constexpr const char* kName = "GemmAllGather";
  static constexpr auto kQuants = with_e4m3_quants(std::array<QuantCase, 2>{{
      {ScaleMode::kBF16, ScaleLayout::kRaw, DType::kBF16, "bf16->bf16"},
      {ScaleMode::kBF16, ScaleLayout::kRaw, DType::kF32, "bf16->fp32"},
  }});
  static constexpr Mode kFused = Mode::kFusedLsa;
  static constexpr bool kBPerRank = false;

  static constexpr auto config = fused_config<Config, Mode>;
  static std::unique_ptr<Op> create(comm::Group& g, const Config& c, const Hooks& h = {});
  // The tiles an op of `c` may run (EveryBuiltTileFusedEqualsSplit forces each).
  static std::vector<gemm::TileCandidate> tile_candidates(const Config& c) { return fused::gag_tile_candidates(c); }
  static int64_t out_rows(int world, int64_t m) { return world * m; }
  static const char* peer_output(Op& op, int peer);

  // SelfTestEveryModeQuantAndWorld: M of one row, a partial tile, one tile and many tiles.
  static constexpr Mode kSelfTestModes[] = {Mode::kSplitLsa, Mode::kSplitCe, Mode::kFusedLsa, Mode::kFusedCe,
                                            Mode::kAuto};
  static constexpr OpShape kSelfTestShape{256, 512, 1100};
  static constexpr int64_t kSelfTestMs[] = {1, 7, 128, 1000};
  // SelfTestFailsWhenNothingMoves: what each rank's share of the output is.
  static constexpr const char* kOwnShareIsLocal = "own rows are computed locally";
  static constexpr const char* kPeerShareMissing = "the peer's rows were never sent";

  // FusedEqualsSplitBitwiseAndMatchesReference (per source rank); the test adds one random M.
  static constexpr OpShape kNumericsShape{512, 1024, 8192};
  static constexpr int64_t kNumericsMs[] = {1, 7, 128, 1000, 2048, 8192};
  static constexpr double kNumericsTimeoutS = 20;
  static bool numerics_runs(int world, int64_t m) { return world != 8 || m == 1 || m == 128 || m == 1000; }
  static std::vector<Arm<Config, Mode>> numerics_arms();

  // BackToBackCallsOfChangingMWithASlowRank.
  static constexpr OpShape kBackToBackShape{256, 512, 1100};
  static constexpr int64_t kBackToBackMs[] = {1000, 7, 128, 1, 640, 1100, 300};
  static constexpr Mode kBackToBackModes[] = {Mode::kFusedLsa, Mode::kSplitLsa, Mode::kAuto, Mode::kFusedCe};
  static void slow_down_for_back_to_back(Hooks& h, int rank, int world, Mode mode);

  // GraphReplaysAcrossTheEpochWrapWithChangingInputs: two M, every mode's graph per rank.
  static constexpr OpShape kGraphShape{256, 256, 512};
  static constexpr int64_t kGraphMs[2] = {512, 77};
  static constexpr Mode kGraphModes[] = {Mode::kFusedLsa, Mode::kSplitLsa, Mode::kFusedCe};
  // Rows of a call's output that a peer may still read after this rank's call ended (its copy
  // engine pulling them in its own, slower call): fused-ce's own rows [r m, (r + 1) m).
  static RowRange rows_peers_read(Mode mode, int, int64_t m, int rank) {
    return gemm_all_gather_rows_peers_read(mode, m, rank);
  }

  // APeerThatNeverArrivesTimesOutNamingIt: one call of m = m_max.
  static constexpr OpShape kTimeoutShape{256, 256, 256};
  static constexpr Mode kTimeoutModes[] = {Mode::kFusedLsa, Mode::kSplitLsa, Mode::kFusedCe};

  // RanksThatDisagreeOnMAreAMismatchOnEveryRank: with the credit (found before any store) and
  // without it (a testing hook: found on the arrival flags after the stores).
  static constexpr OpShape kDisagreeShape{256, 256, 1100};
  static constexpr Mode kDisagreeModes[] = {Mode::kFusedLsa, Mode::kFusedCe};
  static constexpr bool kDisagreeCredits[] = {true, false};

  // RandomisedSoak: a model layer's N = 7168, K_r = 2048, M up to 1024 per rank (W x M rows
  // gathered); soak_worlds says the calls and their cost.
  static constexpr OpShape kSoakShape{7168, 2048, 1024};
  static std::vector<SoakWorld<Mode>> soak_worlds();

  // CalibrationTableIsFollowedAndCheckedAtConstruction.
  static constexpr CalibrationCase<Mode> kCalibration{{256, 256, 256}, 100,  Mode::kSplitLsa, Mode::kFusedLsa,
                                                      "m 100 fused-lsa\n", "m 100 split-lsa\n", "m 100 fused-lsa\n"};
  static std::string calibration_header(int64_t k);
  static std::vector<BadConfig<Config>> bad_calibrated_configs();  // with the good table

  // CallerOutputIsTheWindowViewCopiedAfterTheCall: M of one row, a partial tile and five tiles.
  static constexpr OpShape kCallerOutShape{256, 256, 640};
  static constexpr Mode kCallerOutModes[] = {Mode::kFusedLsa, Mode::kSplitLsa, Mode::kFusedCe, Mode::kAuto};
  static constexpr int kCallerOutQuants[] = {0, 1};  // bf16 -> bf16, bf16 -> fp32
  static constexpr int64_t kCallerOutMs[] = {1, 77, 640};
  static bool caller_out_graphs(Mode) { return true; }

  // BadInputsAreClearErrors beyond the rules every fused op has.
  static std::vector<BadConfig<Config>> bad_configs();
  static std::vector<BadConfig<Config>> refused_at_construction() { return {}; }
};

}  // namespace weave::test
