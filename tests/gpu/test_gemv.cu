// Decode GEMV (src/gemv) against the fp64 CPU reference (weave::ref): every mode x out dtype,
// M = 1..32 (33 refused), K = 32 (mxfp8), 128, 640, 7168, N not a multiple of the 128-row band
// (nor of 16), padded leading dimensions, NaN-poisoned outputs, >= 20 launches per case across
// every valid K split on each weight path (registers, TMA ring, bf16's stream ring at 2, 3, 8 and 12
// stages; K = 200 leaves a stream stage 16 bytes deep) with and without programmatic
// dependent launch, guard zones after every
// tensor (scales included) that must stay untouched and whose NaN contents would surface in C if
// read, mxfp8 scale-exponent extremes and NaN propagation, bitwise-exact integer cases, a CUDA
// graph capture, and a negative control showing the comparison catches a wrong scale.
//
// Tolerances (||out - ref|| / ||ref|| and per element |out - ref| <= atol + rtol |ref|, atol in
// units of rms(ref)): the reference is fp64 over the same quantised values, so the bound is
// accumulation and output rounding only.
//   bf16 mode, fp32 out: rtol 1e-5, atol 3e-5 rms, rel_l2 <= 1e-5   (fp32 accumulation)
//   e4m3 modes, fp32 out: rtol 1e-3, atol 1e-3 rms, rel_l2 <= 1e-4  (fp8 MMA inner sums, per-step
//                                                                    fp32 promotion)
//   bf16 out: rtol 2^-8 + the above, rel_l2 <= 4e-3                  (one bf16 rounding)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/check.hpp"
#include "gemv/gemv.hpp"
#include "support/gpu.hpp"
#include "weave/error.hpp"
#include "weave/quant.hpp"
#include "weave/reference.hpp"

using namespace weave;
using weave::detail::GemvArgs;
using weave::detail::RingShape;

namespace {

constexpr std::size_t kGuardBytes = 256;

// A device allocation of `bytes` followed by a guard zone filled with `guard` (a repeating
// pattern chosen per tensor so that a stray read of it would turn results into NaN).
class GuardedBuffer {
 public:
  GuardedBuffer(const void* host, std::size_t bytes, std::vector<uint8_t> guard) : bytes_(bytes) {
    for (std::size_t i = 0; i < kGuardBytes; ++i) pattern_.push_back(guard[i % guard.size()]);
    WEAVE_CHECK_CUDA(cudaMalloc(&ptr_, bytes + kGuardBytes));
    if (host && bytes) WEAVE_CHECK_CUDA(cudaMemcpy(ptr_, host, bytes, cudaMemcpyHostToDevice));
    WEAVE_CHECK_CUDA(cudaMemcpy(static_cast<uint8_t*>(ptr_) + bytes, pattern_.data(), kGuardBytes,
                                cudaMemcpyHostToDevice));
  }
  ~GuardedBuffer() { cudaFree(ptr_); }
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  bool guard_intact() const {
    std::vector<uint8_t> h(kGuardBytes);
    WEAVE_CHECK_CUDA(cudaMemcpy(h.data(), static_cast<uint8_t*>(ptr_) + bytes_, kGuardBytes,
                                cudaMemcpyDeviceToHost));
    return h == pattern_;
  }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<uint8_t> pattern_;
};

const std::vector<uint8_t> kNanE4m3 = {0x7F};
const std::vector<uint8_t> kNanBf16 = {0xC0, 0x7F};
const std::vector<uint8_t> kNanF32 = {0x00, 0x00, 0xC0, 0x7F};
const std::vector<uint8_t> kNanUe8m0 = {0xFF};
const std::vector<uint8_t> kOutGuard = {0xA5, 0x5A};

bool fp8(ScaleMode mode) { return mode != ScaleMode::kBF16; }
int64_t elem_bytes(ScaleMode mode) { return fp8(mode) ? 1 : 2; }

std::string name(ScaleMode mode, DType out, int64_t m, int64_t n, int64_t k) {
  return std::string(to_string(mode)) + "->" + std::string(to_string(out)) + " M=" + std::to_string(m) +
         " N=" + std::to_string(n) + " K=" + std::to_string(k);
}

// Inputs whose magnitude changes per row and per 32-wide K group, so that scales differ.
std::vector<float> make_input(ref::Random& rng, int64_t rows, int64_t cols) {
  std::vector<float> x = ref::random_normal(rng, rows * cols);
  std::vector<float> row_scale(rows);
  for (auto& s : row_scale) s = std::ldexp(1.0f, rng.integer(-3, 3));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < (cols + 31) / 32; ++g) {
      const float s = row_scale[r] * std::ldexp(1.0f, rng.integer(-2, 2));
      for (int64_t c = 32 * g; c < std::min(cols, 32 * g + 32); ++c) x[r * cols + c] *= s;
    }
  return x;
}

// Row-major [rows, ld] bytes of a quantised matrix, padding columns filled with the NaN pattern.
std::vector<uint8_t> value_bytes(const ref::QuantMatrix& q, int64_t ld) {
  const int64_t eb = q.mode == ScaleMode::kBF16 ? 2 : 1;
  std::vector<uint8_t> out(q.rows * ld * eb);
  const std::vector<uint8_t>& nan = eb == 2 ? kNanBf16 : kNanE4m3;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = nan[i % nan.size()];
  const uint8_t* src = eb == 2 ? reinterpret_cast<const uint8_t*>(q.bf16.data()) : q.e4m3.data();
  for (int64_t r = 0; r < q.rows; ++r) std::memcpy(&out[r * ld * eb], src + r * q.cols * eb, q.cols * eb);
  return out;
}

// Fills `count` elements of an fp32 or bf16 output with the NaN patterns ref::compare reports as
// "never written" (any count; bench::poison_nan needs multiples of 4 bytes).
void poison(void* ptr, int64_t count, DType out) {
  const std::vector<uint8_t>& nan = out == DType::kF32 ? kNanF32 : kNanBf16;
  std::vector<uint8_t> h(count * nan.size());
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = nan[i % nan.size()];
  WEAVE_CHECK_CUDA(cudaMemcpy(ptr, h.data(), h.size(), cudaMemcpyHostToDevice));
}

struct ScaleHost {
  const void* data = nullptr;
  std::size_t bytes = 0;
  std::vector<uint8_t> guard;
};
ScaleHost scale_host(const ref::QuantMatrix& q) {
  switch (q.mode) {
    case ScaleMode::kPtpc:
    case ScaleMode::kBlockscale: return {q.scales.data(), q.scales.size() * sizeof(float), kNanF32};
    case ScaleMode::kMxfp8: return {q.ue8m0.data(), q.ue8m0.size(), kNanUe8m0};
    default: return {nullptr, 0, kNanF32};
  }
}

struct Tolerance {
  double rtol, atol_rms, rel_l2;
};
Tolerance tolerance(ScaleMode mode, DType out) {
  Tolerance t = fp8(mode) ? Tolerance{1e-3, 1e-3, 1e-4} : Tolerance{1e-5, 3e-5, 1e-5};
  if (out == DType::kBF16) t = {t.rtol + 1.0 / 256, t.atol_rms, 4e-3};
  return t;
}

struct RunOptions {
  int launches = 20;
  bool padded = false;   // lda, ldb, ldc larger than the row, padding checked
  bool exact = false;    // demand bitwise equality with the fp64 reference rounded to out
  bool expect_mismatch = false;  // negative control: the reference is for other inputs
};

// Uploads the operands once, then launches `launches` times (NaN-poisoned C before each; every
// valid K split in turn, PDL on every other launch) and compares each result with `ref_c`.
void run_and_check(const ref::QuantMatrix& qa, const ref::QuantMatrix& qb, DType out,
                   const std::vector<double>& ref_c, const RunOptions& opt) {
  const int64_t m = qa.rows, n = qb.rows, k = qa.cols;
  const ScaleMode mode = qa.mode;
  const std::string what = name(mode, out, m, n, k) + (opt.padded ? " padded" : "");
  SCOPED_TRACE(what);
  const int64_t pad_k = opt.padded ? 16 / elem_bytes(mode) * 3 : 0;
  const int64_t lda = k + pad_k, ldb = k + pad_k, ldc = n + (opt.padded ? 5 : 0);
  const std::vector<uint8_t> ha = value_bytes(qa, lda), hb = value_bytes(qb, ldb);
  GuardedBuffer da(ha.data(), ha.size(), fp8(mode) ? kNanE4m3 : kNanBf16);
  GuardedBuffer db(hb.data(), hb.size(), fp8(mode) ? kNanE4m3 : kNanBf16);
  const ScaleHost sa = scale_host(qa), sb = scale_host(qb);
  GuardedBuffer dsa(sa.data, sa.bytes, sa.guard), dsb(sb.data, sb.bytes, sb.guard);
  const std::size_t ob = out == DType::kF32 ? 4 : 2;
  GuardedBuffer dc(nullptr, m * ldc * ob, kOutGuard);

  int device = 0, num_sms = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  GemmProblem problem{.m = m, .n = n, .k = k, .mode = mode, .scale_layout = ScaleLayout::kRaw, .out_dtype = out};
  // Every valid (K split, weight path): the planner's, then each forced one.
  // Every valid (K split, weight path), then the planner's split on other TMA ring shapes (one
  // step per slot is the default; longer slots take other refill and parity paths).
  // At M <= 8 the registers path also runs at both depths (4 and 8 steps in flight: the default
  // and the diagnostic's other instance) at two splits.
  struct Launch {
    int split;
    GemvArgs::Path path;
    RingShape ring;
    int depth = 0;
    int stages = 0;  // stream path
  };
  std::vector<Launch> configs = {{0, GemvArgs::Path::kAuto, {}}};
  std::vector<Launch> candidates;
  for (GemvArgs::Path path : {GemvArgs::Path::kRegisters, GemvArgs::Path::kTma, GemvArgs::Path::kStream})
    for (int s : {0, 1, 2, 3, 4, 5, 8, 16}) candidates.push_back({s, path, {}});  // 3, 5: uneven row shares
  // The stream ring at its smallest, an odd and a deep stage count (bf16 only: refused for fp8).
  for (int stages : {2, 3, 12})
    for (int s : {0, 3}) candidates.push_back({s, GemvArgs::Path::kStream, {}, 0, stages});
  for (const RingShape ring : {RingShape{4, 2}, RingShape{2, 8}, RingShape{8, 2}})
    candidates.push_back({0, GemvArgs::Path::kTma, ring});
  if (m <= 8)
    for (int depth : {4, 8})
      for (int s : {0, 3}) candidates.push_back({s, GemvArgs::Path::kRegisters, {}, depth});
  for (const Launch& c : candidates) {
    try {
      detail::gemv_config(problem, num_sms, c.split, c.path, c.ring, {}, false, c.depth, c.stages);
      configs.push_back(c);
    } catch (const weave::Error&) {
      // this split leaves a K slice whose A tile (and ring) does not fit shared memory
    }
  }
  cudaStream_t stream;
  WEAVE_CHECK_CUDA(cudaStreamCreate(&stream));
  const Tolerance tol = tolerance(mode, out);
  double rms = 0;
  int64_t finite = 0;
  for (double v : ref_c)
    if (std::isfinite(v)) rms += v * v, ++finite;
  rms = finite ? std::sqrt(rms / finite) : 0;

  std::vector<uint8_t> hc(m * ldc * ob);
  std::vector<float> got32(m * n);
  std::vector<uint16_t> got16(m * n);
  int64_t total_wrong = 0;
  // Every config at least once (a control keeps its own short count).
  const int launches = opt.expect_mismatch ? opt.launches : std::max<int>(opt.launches, static_cast<int>(configs.size()));
  for (int launch = 0; launch < launches; ++launch) {
    GemvArgs args;
    args.a = da.get(), args.b = db.get(), args.c = dc.get();
    args.scale_a = dsa.get(), args.scale_b = dsb.get();
    args.m = m, args.n = n, args.k = k, args.lda = lda, args.ldb = ldb, args.ldc = ldc;
    args.mode = mode, args.out_dtype = out;
    args.split = configs[launch % configs.size()].split;
    args.path = configs[launch % configs.size()].path;
    args.ring = configs[launch % configs.size()].ring;
    args.depth = configs[launch % configs.size()].depth;
    args.stages = configs[launch % configs.size()].stages;
    args.pdl = launch % 2 == 1;
    poison(dc.get(), m * ldc, out);
    detail::gemv_launch(args, num_sms, stream);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
    WEAVE_CHECK_CUDA(cudaMemcpy(hc.data(), dc.get(), hc.size(), cudaMemcpyDeviceToHost));
    // Padding columns of C stay poisoned; the valid [M, N] part is compared.
    int64_t pad_touched = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < ldc; ++c) {
        const uint8_t* e = &hc[(r * ldc + c) * ob];
        if (c >= n) {
          pad_touched += ob == 4 ? std::memcmp(e, kNanF32.data(), 4) != 0
                                 : (e[0] != kNanBf16[0] || e[1] != kNanBf16[1]);
        } else if (ob == 4) {
          std::memcpy(&got32[r * n + c], e, 4);
        } else {
          std::memcpy(&got16[r * n + c], e, 2);
        }
      }
    EXPECT_EQ(pad_touched, 0) << "launch " << launch << " wrote C's padding columns";
    const double rtol = opt.exact ? 0 : tol.rtol, atol = opt.exact ? 0 : tol.atol_rms * rms;
    const ref::Comparison cmp = out == DType::kF32 ? ref::compare(got32.data(), ref_c.data(), m * n, rtol, atol)
                                                   : ref::compare_bf16(got16.data(), ref_c.data(), m * n, rtol, atol);
    total_wrong += cmp.wrong;
    if (opt.expect_mismatch) continue;
    EXPECT_EQ(cmp.wrong, 0) << "launch " << launch << " split " << args.split << " path "
                            << static_cast<int>(args.path) << " ring " << args.ring.steps_per_slot << "x"
                            << args.ring.slots << " depth " << args.depth << " stages " << args.stages << " pdl " << args.pdl
                            << ": first wrong at m=" << (cmp.first_wrong >= 0 ? cmp.first_wrong / n : -1)
                            << " n=" << (cmp.first_wrong >= 0 ? cmp.first_wrong % n : -1)
                            << " (nonfinite " << cmp.nonfinite << ", never written " << cmp.never_written
                            << ", rel_l2 " << cmp.rel_l2 << ", max_abs " << cmp.max_abs << ")";
    EXPECT_EQ(cmp.never_written, 0);
    EXPECT_LE(cmp.rel_l2, opt.exact ? 0.0 : tol.rel_l2) << "launch " << launch << " split " << args.split;
    if (cmp.wrong != 0) break;  // one launch's report is enough
  }
  if (opt.expect_mismatch) EXPECT_GT(total_wrong, 0) << "negative control: a wrong scale went unnoticed";
  EXPECT_TRUE(da.guard_intact()) << "A guard";
  EXPECT_TRUE(db.guard_intact()) << "B guard";
  if (sa.bytes) EXPECT_TRUE(dsa.guard_intact()) << "A scale guard";
  if (sb.bytes) EXPECT_TRUE(dsb.guard_intact()) << "B scale guard";
  EXPECT_TRUE(dc.guard_intact()) << "C guard";
  WEAVE_CHECK_CUDA(cudaStreamDestroy(stream));
}

// Fresh random inputs (seeded from the shape) quantised in `mode`, checked against gemm_f64.
void check_case(ScaleMode mode, DType out, int64_t m, int64_t n, int64_t k, RunOptions opt = {}) {
  ref::Random rng(0x9E3779B97F4A7C15ull ^ (uint64_t(m) << 40) ^ (uint64_t(n) << 20) ^ uint64_t(k) ^
                  (uint64_t(mode) << 60) ^ (uint64_t(out) << 56));
  const std::vector<float> a = make_input(rng, m, k), b = make_input(rng, n, k);
  const ref::QuantMatrix qa = ref::quantize(a.data(), m, k, mode, ref::Operand::kA);
  const ref::QuantMatrix qb = ref::quantize(b.data(), n, k, mode, ref::Operand::kB);
  run_and_check(qa, qb, out, ref::gemm_f64(qa, qb), opt);
}

const ScaleMode kModes[] = {ScaleMode::kBF16, ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8};
const DType kOuts[] = {DType::kBF16, DType::kF32};

}  // namespace

TEST(Gemv, RefusesWhatItDoesNotRun) {
  auto problem = [](int64_t m, int64_t n, int64_t k, ScaleMode mode, DType out,
                    ScaleLayout layout = ScaleLayout::kRaw) {
    return GemmProblem{.m = m, .n = n, .k = k, .mode = mode, .scale_layout = layout, .out_dtype = out};
  };
  for (ScaleMode mode : kModes)
    for (DType out : kOuts) {
      const int64_t k = 128;
      for (int64_t m = 1; m <= 32; ++m)
        EXPECT_EQ(detail::gemv_unsupported_reason(problem(m, 200, k, mode, out)), "") << m;
      EXPECT_NE(detail::gemv_unsupported_reason(problem(33, 200, k, mode, out)), "");
      EXPECT_NE(detail::gemv_unsupported_reason(problem(0, 200, k, mode, out)), "");
      EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 0, k, mode, out)), "");
    }
  EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 64, 256, ScaleMode::kMxfp8, DType::kBF16, ScaleLayout::kPacked)), "");
  EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 64, 256, ScaleMode::kBF16, DType::kE4M3)), "");
  EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 64, 192, ScaleMode::kBlockscale, DType::kBF16)), "");
  EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 64, 48, ScaleMode::kMxfp8, DType::kBF16)), "");
  EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 64, 40, ScaleMode::kPtpc, DType::kBF16)), "");
  EXPECT_NE(detail::gemv_unsupported_reason(problem(4, 64, 4, ScaleMode::kBF16, DType::kBF16)), "");
  EXPECT_EQ(detail::gemv_unsupported_reason(problem(4, 64, 32, ScaleMode::kMxfp8, DType::kBF16)), "");
  // M = 33 through the launch: an Error naming the rule, before anything is enqueued.
  GemvArgs args;
  int dummy = 0;
  args.a = args.b = args.c = &dummy;
  args.m = 33, args.n = 64, args.k = 128, args.lda = args.ldb = 128, args.ldc = 64;
  // Refused with kInvalidArgument and a message holding `rule`, before anything is enqueued.
  auto expect_refused = [&](const char* what, const char* rule) {
    try {
      detail::gemv_launch(args, 132, nullptr);
      ADD_FAILURE() << what << " was launched";
    } catch (const weave::Error& e) {
      EXPECT_EQ(e.status(), Status::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(rule), std::string::npos) << e.what();
    }
  };
  expect_refused("M = 33", "M = 33");
  args.m = 4, args.split = 17;  // any 1..16 is a valid cluster; 17 is past the largest
  expect_refused("split 17", "argument 'split'");
}

TEST(Gemv, EveryMFrom1To32EveryModeAndOutput) {
  WEAVE_REQUIRE_GPUS(1);
  for (ScaleMode mode : kModes)
    for (DType out : kOuts)
      for (int64_t m = 1; m <= 32; ++m) {
        RunOptions opt;
        opt.padded = m % 3 == 0;
        check_case(mode, out, m, 200, 640, opt);
        if (HasFailure()) return;
      }
}

// The stream path sums each lane's 64-byte steps in the registers path's order over the same K
// slices, so at the same split the two write the same bits (fp32 output: nothing rounds them
// alike by accident). Odd step counts per slice end the stream ring in a half stage; M 13 and 32
// take 2 and 4 token tiles; K 200 ends inside a step. Each output NaN-poisoned before its launch.
TEST(Gemv, StreamEqualsRegistersBitwiseAtTheSameSplit) {
  WEAVE_REQUIRE_GPUS(1);
  int device = 0, num_sms = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  int compared = 0;
  for (const int64_t k : {200, 640, 7168})
    for (const int64_t m : {1, 5, 8, 13, 32}) {
      const int64_t n = 333;
      ref::Random rng(0xB17 + m * 131 + k);
      const std::vector<float> af = make_input(rng, m, k), bf = make_input(rng, n, k);
      const ref::QuantMatrix qa = ref::quantize(af.data(), m, k, ScaleMode::kBF16, ref::Operand::kA);
      const ref::QuantMatrix qb = ref::quantize(bf.data(), n, k, ScaleMode::kBF16, ref::Operand::kB);
      const std::vector<uint8_t> ha = value_bytes(qa, k), hb = value_bytes(qb, k);
      GuardedBuffer da(ha.data(), ha.size(), kNanBf16), db(hb.data(), hb.size(), kNanBf16);
      GuardedBuffer c_regs(nullptr, m * n * 4, kOutGuard), c_stream(nullptr, m * n * 4, kOutGuard);
      const GemmProblem problem{.m = m, .n = n, .k = k, .mode = ScaleMode::kBF16, .scale_layout = ScaleLayout::kRaw,
                                .out_dtype = DType::kF32};
      for (const int split : {1, 2, 3, 5}) {
        try {  // the registers path's A slice must fit at this split
          detail::gemv_config(problem, num_sms, split, GemvArgs::Path::kRegisters);
        } catch (const weave::Error&) {
          continue;
        }
        for (const int stages : {2, 3, 8}) {
          std::vector<float> got[2];
          for (int which = 0; which < 2; ++which) {
            GemvArgs args;
            args.a = da.get(), args.b = db.get(), args.c = which == 0 ? c_regs.get() : c_stream.get();
            args.m = m, args.n = n, args.k = k, args.lda = k, args.ldb = k, args.ldc = n;
            args.mode = ScaleMode::kBF16, args.out_dtype = DType::kF32, args.split = split;
            args.path = which == 0 ? GemvArgs::Path::kRegisters : GemvArgs::Path::kStream;
            args.stages = which == 0 ? 0 : stages;
            poison(args.c, m * n, DType::kF32);
            detail::gemv_launch(args, num_sms, nullptr);
            WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
            got[which].resize(m * n);
            WEAVE_CHECK_CUDA(cudaMemcpy(got[which].data(), args.c, m * n * 4, cudaMemcpyDeviceToHost));
          }
          int64_t differ = 0, nonfinite = 0;
          for (int64_t i = 0; i < m * n; ++i) {
            differ += std::memcmp(&got[0][i], &got[1][i], 4) != 0;
            nonfinite += !std::isfinite(got[1][i]);
          }
          EXPECT_EQ(nonfinite, 0) << "M " << m << " K " << k << " split " << split << " stages " << stages;
          EXPECT_EQ(differ, 0) << "M " << m << " K " << k << " split " << split << " stages " << stages;
          ++compared;
          if (HasFailure()) return;
        }
      }
      EXPECT_TRUE(c_regs.guard_intact() && c_stream.guard_intact()) << "M " << m << " K " << k;
    }
  EXPECT_GE(compared, 100);
}

TEST(Gemv, KEdgesAndRaggedN) {
  WEAVE_REQUIRE_GPUS(1);
  for (ScaleMode mode : kModes)
    for (DType out : kOuts) {
      for (int64_t m : {1, 3, 8, 9, 16, 17, 25, 32}) {
        check_case(mode, out, m, 333, 128, {.padded = m % 2 == 1});
        check_case(mode, out, m, 333, 7168, {.padded = m % 2 == 0});
        if (mode == ScaleMode::kMxfp8) check_case(mode, out, m, 333, 32, {.padded = m % 2 == 1});
        if (HasFailure()) return;
      }
      check_case(mode, out, 5, 1, 640);       // a single row of B
      // K bytes not a multiple of 64 (a step ends inside the row; the stream ring's last stage is half)
      if (mode == ScaleMode::kBF16) check_case(mode, out, 3, 333, 200, {.padded = true});
      if (mode == ScaleMode::kPtpc) check_case(mode, out, 3, 333, 208, {.padded = true});
      check_case(mode, out, 7, 4097, 256);    // one row past a multiple of 128
    }
}

// Integer inputs (exact in e4m3 and bf16) with power-of-two scales: the exact sums are
// representable in fp32, so the fp32 output must equal the reference bit for bit.
TEST(Gemv, ExactIntegerInputsAreBitwiseExact) {
  WEAVE_REQUIRE_GPUS(1);
  for (ScaleMode mode : kModes)
    for (int64_t m : {1, 8, 13, 32}) {
      const int64_t n = 300, k = 1024;
      ref::Random rng(77 + m + 1000 * int(mode));
      const std::vector<float> a = ref::random_integers(rng, m * k, 8), b = ref::random_integers(rng, n * k, 8);
      ref::QuantMatrix qa = ref::quantize(a.data(), m, k, mode, ref::Operand::kA);
      ref::QuantMatrix qb = ref::quantize(b.data(), n, k, mode, ref::Operand::kB);
      auto exact = [&](ref::QuantMatrix& q, const std::vector<float>& x) {
        if (mode == ScaleMode::kBF16) return;
        for (std::size_t i = 0; i < x.size(); ++i) q.e4m3[i] = ref::float_to_e4m3(x[i]);
        for (auto& s : q.scales) s = std::ldexp(1.0f, rng.integer(-2, 2));
        for (auto& e : q.ue8m0) e = static_cast<uint8_t>(127 + rng.integer(-2, 2));
      };
      exact(qa, a);
      exact(qb, b);
      run_and_check(qa, qb, DType::kF32, ref::gemm_f64(qa, qb), {.exact = true});
      if (HasFailure()) return;
    }
}

// Scale bytes at the ends of the ue8m0 range (0 = 2^-127 ... 254 = 2^127) whose products stay in
// fp32's range: a kernel that formed either scale's product with a partial sum alone would
// overflow or flush, and the fp64 reference (which dequantises in fp64) would disagree.
TEST(Gemv, Mxfp8ScaleExponentExtremes) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = 160, k = 640, groups = k / 32, b_rows = (n + 31) / 32;
  const int bases[] = {0, 1, 3, 60, 127, 200, 245, 250, 254};
  for (DType out : kOuts)
    for (int64_t m : {1, 6, 32}) {
      ref::Random rng(4242 + m);
      const std::vector<float> a = ref::random_normal(rng, m * k), b = ref::random_normal(rng, n * k);
      ref::QuantMatrix qa = ref::quantize(a.data(), m, k, ScaleMode::kMxfp8, ref::Operand::kA);
      ref::QuantMatrix qb = ref::quantize(b.data(), n, k, ScaleMode::kMxfp8, ref::Operand::kB);
      for (int64_t g = 0; g < groups; ++g) {
        const int base = bases[g % std::size(bases)];
        for (int64_t r = 0; r < m; ++r) qa.ue8m0[r * groups + g] = static_cast<uint8_t>(std::min(254, base + int(r % 3)));
        for (int64_t r = 0; r < b_rows; ++r)
          qb.ue8m0[r * groups + g] = static_cast<uint8_t>(std::clamp(254 - base - int(r % 2), 0, 254));
      }
      run_and_check(qa, qb, out, ref::gemm_f64(qa, qb), {});
      if (HasFailure()) return;
    }
}

// ue8m0 0xFF is NaN: one A scale byte poisons its token's row of C, one B scale byte its block's
// 32 columns, and nothing else (the comparison counts a NaN where the reference is finite).
TEST(Gemv, Mxfp8NanScalePropagates) {
  WEAVE_REQUIRE_GPUS(1);
  for (DType out : kOuts)
    for (int64_t m : {1, 5, 32}) {
      const int64_t n = 200, k = 640, groups = k / 32;
      ref::Random rng(99 + m);
      const std::vector<float> a = make_input(rng, m, k), b = make_input(rng, n, k);
      ref::QuantMatrix qa = ref::quantize(a.data(), m, k, ScaleMode::kMxfp8, ref::Operand::kA);
      ref::QuantMatrix qb = ref::quantize(b.data(), n, k, ScaleMode::kMxfp8, ref::Operand::kB);
      qa.ue8m0[(m - 1) * groups + 7] = 0xFF;
      qb.ue8m0[2 * groups + 19] = 0xFF;  // rows 64..95
      const std::vector<double> ref_c = ref::gemm_f64(qa, qb);
      int64_t nan_ref = 0;
      for (double v : ref_c) nan_ref += std::isnan(v);
      EXPECT_EQ(nan_ref, n + 32 * m - 32) << "the reference itself must propagate the NaN scales";
      run_and_check(qa, qb, out, ref_c, {});
      if (HasFailure()) return;
    }
}

// Negative control: the check has teeth. One B scale changed after the reference was taken
// must be reported as wrong elements.
TEST(Gemv, NegativeControlWrongScaleIsCaught) {
  WEAVE_REQUIRE_GPUS(1);
  for (ScaleMode mode : {ScaleMode::kPtpc, ScaleMode::kBlockscale, ScaleMode::kMxfp8}) {
    const int64_t m = 4, n = 256, k = 512;
    ref::Random rng(5);
    const std::vector<float> a = make_input(rng, m, k), b = make_input(rng, n, k);
    const ref::QuantMatrix qa = ref::quantize(a.data(), m, k, mode, ref::Operand::kA);
    ref::QuantMatrix qb = ref::quantize(b.data(), n, k, mode, ref::Operand::kB);
    const std::vector<double> ref_c = ref::gemm_f64(qa, qb);
    if (mode == ScaleMode::kMxfp8) qb.ue8m0[qb.ue8m0.size() - 1] += 1;
    else qb.scales[qb.scales.size() - 1] *= 1.5f;
    run_and_check(qa, qb, DType::kF32, ref_c, {.launches = 2, .expect_mismatch = true});
  }
}

// Graph capture: three back-to-back launches (PDL between them) captured and replayed.
TEST(Gemv, CapturesIntoACudaGraph) {
  WEAVE_REQUIRE_GPUS(1);
  const int64_t m = 8, n = 1000, k = 2048;
  ref::Random rng(11);
  const std::vector<float> a = make_input(rng, m, k), b = make_input(rng, n, k);
  const ref::QuantMatrix qa = ref::quantize(a.data(), m, k, ScaleMode::kBlockscale, ref::Operand::kA);
  const ref::QuantMatrix qb = ref::quantize(b.data(), n, k, ScaleMode::kBlockscale, ref::Operand::kB);
  const std::vector<double> ref_c = ref::gemm_f64(qa, qb);
  GuardedBuffer da(qa.e4m3.data(), qa.e4m3.size(), kNanE4m3), db(qb.e4m3.data(), qb.e4m3.size(), kNanE4m3);
  GuardedBuffer dsa(qa.scales.data(), qa.scales.size() * 4, kNanF32), dsb(qb.scales.data(), qb.scales.size() * 4, kNanF32);
  GuardedBuffer dc(nullptr, m * n * 4, kOutGuard);
  cudaStream_t stream;
  WEAVE_CHECK_CUDA(cudaStreamCreate(&stream));
  GemvArgs args;
  args.a = da.get(), args.b = db.get(), args.c = dc.get(), args.scale_a = dsa.get(), args.scale_b = dsb.get();
  args.m = m, args.n = n, args.k = k, args.lda = args.ldb = k, args.ldc = n;
  args.mode = ScaleMode::kBlockscale, args.out_dtype = DType::kF32, args.pdl = true;
  detail::gemv_launch(args, 132, stream);  // loads the module outside the capture
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  poison(dc.get(), m * n, DType::kF32);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  WEAVE_CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 3; ++i) detail::gemv_launch(args, 132, stream);
  WEAVE_CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  WEAVE_CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  WEAVE_CHECK_CUDA(cudaGraphLaunch(exec, stream));
  WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> got(m * n);
  WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), dc.get(), got.size() * 4, cudaMemcpyDeviceToHost));
  const Tolerance tol = tolerance(ScaleMode::kBlockscale, DType::kF32);
  double rms = 0;
  for (double v : ref_c) rms += v * v;
  rms = std::sqrt(rms / ref_c.size());
  const ref::Comparison cmp = ref::compare(got.data(), ref_c.data(), m * n, tol.rtol, tol.atol_rms * rms);
  EXPECT_EQ(cmp.wrong, 0);
  EXPECT_EQ(cmp.never_written, 0);
  EXPECT_TRUE(dc.guard_intact());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// The planner asks the device how many clusters of each candidate split it holds at once and
// keeps the decode shapes of the presets within one wave wherever a split that fits shared memory
// allows it (on H100 a 64-band GEMV split 4 ways left 4 of its 64 clusters to a second wave: 1.5x
// the time). Prints the residency it saw. (The planner's model without a device: GemvPlan.*.)
TEST(Gemv, PlannedSplitKeepsDecodeShapesInOneWave) {
  WEAVE_REQUIRE_GPUS(1);
  int device = 0, num_sms = 0;
  WEAVE_CHECK_CUDA(cudaGetDevice(&device));
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  auto problem = [](int64_t m, int64_t n, int64_t k, ScaleMode mode) {
    return GemmProblem{.m = m, .n = n, .k = k, .mode = mode, .scale_layout = ScaleLayout::kRaw, .out_dtype = DType::kBF16};
  };
  std::printf("clusters resident at once (bf16, M = 1, 8192 x 14336, registers path), by K split:\n");
  for (int s = 1; s <= 16; ++s) {
    const detail::GemvConfig c = detail::gemv_config(problem(1, 8192, 14336, ScaleMode::kBF16), num_sms, s,
                                             GemvArgs::Path::kRegisters, {}, detail::gemv_device_residency(ScaleMode::kBF16));
    std::printf("  split %2d: %3d clusters = %3d CTAs (smem %d B)\n", s, c.clusters_per_wave, c.clusters_per_wave * s,
                c.smem_bytes);
    EXPECT_TRUE(c.device_residency);
    EXPECT_GE(c.clusters_per_wave, 1);
  }
  for (ScaleMode mode : {ScaleMode::kBF16, ScaleMode::kPtpc})
    for (int64_t m : {1, 8, 32})
      for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{
               {8192, 14336}, {8192, 1280}, {7168, 2048}, {1280, 8192}, {8192, 4096}, {7168, 8192}, {8192, 3584}}) {
        const GemmProblem p = problem(m, n, k, mode);
        const detail::GemvConfig c = detail::gemv_config(p, num_sms, 0, GemvArgs::Path::kRegisters, {},
                                                 detail::gemv_device_residency(mode));
        std::printf("  %s M %2ld %5ldx%-5ld %s\n", std::string(to_string(mode)).c_str(), long(m), long(n), long(k),
                    c.describe().c_str());
        bool one_wave_exists = false;  // at some split whose A slice fits shared memory
        for (int s = 1; s <= detail::kGemvMaxSplit && !one_wave_exists; ++s) {
          try {
            one_wave_exists = detail::gemv_config(p, num_sms, s, GemvArgs::Path::kRegisters, {},
                                                  detail::gemv_device_residency(mode)).waves == 1;
          } catch (const weave::Error&) {
          }
        }
        if (one_wave_exists) EXPECT_EQ(c.waves, 1) << c.describe();
      }
}
