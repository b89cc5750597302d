// The fused-suite engine's run (internal to the suites): set-up in fused_suite_engine.cu, one
// rank's arms at one M in fused_suite_rank.cu, the rows in fused_suite_rows.cpp.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "bench/cublaslt.hpp"
#include "bench/harness.hpp"
#include "cli/suites/fused_suite.hpp"
#include "cli/suites/fused_suite_trait.hpp"
#include "fused/calibration.hpp"
#include "weave/communicator.hpp"
#include "weave/gemm.hpp"

namespace weave::cli::fused_bench {

// bench::poison_nan fills multiples of 4 bytes: the buffers it poisons are sized so.
inline size_t round_up_4(size_t bytes) { return (bytes + 3) / 4 * 4; }

// One rank's object of one arm (made once; cuBLASLt's per M).
struct RankArm {
  std::unique_ptr<SuiteOp> op;
  std::unique_ptr<Collective> coll;
  std::unique_ptr<bench::CublasLtGemm> lt;
  std::vector<bench::CublasLtScales> lt_scales;
  std::vector<Gemm> gemms;               // weave-gemm: weave::Gemm per weight copy (cuBLASLt's problem, per M)
  bench::DeviceBuffer gemm_ws;           // their workspace (one call at a time)
  bench::DeviceBuffer lt_c, lt_out;      // cuBLASLt's (or weave-gemm's) C [gemm_rows(m), n]; out of place: the collective's output
  bench::DeviceBuffer lt_a, lt_sa;       // a trait that gathers the input: the gathered A [W m, k] and its scales
  std::unique_ptr<SymmetricWindow> sym;  // cublaslt+nccl-sym: "c" (and "out", or "a" and "sa") in an NCCL symmetric window
  std::string unavailable;               // why the arm cannot run here (the same on every rank)
  std::string share_plan, share_reason;  // weave-gemm, emulated world: the SM share's plan its Gemms are forced to
};

class SuiteRun {
 public:
  SuiteRun(const BenchOptions& common, const FusedSuiteOptions& opt, const FusedSuiteTrait& trait);
  int run();

 private:
  using State = RankState<RankArm>;
  // One M's operands and references: A_s and source s's reference GEMM (fp32 [m, n]) of every
  // source (over NCCL: rank r's own only), each rank's expected output (blocks x [m, n]) and
  // magnitudes: one copy on the shared GPU, or one per rank over NCCL.
  struct References {
    size_t elems = 0;  // m x n: one block
    std::vector<bench::DeviceOperand> as;
    std::vector<bench::DeviceBuffer> own, expected, mags;
    const float* expected_of(int r) const { return expected[expected.size() == 1 ? 0 : r].as<float>(); }
    const float* mags_of(int r) const {
      const auto& b = mags[mags.size() == 1 ? 0 : r];
      return b.bytes() ? b.as<float>() : nullptr;
    }
  };
  // One rank's call of run_rank.
  struct RankCall {
    comm::Group& g;
    int64_t m;
    const References& refs;
    std::vector<ArmResult>& res;
    State& st;
  };
  class Rows;

  void print_header(int device) const;
  void make_weights(int l2_bytes);
  void make_arms();
  References references(int64_t m, int device, cudaStream_t main_stream);
  GemmProblem problem(int64_t m) const;

  // fused_suite_rank.cu
  void run_rank(comm::Group& g, int64_t m, const References& refs, std::vector<ArmResult>& res);
  void prepare_gemm_arms(const RankCall& c);
  // weave-gemm: weave::Gemm of cuBLASLt's problem `prob` (as a caller plans it: every SM, raw
  // scales; in the emulated world planned for the rank's SM share and forced to that plan) into arm
  // i's own C, one per weight copy; kUnsupported / kUnavailable make it unavailable.
  void prepare_weave_gemm(const RankCall& c, size_t i, const GemmProblem& prob);
  // A trait that gathers the input (FusedSuiteTrait::gathered_input_row): cuBLASLt arm i's gathered
  // A (its buffers or its window's regions) and what this rank sends; this rank's rows into slot r;
  // the buffers set up for this M (zero, slot r seeded, over NCCL gathered once: blockscale's
  // scales are converted for cuBLASLt from what that gather brought).
  FusedSuiteTrait::GatheredInput gathered_input(const RankCall& c, size_t i) const;
  void seed_own_rows(const RankCall& c, size_t i);
  void prepare_gathered_input(const RankCall& c, size_t i);
  // The A cuBLASLt's GEMM of arm i reads: A_r, or the gathered [W m, k] and its scales.
  struct LtInput {
    TensorView a, scale_a;
  };
  LtInput lt_input(const RankCall& c, size_t i) const;
  void enqueue(const RankCall& c, size_t i, cudaStream_t s, int call);
  char* output_of(const RankCall& c, size_t i) const;
  size_t output_bytes(size_t i, int64_t m) const;
  void poison(const RankCall& c, size_t i);
  void check(const RankCall& c, size_t i, const char* when, bool fresh_call);
  void compare_with_reference_arm(const RankCall& c, const std::vector<size_t>& runnable);

  const BenchOptions& common_;
  const FusedSuiteOptions& opt_;
  const FusedSuiteTrait& t_;
  const FusedSuiteTrait::Shape& shape_;
  const char* name_;
  int world_ = 1;
  bool emulated_ = false, over_nccl_ = false;
  std::string world_tag_, quant_, out_name_;
  std::vector<SuiteArm> arms_;
  std::vector<std::string> notes_;  // the arms left out, and why
  int reference_arm_ = -1;          // split-lsa's index
  int copies_ = 1, calls_ = 1;
  std::unique_ptr<SuiteWorld> ranks_;
  std::vector<bench::DeviceOperand> bs_;  // B_s on rank s's GPU
  std::vector<std::unique_ptr<State>> states_;
};

// The rows of a run: per M, per arm the per-rank maximum of medians, #wrong and !=split summed
// over ranks; then the table, the closing lines, the JSON and --calibrate's table.
class SuiteRun::Rows {
 public:
  explicit Rows(const SuiteRun& run);
  void add(int64_t m, const std::vector<std::vector<ArmResult>>& res);
  void error(int64_t m, const std::string& what);  // an arm threw: the run stops at this M
  int finish(const SuiteDevice& gpu);              // the exit status

 private:
  bench::Row row_of(int64_t m, size_t i, const std::vector<std::vector<ArmResult>>& res,
                    const bench::Timing& timing) const;

  const SuiteRun& run_;
  bench::Report report_;
  fused::Calibration calibration_;
  std::vector<std::string> summary_lines_;
  bool failed_ = false;
  // Per M, the arms' times the rows are measured against.
  struct Baselines {
    double best_split, lt, lt_nccl, lt_sym, gemm, comm, fused, weave_gemm;
    std::string best_split_name;
  } base_{};
};

}  // namespace weave::cli::fused_bench
