// Shared pieces of the weave::Gemm GPU tests: guarded device allocations, operand sets with their
// fp64 reference, and one poisoned-run-and-compare step.
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gemm/planner.hpp"
#include "testing/gemm_operands.hpp"
#include "testing/gpu_reference.hpp"
#include "testing/poison_nan.hpp"
#include "weave/error.hpp"
#include "weave/gemm.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

namespace weave::test {

// A device allocation followed by kGuardBytes of a known pattern; guard_intact() reads it back.
// The payload ends exactly where the guard begins, so a write one element past a tensor (the
// last row, the last K step, the last scale) lands in the guard.
class Guarded {
 public:
  static constexpr std::size_t kGuardBytes = 4096;
  static constexpr unsigned char kPattern = 0xA5;
  Guarded() = default;
  explicit Guarded(std::size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr_, bytes + kGuardBytes), cudaSuccess);
    EXPECT_EQ(cudaMemset(static_cast<char*>(ptr_) + bytes, kPattern, kGuardBytes), cudaSuccess);
  }
  ~Guarded() {
    if (ptr_) cudaFree(ptr_);
  }
  Guarded(Guarded&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  Guarded& operator=(Guarded&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* host) const {
    ASSERT_EQ(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  bool guard_intact() const {
    std::vector<unsigned char> g(kGuardBytes);
    if (cudaMemcpy(g.data(), static_cast<char*>(ptr_) + bytes_, kGuardBytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      return false;
    for (unsigned char b : g)
      if (b != kPattern) return false;
    return true;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

// A, B and scales of one problem on device 0 in guarded buffers, with the fp64 reference.
// mxfp8 holds both scale layouts: raw ue8m0 in sa/sb (scales) and the pack_mxfp8_scales words in
// sa_packed/sb_packed (scales_packed); p.scale_layout picks what scales_for() returns.
// Launches per correctness case: pipeline races show intermittently (REFERENCE.md, lesson 3).
constexpr int kRepeats = 20;

// A scale mode with the scale layout it reads (mxfp8: raw or packed; blockscale: raw or
// mn-major; kRaw for the rest).
struct Mode {
  ScaleMode mode;
  ScaleLayout layout;
};
// Every mode and layout weave::Gemm runs.
inline constexpr Mode kModes[] = {{ScaleMode::kBF16, ScaleLayout::kRaw},
                                  {ScaleMode::kPtpc, ScaleLayout::kRaw},
                                  {ScaleMode::kBlockscale, ScaleLayout::kRaw},
                                  {ScaleMode::kBlockscale, ScaleLayout::kMnMajor},
                                  {ScaleMode::kMxfp8, ScaleLayout::kRaw},
                                  {ScaleMode::kMxfp8, ScaleLayout::kPacked}};

// The tiles of `p` and of its fp32-output twin (what split-K runs) are built in this build.
inline bool split_k_tiles_built(const GemmProblem& p) {
  GemmProblem f = p;
  f.out_dtype = DType::kF32;
  return !gemm::gemm_tile_candidates(p).empty() && !gemm::gemm_tile_candidates(f).empty();
}

// A GEMM shape; `exact` selects integer-valued inputs with power-of-two scales (bitwise compare).
struct Shape {
  int64_t m, n, k;
  bool exact;
};

struct OperandSet {
  GemmProblem p;  // out_dtype set per run
  ref::QuantMatrix qa, qb;
  Guarded a, b, sa, sb, sa_packed, sb_packed, sa_mn;
  TensorView va, vb;
  GemmScales scales, scales_packed, scales_mn;  // scales_mn: blockscale, A's scales M-contiguous
  std::vector<double> ref;  // [M, N] fp64
  double rms = 0;
  bool exact = false;  // integer-valued inputs and power-of-two scales: bitwise comparable
  const GemmScales& scales_for(ScaleLayout layout) const {
    return layout == ScaleLayout::kPacked ? scales_packed : layout == ScaleLayout::kMnMajor ? scales_mn : scales;
  }
};

inline Guarded upload_values(const ref::QuantMatrix& q) {
  const std::size_t bytes = q.mode == ScaleMode::kBF16 ? q.bf16.size() * 2 : q.e4m3.size();
  Guarded g(bytes);
  g.upload(q.mode == ScaleMode::kBF16 ? static_cast<const void*>(q.bf16.data()) : q.e4m3.data());
  return g;
}

// Integer-valued operand with power-of-two scales: elements in [-2, 2], scales 2^[-2, 2]. Every
// product and partial sum is then exact in fp32 (and in the fp8 tensor-core accumulator), so the
// kernel's fp32 result equals the fp64 reference exactly before output rounding.
inline ref::QuantMatrix integer_operand(ref::Random& rng, ScaleMode mode, int64_t rows, int64_t cols,
                                        ref::Operand op) {
  std::vector<float> ones(static_cast<std::size_t>(rows * cols), 1.0f);
  ref::QuantMatrix q = ref::quantize(ones.data(), rows, cols, mode, op);  // shapes of every field
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v = static_cast<float>(rng.integer(-2, 2));
    if (mode == ScaleMode::kBF16) q.bf16[i] = ref::float_to_bf16(v);
    else q.e4m3[i] = ref::float_to_e4m3(v);
  }
  for (auto& s : q.scales) s = std::ldexp(1.0f, rng.integer(-2, 2));
  for (auto& e : q.ue8m0) e = static_cast<uint8_t>(127 + rng.integer(-2, 2));
  return q;
}

// Uploads the scales of an mxfp8 pair into `o` (raw and packed) and computes the reference.
// `raw_ld_pad` adds bytes to the raw rows' leading dimension (misaligned rows for the staging).
inline void finish_mx_operands(OperandSet& o, int64_t raw_ld_pad = 0) {
  const int64_t groups = o.p.k / 32, k_words = (o.p.k + 127) / 128;
  auto upload_raw = [&](const ref::QuantMatrix& q, Guarded& g, TensorView& view) {
    const int64_t ld = groups + raw_ld_pad;
    std::vector<uint8_t> bytes(static_cast<std::size_t>((q.scale_rows - 1) * ld + groups), 0x5A);
    for (int64_t r = 0; r < q.scale_rows; ++r)
      std::memcpy(bytes.data() + r * ld, q.ue8m0.data() + r * groups, static_cast<std::size_t>(groups));
    g = Guarded(bytes.size());  // the tensor ends where the guard begins
    g.upload(bytes.data());
    view = TensorView::matrix(g.get(), DType::kUE8M0, q.scale_rows, groups, ld, 0);
  };
  auto upload_packed = [&](const ref::QuantMatrix& q, Guarded& g, TensorView& view) {
    const std::vector<uint32_t> words = ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, groups);
    g = Guarded(words.size() * 4);
    g.upload(words.data());
    view = TensorView::matrix(g.get(), DType::kUE8M0, k_words, 4 * q.scale_rows, 0);
  };
  upload_raw(o.qa, o.sa, o.scales.a);
  upload_raw(o.qb, o.sb, o.scales.b);
  upload_packed(o.qa, o.sa_packed, o.scales_packed.a);
  upload_packed(o.qb, o.sb_packed, o.scales_packed.b);
}

// The fp64 reference of o.qa x o.qb^T (NaN where a 0xFF scale touches) and its rms over finite values.
inline void compute_reference(OperandSet& o) {
  o.ref = ref::gemm_f64(o.qa, o.qb);
  double sq = 0;
  int64_t finite = 0;
  for (double v : o.ref)
    if (std::isfinite(v)) sq += v * v, ++finite;
  o.rms = finite > 0 ? std::sqrt(sq / static_cast<double>(finite)) : 0.0;
}

inline OperandSet make_operands(ScaleMode mode, int64_t m, int64_t n, int64_t k, uint64_t seed, bool exact) {
  OperandSet o;
  o.p = GemmProblem{.m = m, .n = n, .k = k, .mode = mode};
  o.exact = exact;
  if (exact) {
    ref::Random rng(seed);
    o.qa = integer_operand(rng, mode, m, k, ref::Operand::kA);
    o.qb = integer_operand(rng, mode, n, k, ref::Operand::kB);
  } else {
    const auto xa = bench::random_operand(seed, m, k);
    const auto xb = bench::random_operand(seed + 7919, n, k);
    o.qa = ref::quantize(xa.data(), m, k, mode, ref::Operand::kA);
    o.qb = ref::quantize(xb.data(), n, k, mode, ref::Operand::kB);
  }
  o.a = upload_values(o.qa);
  o.b = upload_values(o.qb);
  const DType in = mode == ScaleMode::kBF16 ? DType::kBF16 : DType::kE4M3;
  o.va = TensorView::matrix(o.a.get(), in, m, k, 0);
  o.vb = TensorView::matrix(o.b.get(), in, n, k, 0);
  if (mode == ScaleMode::kMxfp8) {
    finish_mx_operands(o);
  } else if (mode != ScaleMode::kBF16) {
    o.sa = Guarded(o.qa.scales.size() * 4);
    o.sa.upload(o.qa.scales.data());
    o.sb = Guarded(o.qb.scales.size() * 4);
    o.sb.upload(o.qb.scales.data());
    if (mode == ScaleMode::kPtpc) {
      o.scales.a = TensorView::vector(o.sa.get(), DType::kF32, m, 0);
      o.scales.b = TensorView::vector(o.sb.get(), DType::kF32, n, 0);
    } else {
      o.scales.a = TensorView::matrix(o.sa.get(), DType::kF32, o.qa.scale_rows, o.qa.scale_cols, 0);
      o.scales.b = TensorView::matrix(o.sb.get(), DType::kF32, o.qb.scale_rows, o.qb.scale_cols, 0);
      // The same A scales M-contiguous (ScaleLayout::kMnMajor), from the host helper; the buffer
      // ends where its guard begins, so a read or write past the last column shows.
      const std::vector<float> mn = ref::mn_major_block_scales(o.qa.scales.data(), o.qa.scale_rows, o.qa.scale_cols);
      o.sa_mn = Guarded(mn.size() * 4);
      o.sa_mn.upload(mn.data());
      o.scales_mn.a = TensorView{.data = o.sa_mn.get(), .dtype = DType::kF32, .rank = 2,
                                 .shape = {o.qa.scale_rows, o.qa.scale_cols},
                                 .strides = {1, ref::mn_major_scale_ld(o.qa.scale_rows)}, .device = 0};
      o.scales_mn.b = o.scales.b;
    }
  }
  compute_reference(o);
  return o;
}

inline bool inputs_intact(const OperandSet& o) {
  const bool mx = o.p.mode == ScaleMode::kMxfp8;
  return o.a.guard_intact() && o.b.guard_intact() &&
         (o.p.mode == ScaleMode::kBF16 || (o.sa.guard_intact() && o.sb.guard_intact())) &&
         (!mx || (o.sa_packed.guard_intact() && o.sb_packed.guard_intact())) &&
         (o.p.mode != ScaleMode::kBlockscale || o.sa_mn.guard_intact());
}

// Per-element bounds against the fp64 reference on the same quantised operands:
// bench::gemm_tolerance with default (not fast) accumulation, atol 1e-2 x rms for fp8 inputs
// (rtol 2^-7 for bf16 output, 1e-3 for fp32). Every fp8 mode promotes into fp32 registers (ptpc
// and blockscale per 128-wide K block, mxfp8 per 32), so errors stay at the one-block level:
// rel_l2 ~1.3e-4 and single elements up to ~5e-3 x rms where blocks of different magnitude cancel
// (docs/gemm.md). (Until 2026-12-01 these tests used the fast-accumulation bound, 5e-2 x rms,
// because ptpc did not promote.) A race, a missed tile or a wrong scale moves elements by O(rms).
inline bench::Tolerance tolerance_for(ScaleMode mode, DType out) {
  return bench::gemm_tolerance(mode, out, /*fast_accum=*/false);
}

// Whole-output bound (rel_l2) for random inputs, K <= 7168: far below any defect's O(1).
inline double rel_l2_bound(ScaleMode mode, DType out) {
  if (out == DType::kBF16) return 4e-3;
  if (mode == ScaleMode::kBF16) return 2e-5;
  return 5e-4;  // fp8, fp32 out: every mode promotes per 128 (ptpc, blockscale) or 32 (mxfp8) K
}

// Downloads C and compares it against the reference (bitwise for exact sets).
inline ref::Comparison compare_output(const OperandSet& o, const Guarded& c, DType out) {
  const int64_t count = o.p.m * o.p.n;
  if (o.exact) {
    const std::vector<float> rounded = ref::round_to(o.ref, out);
    const std::vector<double> r(rounded.begin(), rounded.end());
    if (out == DType::kF32) {
      std::vector<float> h(count);
      EXPECT_EQ(cudaMemcpy(h.data(), c.get(), count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      return ref::compare(h.data(), r.data(), count, 0, 0);
    }
    std::vector<uint16_t> h(count);
    EXPECT_EQ(cudaMemcpy(h.data(), c.get(), count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    return ref::compare_bf16(h.data(), r.data(), count, 0, 0);
  }
  const bench::Tolerance t = tolerance_for(o.p.mode, out);
  const double atol = t.atol + t.atol_rms * o.rms;
  if (out == DType::kF32) {
    std::vector<float> h(count);
    EXPECT_EQ(cudaMemcpy(h.data(), c.get(), count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return ref::compare(h.data(), o.ref.data(), count, t.rtol, atol);
  }
  std::vector<uint16_t> h(count);
  EXPECT_EQ(cudaMemcpy(h.data(), c.get(), count * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  return ref::compare_bf16(h.data(), o.ref.data(), count, t.rtol, atol);
}

inline std::string describe(const OperandSet& o, DType out) {
  return std::string(to_string(o.p.mode)) + " " + std::to_string(o.p.m) + "x" + std::to_string(o.p.n) + "x" +
         std::to_string(o.p.k) + " ->" + std::string(to_string(out)) + (o.exact ? " (integer, bitwise)" : "");
}

// Result of repeated poisoned runs of one configuration.
struct RepeatResult {
  int runs = 0;
  int bad_runs = 0;          // runs with any wrong element
  int64_t worst_wrong = 0;
  int64_t first_wrong = -1;  // of the worst run
  double worst_rel_l2 = 0;
  double worst_max_abs = 0;
  int64_t never_written = 0;
};

// Allocates (guarded) and attaches the device workspace a split-K plan needs; empty otherwise.
inline Guarded attach_workspace(Gemm& g) {
  Guarded w;
  if (g.workspace_bytes() > 0) {
    w = Guarded(g.workspace_bytes());
    g.set_workspace(w.get(), w.bytes());
  }
  return w;
}

// Poisons C, runs, synchronises and compares `repeats` times.
inline RepeatResult run_repeated(const Gemm& g, const OperandSet& o, const Guarded& c, DType out, int repeats,
                                 cudaStream_t stream) {
  RepeatResult r;
  for (int i = 0; i < repeats; ++i) {
    bench::poison_nan(c.get(), c.bytes(), out, stream);
    g.run(stream);
    const cudaError_t err = cudaStreamSynchronize(stream);
    EXPECT_EQ(err, cudaSuccess) << cudaGetErrorString(err);
    if (err != cudaSuccess) break;
    const ref::Comparison cmp = compare_output(o, c, out);
    ++r.runs;
    if (cmp.wrong > 0) ++r.bad_runs;
    if (cmp.wrong > r.worst_wrong) {
      r.worst_wrong = cmp.wrong;
      r.first_wrong = cmp.first_wrong;
    }
    r.worst_rel_l2 = std::max(r.worst_rel_l2, cmp.rel_l2);
    r.worst_max_abs = std::max(r.worst_max_abs, cmp.max_abs);
    r.never_written += cmp.never_written;
  }
  return r;
}

}  // namespace weave::test
