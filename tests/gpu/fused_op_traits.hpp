// What a fused operator's trait gives the typed emulated-world suite (fused_op_typed.hpp): the
// behaviours both GemmAllGather and GemmAllReduce have (self-tests, fused bitwise equal to split,
// back-to-back calls, graph replays, timeouts, ranks that disagree on m, the soak, calibration,
// the caller's out, bad inputs) are written once, over a trait per operator
// (fused_op_traits_all_gather.hpp, fused_op_traits_all_reduce.hpp). A new fused operator costs
// one trait and one entry in FusedOps, not another mirrored test file.
//
// A trait T supplies (both traits show every member):
//   types       Op, Config, Hooks (the internal testing hooks), Mode; OneHot (one-hot operands with closed-form outputs: see below);
//               DeviceExpect (one variant's closed form on the device); Reference (random operands'
//               reference: per source for all-gather, the sum over ranks for all-reduce)
//   kName       the op's class name ("GemmAllGather"): the typed suite's name is EmulatedFusedOp/kName
//   kQuants     every quant x layout x out dtype the op runs (index 0: bf16 -> bf16)
//   kFused      the main fused mode (fused-lsa / fused); kBPerRank: each rank has its own B
//   config(q, mode, n, k, m_max) (fused_config), create(group, config, hooks = {}), out_rows(world, m) (rows
//   of a call's output), peer_output(op, peer) (a peer's output region as mapped on this rank)
//   per behaviour, what the two operators' tests differ in: values k<Behaviour>* (modes, shapes,
//   M lists) and hooks (numerics_arms, slow_down_for_back_to_back, soak_worlds,
//   calibration_header, bad_calibrated_configs, caller_out_graphs, bad_configs,
//   refused_at_construction).
//
// OneHot (a OneHotOperands, below: A one-hot, B small integers, so every output element is
// exact) adds OneHot(m_max, n, k, rank); b_value(row, col) (this rank's B); expect_right(host
// bytes, out dtype, seed, world, m, what) (EXPECTs that name what is wrong).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "common/hash.hpp"
#include "support/fused_output_rows.hpp"  // RowRange, poison_rows_except
#include "testing/gemm_operands.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"

namespace weave::test {

// One quant case: operands' scale mode and layout, and the output dtype (all-reduce: bf16 only).
struct QuantCase {
  ScaleMode quant;
  ScaleLayout layout;
  DType out;
  const char* name;
};

// The e4m3 quants every fused op runs (bf16 output), after each op's bf16 cases in its kQuants.
inline constexpr std::array<QuantCase, 5> kE4m3Quants = {{
    {ScaleMode::kPtpc, ScaleLayout::kRaw, DType::kBF16, "ptpc"},
    {ScaleMode::kBlockscale, ScaleLayout::kRaw, DType::kBF16, "blockscale"},
    {ScaleMode::kMxfp8, ScaleLayout::kRaw, DType::kBF16, "mxfp8-raw"},
    {ScaleMode::kMxfp8, ScaleLayout::kPacked, DType::kBF16, "mxfp8-packed"},
    {ScaleMode::kBlockscale, ScaleLayout::kMnMajor, DType::kBF16, "blockscale-mn"},
}};

// An op's bf16 cases, then kE4m3Quants: the op's kQuants.
template <std::size_t N>
constexpr std::array<QuantCase, N + kE4m3Quants.size()> with_e4m3_quants(const std::array<QuantCase, N>& bf16) {
  std::array<QuantCase, N + kE4m3Quants.size()> all{};
  for (std::size_t i = 0; i < N; ++i) all[i] = bf16[i];
  for (std::size_t i = 0; i < kE4m3Quants.size(); ++i) all[N + i] = kE4m3Quants[i];
  return all;
}

// The config of an op of quant q (operands' scale mode and layout; the output dtype where the op
// has a choice) in `mode`, N, K and the capacity m_max; the rest as the config's defaults.
template <class Config, class Mode>
Config fused_config(const QuantCase& q, Mode mode, int64_t n, int64_t k, int64_t m_max) {
  Config c;
  c.n = n;
  c.k = k;
  c.m_max = m_max;
  c.quant = q.quant;
  c.scale_layout = q.layout;
  if constexpr (requires { c.out_dtype; }) c.out_dtype = q.out;
  c.mode = mode;
  return c;
}

// What every op's OneHot shares: rank s's A row i is one-hot at onehot_col(seed, s, i) (bf16
// [m_max, k], this rank's current A in `a`), B [n, k] bf16 small integers from b_of(rank, row, col)
// (each op's hash; all-gather's ignores the rank). Outputs are then exact (the op's closed form).
inline int onehot_col(uint64_t seed, int s, int64_t i, int64_t k) {
  return static_cast<int>(mix64(seed * 7919 + s * 1000003ull + i) % k);
}

struct OneHotOperands {
  int64_t m_max, n, k;
  int rank;
  bench::DeviceBuffer b;  // [n, k] bf16: this rank's B
  bench::DeviceBuffer a;  // [m_max, k] bf16 (this rank's current A)
  OneHotOperands(int64_t m_max_, int64_t n_, int64_t k_, int rank_, float (*b_of)(int, int64_t, int64_t))
      : m_max(m_max_), n(n_), k(k_), rank(rank_), b(n_ * k_ * 2), a(m_max_ * k_ * 2) {
    std::vector<uint16_t> hb(n * k);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c) hb[r * k + c] = ref::float_to_bf16(b_of(rank, r, c));
    b.upload(hb.data(), hb.size() * 2);
  }
  std::vector<uint16_t> host_a(uint64_t seed, int64_t m) const {
    std::vector<uint16_t> ha(m_max * k, 0);
    const uint16_t one = ref::float_to_bf16(1.0f);
    for (int64_t i = 0; i < m; ++i) ha[i * k + onehot_col(seed, rank, i, k)] = one;
    return ha;
  }
  void set_a(uint64_t seed, int64_t m) {
    const auto ha = host_a(seed, m);
    a.upload(ha.data(), ha.size() * 2);
  }
  TensorView a_view(int64_t m, int dev) const { return TensorView::matrix(a.get(), DType::kBF16, m, k, dev); }
  TensorView b_view(int dev) const { return TensorView::matrix(b.get(), DType::kBF16, n, k, dev); }
};

// An op shape for a test: N, K, and the capacity m_max.
struct OpShape {
  int64_t n, k, m_max;
};

// One op of FusedEqualsSplitBitwiseAndMatchesReference, called in the order of the trait's list.
// Members left out of a designated initialiser are empty (no default member initialisers: GCC 12
// crashes on one of class type here).
template <class Config, class Mode>
struct Arm {
  const char* name;
  Mode mode;
  void (*tweak)(Config&);                        // the config beyond mode (none: nullptr)
  bool (*present)(const QuantCase&, int world);  // where the arm runs (nullptr: everywhere)
  std::optional<Mode> last;                      // what last_mode() must say (none: unchecked)
  std::vector<const char*> twins;                // bitwise equal to the first of these present
  bool reference;                                // held to the trait's Reference
};

// A config that validate() (or the constructor, in an emulated world of 2) refuses, naming the rule.
template <class Config>
struct BadConfig {
  void (*tweak)(Config&);
  const char* needle;
  Status status = Status::kInvalidArgument;  // the constructor's status (validate() returns text)
};

// RandomisedSoak: ops interleaved in one run of `calls` calls; the runs of one emulated world.
template <class Mode>
struct SoakOp {
  int quant;                  // index into kQuants (bf16 or ptpc: the soak's operands)
  Mode mode;
  bool if_it_fits = false;    // left out where the mode does not fit the emulated world's queues
  int slow_puller = -1;       // this rank's copies start delay_pull_ns late (fused-ce)
  uint64_t delay_pull_ns = 0;
};
template <class Mode>
struct SoakRun {
  std::vector<SoakOp<Mode>> ops;
  int calls;
  uint64_t seed;    // the shared sequence of m, ops and late ranks
  uint64_t a_seed;  // variant v's A is OneHot::host_a(a_seed + v, m)
};
template <class Mode>
struct SoakWorld {
  int world;
  bool needs_copy_streams;  // a failure, not a silent skip, where the emulated world cannot run them
  std::vector<SoakRun<Mode>> runs;
};

// CalibrationTableIsFollowedAndCheckedAtConstruction: an auto op of `shape` whose model says
// `model` at m, and a table that says `table` there.
template <class Mode>
struct CalibrationCase {
  OpShape shape;
  int64_t m;
  Mode model, table;
  const char* good_rows;     // the table auto follows
  const char* other_rows;    // another table (ranks reading different tables: kMismatch)
  const char* wrong_k_rows;  // rows of a table for K = 512 (kInvalidArgument at construction)
};

}  // namespace weave::test
