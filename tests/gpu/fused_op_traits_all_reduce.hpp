// GemmAllReduce's trait for the typed emulated-world suite (fused_op_traits.hpp says what a trait
// supplies), and the operands and references its own tests (test_gemm_all_reduce*.cu) use too.
// Bodies: fused_op_traits_all_reduce.cu.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "fused/all_reduce/hooks.hpp"
#include "fused_op_traits.hpp"
#include "fused/all_reduce/plan.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/gemm_all_reduce.hpp"

namespace weave::test {

// One-hot operands with closed-form outputs (bf16), for protocol tests (OneHotOperands): rank s's
// B_s [n, k] hashed with s. Then out[i, j] = sum_s B_s[j, onehot_col(seed, s, i)] exactly
// (|sum| <= 64).
float ar_b_value(int s, int64_t row, int64_t col);

struct ArOneHot : OneHotOperands {
  ArOneHot(int64_t m_max, int64_t n, int64_t k, int rank) : OneHotOperands(m_max, n, k, rank, ar_b_value) {}
  float b_value(int64_t row, int64_t col) const { return ar_b_value(rank, row, col); }
  // The expected output [m, n] as bf16 bits (exact); ptpc: each rank's term times its row scale
  // (PtpcOneHot: powers of two, so still exact, |sum| <= 64 in steps of 1/2).
  std::vector<uint16_t> expected(uint64_t seed, int world, int64_t m, bool ptpc = false) const;
  int64_t wrong(const std::vector<uint16_t>& out, uint64_t seed, int world, int64_t m) const;
  // EXPECTs 0 wrong elements of out [m, n] (bf16 bits), naming `what`.
  void expect_right(const std::vector<uint8_t>& out, DType dt, uint64_t seed, int world, int64_t m,
                    const std::string& what) const;
};

// Adds the elements of out that differ from want (bf16 bits, `elems` of each) to *wrong.
void ar_count_diff(const void* out, const void* want, int64_t elems, unsigned long long* wrong, int blocks,
                   cudaStream_t st);

// One variant's closed form on the device: the expected output (and ptpc's, with row scales).
struct ArDeviceExpect {
  bench::DeviceBuffer want, want_ptpc;  // bf16 [m, n] each (want_ptpc empty without ptpc)
  int64_t elems;
  ArDeviceExpect(const ArOneHot& oh, uint64_t seed, int world, int64_t m, bool with_ptpc);
  void count_wrong(const void* out, bool ptpc, unsigned long long* wrong, int blocks, cudaStream_t st) const {
    ar_count_diff(out, (ptpc ? want_ptpc : want).get(), elems, wrong, blocks, st);
  }
};

// The sum over source ranks of gpu_reference_gemm(A_s, B_s) (a plain CUDA-core GEMM, not weave's
// kernel) and of the terms' magnitudes (testing/reduce_reference.hpp bounds a sum whose terms cancel).
struct SummedReference {
  bench::DeviceBuffer sum, mag;
  SummedReference(const std::vector<bench::DeviceOperand>& as, const std::vector<bench::DeviceOperand>& bs,
                  const GemmProblem& p, cudaStream_t st);
};

// The reference of a fused output of random operands: the summed reference, within the bound of
// a sum of bf16 partials (testing/reduce_reference.hpp) and the whole-output relative-L2 bound.
struct ArReference {
  const QuantCase& q;
  GemmProblem p;
  int world, rank, dev;
  cudaStream_t st;
  SummedReference want;
  ArReference(const QuantCase& q, const GemmProblem& p, const std::vector<bench::DeviceOperand>& as,
              const std::vector<bench::DeviceOperand>& bs, int rank, int dev, cudaStream_t st)
      : q(q), p(p), world(static_cast<int>(as.size())), rank(rank), dev(dev), st(st), want(as, bs, p, st) {}
  void expect_close(const std::vector<uint8_t>& out, const std::string& arm) const;
};

struct AllReduceTraits {
  using Op = GemmAllReduce;
  using Config = GemmAllReduceConfig;
  using Hooks = fused::GemmAllReduceHooks;  // the internal testing hooks
  using Mode = GemmAllReduceMode;
  using OneHot = ArOneHot;
  using DeviceExpect = ArDeviceExpect;
  using Reference = ArReference;
  static constexpr const char* kName = "GemmAllReduce";
  static constexpr auto kQuants =
      with_e4m3_quants(std::array<QuantCase, 1>{{{ScaleMode::kBF16, ScaleLayout::kRaw, DType::kBF16, "bf16"}}});
  static constexpr Mode kFused = Mode::kFused;
  static constexpr bool kBPerRank = true;

  static constexpr auto config = fused_config<Config, Mode>;  // output: bf16
  static std::unique_ptr<Op> create(comm::Group& g, const Config& c, const Hooks& h = {});
  // The tiles an op of `c` may run (EveryBuiltTileFusedEqualsSplit forces each).
  static std::vector<gemm::TileCandidate> tile_candidates(const Config& c) { return fused::gar_tile_candidates(c); }
  static int64_t out_rows(int, int64_t m) { return m; }
  static const char* peer_output(Op& op, int peer);

  // SelfTestEveryModeQuantAndWorld: M of one row, a partial tile, one tile and many tiles.
  static constexpr Mode kSelfTestModes[] = {Mode::kSplitLsa, Mode::kSplitCe, Mode::kFused, Mode::kFusedRs,
                                            Mode::kFusedCe, Mode::kAuto};
  static constexpr OpShape kSelfTestShape{384, 256, 4100};
  static constexpr int64_t kSelfTestMs[] = {1, 33, 128, 1000, 4096};
  // SelfTestFailsWhenNothingMoves: what each rank's share of the output is.
  static constexpr const char* kOwnShareIsLocal = "the own term is computed locally";
  static constexpr const char* kPeerShareMissing = "the peer's term never arrived";

  // FusedEqualsSplitBitwiseAndMatchesReference (the sum over ranks); the test adds one random M.
  // 16384 at W = 2 only (every rank regenerates every source's A on the host: W^2 quantisations).
  static constexpr OpShape kNumericsShape{512, 512, 16384};
  static constexpr int64_t kNumericsMs[] = {1, 33, 128, 1000, 4096, 8192, 16384};
  static constexpr double kNumericsTimeoutS = 10;
  static bool numerics_runs(int world, int64_t m) {
    return !(m > 8192 && world > 2) && (world != 8 || m == 1 || m == 128 || m == 1000);
  }
  static std::vector<Arm<Config, Mode>> numerics_arms();

  // BackToBackCallsOfChangingMWithASlowRank.
  static constexpr OpShape kBackToBackShape{512, 256, 4096};
  static constexpr int64_t kBackToBackMs[] = {4096, 7, 128, 1, 640, 1100, 3000, 33};
  static constexpr Mode kBackToBackModes[] = {Mode::kFused, Mode::kSplitLsa, Mode::kAuto, Mode::kFusedCe};
  static void slow_down_for_back_to_back(Hooks& h, int rank, int world, Mode mode);

  // GraphReplaysAcrossTheEpochWrapWithChangingInputs: fused-ce's graphs cannot be one per rank in
  // the emulated world (FusedCeGraphReplaysInOneGraphAcrossTheEpochWrap, test_gemm_all_reduce.cu).
  static constexpr OpShape kGraphShape{256, 256, 1024};
  static constexpr int64_t kGraphMs[2] = {1024, 77};
  static constexpr Mode kGraphModes[] = {Mode::kFused, Mode::kSplitLsa};
  // (As AllGatherTraits'.) fused-ce's peers pull this rank's band of final rows: row blocks
  // [r band, (r + 1) band), band = ceil(ceil(m / 128) / world) (fused/all_reduce/schedule.hpp).
  static RowRange rows_peers_read(Mode mode, int world, int64_t m, int rank) {
    return gemm_all_reduce_rows_peers_read(mode, world, m, rank);
  }

  // APeerThatNeverArrivesTimesOutNamingIt: one call of m = m_max.
  static constexpr OpShape kTimeoutShape{512, 256, 1024};
  static constexpr Mode kTimeoutModes[] = {Mode::kFused, Mode::kSplitLsa, Mode::kFusedCe};

  // RanksThatDisagreeOnMAreAMismatchOnEveryRank: rows and bands cut from each rank's own m.
  static constexpr OpShape kDisagreeShape{512, 256, 1100};
  static constexpr Mode kDisagreeModes[] = {Mode::kFused, Mode::kFusedRs, Mode::kFusedCe};
  static constexpr bool kDisagreeCredits[] = {true};

  // RandomisedSoak: a model layer's N = 7168, K_r = 2048 (TP of a 7168-wide model), M up to 1200
  // (decode batches to several bands per rank); soak_worlds says the calls and their cost.
  static constexpr OpShape kSoakShape{7168, 2048, 1200};
  static std::vector<SoakWorld<Mode>> soak_worlds();

  // CalibrationTableIsFollowedAndCheckedAtConstruction: auto follows the table per M where the op
  // can run the mode.
  static constexpr CalibrationCase<Mode> kCalibration{{256, 256, 1024},         128, Mode::kSplitLsa, Mode::kFused,
                                                      "m 128 fused\nm 1024 split-lsa\n", "m 128 split-lsa\n",
                                                      "m 128 fused\n"};
  static std::string calibration_header(int64_t k);
  static std::vector<BadConfig<Config>> bad_calibrated_configs() { return {}; }

  // CallerOutputIsTheWindowViewCopiedAfterTheCall: M of one row, just over a decode batch and
  // several bands; auto takes decode at M = 1.
  static constexpr OpShape kCallerOutShape{256, 256, 600};
  static constexpr Mode kCallerOutModes[] = {Mode::kFused, Mode::kSplitLsa, Mode::kFusedRs, Mode::kFusedCe, Mode::kAuto};
  static constexpr int kCallerOutQuants[] = {0};
  static constexpr int64_t kCallerOutMs[] = {1, 33, 600};
  // Graphs of the modes the per-rank graph tests run (fused, split-lsa; auto takes one of them
  // here): fused-ce cannot run one graph per rank in the emulated world, fused-rs is not in them.
  static bool caller_out_graphs(Mode mode) { return mode != Mode::kFusedCe && mode != Mode::kFusedRs; }

  // BadInputsAreClearErrors beyond the rules every fused op has.
  static std::vector<BadConfig<Config>> bad_configs();
  static std::vector<BadConfig<Config>> refused_at_construction();
};

}  // namespace weave::test
