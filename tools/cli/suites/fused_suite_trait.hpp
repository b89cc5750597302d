// What a fused operator tells the fused-suite engine (fused_suite_engine.cu), nccl-tests' shape:
// the engine owns the per-M loop, operands, baseline arms, timing, checks and rows; an operator
// is one FusedSuiteTrait (its arms, how to build its op, what its collective does to a rank's
// partial, and the words of its rows). `weave bench gemm-ar`, `gemm-rs`, `gemm-ag` and `ag-gemm` are
// such traits (gemm-ar and gemm-rs share row_parallel_suite.hpp, gemm-ag and ag-gemm gathered_suite.hpp).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/registry.hpp"
#include "cli/suites/fused_suite.hpp"
#include "comm/group.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "common/check.hpp"
#include "weave/collectives.hpp"
#include "weave/gemm.hpp"

namespace weave::cli::fused_bench {

// One arm as the engine sees it. Operator arms carry the op's mode as an int the trait reads back.
struct SuiteArm {
  std::string name;
  ArmKind kind = ArmKind::kOp;
  int mode = 0;               // kOp: the op's mode enum
  bool split = false;         // counts toward "best split" (the ratio column's baseline)
  bool partial = false;       // checked against this rank's own GEMM only (it moves nothing by design)
  bool reference = false;     // split-lsa: what by-design-equal arms are compared with, and --calibrate's fallback
  bool auto_takeable = false; // --calibrate may record it as a mode auto takes
  bool fused = false;         // its rows carry the overlap efficiency
  bool overlap_line = false;  // the fused arm of the per-M overlap line
};

// An arm of the operator in `mode`.
template <class Mode>
SuiteArm op_arm(const char* name, Mode mode) {
  return SuiteArm{.name = name, .kind = ArmKind::kOp, .mode = static_cast<int>(mode)};
}

// Builds a suite's arm list in timing order: an arm --arms did not name is dropped; an arm that
// cannot run in this world leaves a note (when wanted) saying why.
class ArmList {
 public:
  ArmList(const std::vector<std::string>& wanted, std::vector<std::string>& notes) : wanted_(wanted), notes_(notes) {}
  bool wanted(const std::string& name) const;
  void add(SuiteArm arm);
  void leave_out(const std::string& name, const std::string& why);
  // Adds `arm` unless `why` says why it cannot run here.
  void add_unless(SuiteArm arm, const std::string& why);
  // comm-only: not at world 1 (nothing_to: "nothing to reduce"); in the emulated world only when
  // --arms names it (emulated_note says why).
  void add_comm_only(int world, bool emulated, const char* nothing_to, const std::string& emulated_note);
  // The arms that need real NCCL communicators (--devices): added, or left out with the reason.
  void add_over_nccl(std::vector<SuiteArm> arms, bool over_nccl, bool emulated);
  std::vector<SuiteArm> take() { return std::move(arms_); }

 private:
  const std::vector<std::string>& wanted_;
  std::vector<std::string>& notes_;
  std::vector<SuiteArm> arms_;
};

// The GEMM tile of one call as its op's plan says ({0, 0}: the decode GEMV; split_k > 1: weave::
// Gemm's K split, GemmAllGather's split modes at small m): whether two arms' GEMMs sum in the same
// order (an arm equal to split-lsa only where it runs split-lsa's tile).
struct SuiteTile {
  int block_m = 0, block_n = 0;
  int split_k = 1;
  bool operator==(const SuiteTile&) const = default;
};

// One rank's operator in one mode, with the operator's type erased.
class SuiteOp {
 public:
  virtual ~SuiteOp() = default;
  virtual void run(int64_t m, const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t s) = 0;
  virtual char* output(int64_t m) = 0;  // the op's output of the last call of m rows
  virtual void check() = 0;
  virtual std::string last_mode() const = 0;
  virtual std::string reason(int64_t m) const = 0;  // its plan's reason at m
  virtual SuiteTile tile(int64_t m) const = 0;       // its plan's GEMM tile at m
};

// SuiteOp over a weave fused operator (GemmAllReduce, GemmAllGather, GemmReduceScatter,
// AllGatherGemm: the same call surface).
template <class Op>
class SuiteOpOf final : public SuiteOp {
 public:
  explicit SuiteOpOf(std::unique_ptr<Op> op) : op_(std::move(op)) {}
  void run(int64_t m, const bench::DeviceOperand& a, const bench::DeviceOperand& b, cudaStream_t s) override {
    op_->run(m, a.view, b.view, GemmScales{a.scale_view, b.scale_view}, s);
  }
  char* output(int64_t m) override { return static_cast<char*>(op_->output(m).data); }
  void check() override { op_->check(); }
  std::string last_mode() const override { return std::string(to_string(op_->last_mode())); }
  std::string reason(int64_t m) const override { return op_->plan(m).reason; }
  SuiteTile tile(int64_t m) const override {
    const auto p = op_->plan(m);
    SuiteTile t{p.block_m, p.block_n};
    if constexpr (requires { p.gemm_gemv; })  // GemmAllGather's split modes: weave::Gemm's GEMV
      if (p.gemm_gemv) return {0, 0};
    if constexpr (requires { p.gemm_split_k; }) t.split_k = p.gemm_split_k;  // weave::Gemm's K split
    return t;
  }

 private:
  std::unique_ptr<Op> op_;
};

// An operator's part of a fused suite. Every rank r holds A_r [m, k] and B_r [n, k]; a rank's
// output is `blocks(W)` blocks of own_rows(m) rows x n (all m rows, or its band), block b checked
// against those rows of block b of its expected reference (fp32), which the trait builds from the
// ranks' reference GEMMs. The collective moves the GEMM's output (gemm-ar, gemm-rs, gemm-ag), or
// its input (ag-gemm: A's rows and scales gathered first, then one GEMM of W m rows).
class FusedSuiteTrait {
 public:
  virtual ~FusedSuiteTrait() = default;

  // The op's shape (n, k: a rank's operands), quantisation and output, and the run's M list.
  struct Shape {
    int64_t n = 0, k = 0, m_max = 0;
    std::vector<int64_t> ms;
    ScaleMode quant = ScaleMode::kBF16;
    ScaleLayout layout = ScaleLayout::kRaw;
    DType out = DType::kBF16;
    std::string preset;  // the --preset this shape is ("" when none)
  };
  virtual const char* name() const = 0;  // "gemm-ar"
  virtual const Shape& shape() const = 0;

  // Every arm name --arms accepts; the arms of this world in timing order (a note for each arm
  // left out); the rank's op of a kOp arm (collective over `g`); comm-only's collective.
  virtual const std::vector<std::string>& arm_names() const = 0;
  virtual std::vector<SuiteArm> arms(int world, bool emulated, bool over_nccl, const std::vector<std::string>& wanted,
                                     std::vector<std::string>& notes) const = 0;
  virtual std::unique_ptr<SuiteOp> make_op(comm::Group& g, const SuiteArm& arm) const = 0;
  virtual CollectiveConfig comm_only_config() const { no_comm_only(); }
  // Why an arm cannot run at m ("" when it can).
  virtual std::string unavailable_at(const SuiteArm&, int64_t) const { return ""; }

  // Weights: every rank its own B_r (all-reduce: a K shard each) or one B everywhere.
  virtual bool distinct_weights() const = 0;
  // Blocks of m rows in a full output (gemm-ar 1, gemm-ag W), and whether a wrong count is kept
  // per source block (gemm-ag) or per rank (gemm-ar).
  virtual int blocks(int world) const = 0;
  virtual bool wrong_per_source() const = 0;
  // The rows of each block a rank's output holds: all m (gemm-ar, gemm-ag), or its band of the
  // sum (gemm-rs: m / W rows from row r m / W). Checked against those rows of the expected
  // output (partial arms: of its own reference GEMM); cuBLASLt's own GEMM always holds all m.
  struct OwnRows {
    int64_t first = 0, rows = 0;
  };
  virtual OwnRows own_rows(int64_t m, int /*rank*/, int /*world*/) const { return {0, m}; }
  // Whether the collective writes a separate output (gather) or works in place (all-reduce), or,
  // where it gathers the input, whether cuBLASLt's GEMM writes the output itself (false).
  virtual bool out_of_place() const = 0;

  // Where the collective gathers the GEMM's input (ag-gemm): the bytes of one row of A and of its
  // scales as they travel; {0, 0} (the default) where it moves the output. Then cuBLASLt's arms
  // run the GEMM of gemm_rows(m) = W m rows from a gathered A the engine owns (per arm: buffers, or
  // regions of its NCCL symmetric window), this rank's rows seeded in slot r once per M and the
  // other slots zero; over NCCL before_cublaslt fills the slots, and the engine NaN-poisons them
  // before every checked call (this rank's slot re-seeded), so a gather that moved nothing shows.
  struct InputRow {
    size_t bytes = 0, scale_bytes = 0;
  };
  virtual InputRow gathered_input_row() const { return {}; }
  bool gathers_input() const { return gathered_input_row().bytes > 0; }
  // The rows of one rank's GEMM at m (TFLOPS, cuBLASLt's problem).
  int64_t gemm_rows(int64_t m, int world) const { return gathers_input() ? m * world : m; }
  // algbw's bytes at m: what the collective delivers to a rank (nccl-tests' all-gather and
  // reduce-scatter convention): the full output (blocks of m x n), or the gathered input.
  double algbw_bytes(int64_t m, int world) const {
    const InputRow row = gathered_input_row();
    if (row.bytes > 0) return double(world) * double(m) * double(row.bytes + row.scale_bytes);
    return double(m) * double(shape().n) * double(dtype_bytes(shape().out)) * double(blocks(world));
  }
  // One cuBLASLt arm's gathered input: W m rows at `a` (their scales at `sa`, null for bf16), and
  // this rank's m rows to send: A_r as it is (plain buffers: out of place) or slot r (in place).
  struct GatheredInput {
    char* a = nullptr;
    char* sa = nullptr;
    const void* own_a = nullptr;
    const void* own_sa = nullptr;
  };
  // Before cuBLASLt's GEMM (gathers_input() only): what the baseline does first (nothing for
  // cuBLASLt's GEMM alone; NCCL's all-gather of the rows and scales into `in`).
  virtual void before_cublaslt(ArmKind, const GatheredInput& /*in*/, int64_t /*m*/, comm::Group&, cudaStream_t) const {}
  // Whether expected outputs come with per-element magnitudes (sums whose terms may cancel).
  virtual bool magnitudes() const = 0;

  // The expected output from the ranks' reference GEMMs (one block = m x n fp32 = `elems`):
  // on one GPU, source s's reference folded into the expected buffer (zeroed first, as are
  // the magnitudes); over NCCL, each rank's own reference combined by NCCL's collective.
  virtual void fold_reference(float* expected, float* mags, const float* ref_s, int s, size_t elems,
                              cudaStream_t stream) const = 0;
  virtual void collect_reference(float* expected, float* mags, const float* own_ref, size_t elems, ncclComm_t comm,
                                 cudaStream_t stream) const = 0;
  // The bound an arm's output meets: partial (its own GEMM), or the full output, summed by NCCL
  // (rounding each step) or not.
  virtual bench::Tolerance tolerance(bool partial, bool nccl_summed, int world) const = 0;
  // Whether an arm's output equals split-lsa's bit for bit by design, given the mode it ran and the
  // GEMM tiles its call and split-lsa's call of the same m ran.
  virtual bool equal_to_split(const SuiteArm& arm, const std::string& ran_mode, SuiteTile tile,
                              SuiteTile split_tile) const = 0;

  // comm-only: where this rank's input rows go (seeded with its reference before each check),
  // and one call (its output: own_rows of each block). An op without a comm-only arm keeps the
  // defaults (never called: its arms() adds none).
  virtual void* comm_only_input(Collective&, int64_t, int) const { no_comm_only(); }
  virtual void run_comm_only(Collective&, int64_t, int, cudaStream_t) const { no_comm_only(); }
  // After cuBLASLt's GEMM of the own rows into `c`: what the baseline does next (nothing, a copy,
  // or NCCL's collective into `out`).
  virtual void after_cublaslt(ArmKind kind, void* c, void* out, int64_t m, comm::Group& g, cudaStream_t s) const = 0;

  // Words: the header's shape ("n=7168 k=2048 (K_r, per rank) bf16 -> bf16"), what a world of one
  // rank does ("nothing reduced; ..."), the past participle of the collective ("reduced"); the key
  // of k and of the vs_lt column in the rows; busbw / algbw; a row's "checked" note ("": none);
  // extras of every row; lines printed under the table.
  virtual std::string header_shape() const = 0;
  virtual std::string world1_note() const = 0;
  virtual const char* verb() const = 0;
  virtual const char* k_key() const = 0;
  virtual const char* vs_lt_key() const = 0;
  virtual double busbw_factor(int world) const = 0;
  virtual std::string checked_note(const SuiteArm&) const { return ""; }
  virtual void add_row_extras(nlohmann::json&) const {}
  virtual std::vector<std::string> table_notes(int iters, int calls) const = 0;
  virtual std::string world1_label() const = 0;

 private:
  [[noreturn]] void no_comm_only() const {
    throw Error(Status::kInternal, "", "", std::string("weave bench ") + name() + ": no comm-only arm");
  }
};

// What every operator's trait holds: the op's config of the run (mode set per arm), the
// calibration table the auto arm reads (where the config takes one), and the shape; its ops are
// built by Op::Impl::create (instantiated where the op's impl.hpp is included).
template <class Op, class Config>
class OpSuiteTrait : public FusedSuiteTrait {
 public:
  const Shape& shape() const override { return shape_; }
  std::unique_ptr<SuiteOp> make_op(comm::Group& g, const SuiteArm& arm) const override {
    using Mode = decltype(Config::mode);
    Config c = base_;
    c.mode = static_cast<Mode>(arm.mode);
    if constexpr (requires { c.calibration; })
      if (c.mode == Mode::kAuto) c.calibration = calibration_;
    return std::make_unique<SuiteOpOf<Op>>(Op::Impl::create(g, c));
  }

 protected:
  OpSuiteTrait(Config base, std::string calibration, std::vector<int64_t> ms, std::string preset, DType out)
      : base_(std::move(base)), calibration_(std::move(calibration)) {
    shape_ = {.n = base_.n, .k = base_.k, .m_max = base_.m_max, .ms = std::move(ms), .quant = base_.quant,
              .layout = base_.scale_layout, .out = out, .preset = std::move(preset)};
  }
  Config base_;
  std::string calibration_;
  Shape shape_;
};

// split-lsa (the reference arm, a mode auto takes) and split-ce unless `ce_why` says why the
// copy engines cannot run here; both count toward the best split.
template <class Mode>
void add_split_arms(ArmList& list, Mode lsa, Mode ce, const std::string& ce_why) {
  SuiteArm split_lsa = op_arm("split-lsa", lsa);
  split_lsa.split = split_lsa.reference = split_lsa.auto_takeable = true;
  list.add(split_lsa);
  SuiteArm split_ce = op_arm("split-ce", ce);
  split_ce.split = true;
  list.add_unless(split_ce, ce_why);
}

// The arms over real NCCL communicators: split-nccl (a split arm) and, with `gather_baselines`,
// cuBLASLt + ncclAllGather on plain and on NCCL symmetric buffers (the gathering suites'; the
// reducing suites add their NCCL baselines with their opening arms). Said "not run" elsewhere.
template <class Mode>
void add_over_nccl_arms(ArmList& list, Mode split_nccl_mode, bool gather_baselines, bool over_nccl, bool emulated) {
  SuiteArm split_nccl = op_arm("split-nccl", split_nccl_mode);
  split_nccl.split = true;
  std::vector<SuiteArm> arms{split_nccl};
  if (gather_baselines) {
    arms.push_back({.name = "cublaslt+nccl", .kind = ArmKind::kCublasLtNccl});
    arms.push_back({.name = "cublaslt+nccl-sym", .kind = ArmKind::kCublasLtNcclSym});
  }
  list.add_over_nccl(arms, over_nccl, emulated);
}

// The suite options every fused suite has besides its shape.
struct FusedSuiteOptions : WorldOptions {
  std::string calibrate;    // write the fastest auto-takeable mode per M to this file
  std::string calibration;  // the auto arm consults this table (a --calibrate output)
};

// Checks the options every fused suite shares (bench, world, --calibrate's file, --timeout)
// before any GPU work; Error(kInvalidArgument) naming the option.
void check_suite_options(const BenchOptions& common, const FusedSuiteOptions& opt, const char* suite);

// Runs the suite of `trait` (its options checked); the exit status (0, or 1 when a row is wrong,
// differs from split-lsa or an arm failed).
int run_fused_suite(const BenchOptions& common, const FusedSuiteOptions& opt, const FusedSuiteTrait& trait);

// What a fused suite's subcommand says: its one-paragraph description, the modes --calibrate
// records and the config that reads the table (auto_modes empty: an op whose auto has nothing to
// choose, without --calibrate and --calibration), the world-1 line and the footer after "Worlds:"
// (the arms and columns).
struct SuiteHelp {
  const char* name = "";
  std::string description, auto_modes, config, world1, footer;
};
// Registers --calibrate and --calibration with `help`'s words, and the footer (the shared worlds
// text around help.world1, then help.footer).
void add_suite_help(CLI::App& app, FusedSuiteOptions& o, const SuiteHelp& help);

// Adds a fused suite's subcommand: the common bench options, the shape's (add_shape), the world
// options, --calibrate/--calibration and the help; its callback runs the suite of a Trait built
// from (options, world) once per --preset (shapes_of expands them).
template <class Trait, class Options, class AddShape, class ShapesOf>
void add_fused_suite(CLI::App& bench, BenchOptions& common, Options& o, const SuiteHelp& help, AddShape add_shape,
                     ShapesOf shapes_of) {
  CLI::App* app = bench.add_subcommand(help.name, help.description);
  add_common_bench_options(*app, common);
  add_shape(*app, o.shape);
  add_world_options(*app, o);
  add_suite_help(*app, o, help);
  const char* name = help.name;
  app->callback([&common, &o, name, shapes_of] {
    exit_code() = run_each_preset(common, o, name, shapes_of, [name](const BenchOptions& c, const Options& one) {
      // Every option first: nothing may probe a GPU or wait for one before the input is known good.
      check_suite_options(c, one, name);
      const Trait trait(one, world_of(c, one.emulate_world));
      return run_fused_suite(c, one, trait);
    });
  });
}

}  // namespace weave::cli::fused_bench
