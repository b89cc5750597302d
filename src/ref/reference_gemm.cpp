// Reference GEMM: C[m, n] = sum_k A[m, k] * B[n, k] in fp64, each element summed in order
// k = 0, 1, ... from 0.0, so the result equals the plain triple loop bit for bit whatever the
// blocking or threading below. Register tiles of 4x4 outputs over a B panel packed 4 rows
// interleaved keep it fast enough for test shapes (256x512x1024 in tens of milliseconds).
#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

#include "common/check.hpp"
#include "ref/quant_layout.hpp"
#include "weave/reference.hpp"

namespace weave::ref {

namespace {

constexpr int64_t kTile = 4;      // 4 rows of A x 4 rows of B per register tile
constexpr int64_t kBlockK = 256;  // K slice per pass, so a packed B slice stays in cache
static_assert(kTile == 4, "the micro-kernel below is written for 4x4 tiles");
// GCC / Clang vector extension: two doubles, element-wise IEEE arithmetic (no reassociation).
typedef double Vec2 __attribute__((vector_size(16)));

// b_packed: panel p holds rows 4p..4p+3 of B interleaved, [k][4], zero past n.
template <typename T>
std::vector<T> pack_b(const T* b, int64_t n, int64_t k) {
  const int64_t panels = (n + kTile - 1) / kTile;
  std::vector<T> packed(static_cast<std::size_t>(panels * k * kTile), T(0));
  for (int64_t j = 0; j < n; ++j) {
    T* dst = packed.data() + (j / kTile) * k * kTile + (j % kTile);
    const T* src = b + j * k;
    for (int64_t kk = 0; kk < k; ++kk) dst[kk * kTile] = src[kk];
  }
  return packed;
}

// Rows [m0, m1) of C (zero-initialised by the caller).
template <typename T>
void gemm_rows(const T* a, const T* b_packed, double* c, int64_t m0, int64_t m1, int64_t n, int64_t k) {
  const int64_t panels = (n + kTile - 1) / kTile;
  for (int64_t k0 = 0; k0 < k; k0 += kBlockK) {
    const int64_t k1 = std::min(k0 + kBlockK, k);
    for (int64_t i = m0; i < m1; i += kTile) {
      const T* a_row[kTile];
      for (int64_t r = 0; r < kTile; ++r) a_row[r] = a + std::min(i + r, m1 - 1) * k;  // clamp: computed, not stored
      for (int64_t p = 0; p < panels; ++p) {
        // acc[r][h] holds columns 2h, 2h+1 of row r: two-lane vectors the compiler maps onto
        // SSE2 mulpd / addpd, lane by lane the same operations as the scalar loop.
        auto running_sum = [&](int64_t r, int64_t jj) {  // continue from the previous K slice
          const int64_t row = i + r, col = p * kTile + jj;
          return (row < m1 && col < n) ? c[row * n + col] : 0.0;
        };
        Vec2 acc[kTile][2];
        for (int64_t r = 0; r < kTile; ++r) {
          acc[r][0] = Vec2{running_sum(r, 0), running_sum(r, 1)};
          acc[r][1] = Vec2{running_sum(r, 2), running_sum(r, 3)};
        }
        const T* bp = b_packed + p * k * kTile;
        for (int64_t kk = k0; kk < k1; ++kk) {
          const T* bk = bp + kk * kTile;
          const Vec2 b01 = {static_cast<double>(bk[0]), static_cast<double>(bk[1])};
          const Vec2 b23 = {static_cast<double>(bk[2]), static_cast<double>(bk[3])};
          for (int64_t r = 0; r < kTile; ++r) {
            const auto av = static_cast<double>(a_row[r][kk]);
            const Vec2 a2 = {av, av};
            acc[r][0] += a2 * b01;
            acc[r][1] += a2 * b23;
          }
        }
        for (int64_t r = 0; r < kTile; ++r)
          for (int64_t jj = 0; jj < kTile; ++jj) {
            const int64_t row = i + r, col = p * kTile + jj;
            if (row < m1 && col < n) c[row * n + col] = acc[r][jj / 2][jj % 2];
          }
      }
    }
  }
}

template <typename T>
std::vector<double> gemm_impl(const T* a, const T* b, int64_t m, int64_t n, int64_t k) {
  const std::vector<T> b_packed = pack_b(b, n, k);
  std::vector<double> c(static_cast<std::size_t>(m * n), 0.0);
  // Threads take disjoint row ranges; each element is still summed by one thread in k order.
  const int64_t row_blocks = (m + kTile - 1) / kTile;
  const int64_t work = m * n * k;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t num_threads = std::clamp<int64_t>(work >> 24, 1, std::min(hw, row_blocks));
  if (num_threads == 1) {
    gemm_rows(a, b_packed.data(), c.data(), 0, m, n, k);
    return c;
  }
  std::vector<std::thread> threads;
  const int64_t blocks_per_thread = (row_blocks + num_threads - 1) / num_threads;
  for (int64_t t = 0; t < num_threads; ++t) {
    const int64_t m0 = std::min(m, t * blocks_per_thread * kTile);
    const int64_t m1 = std::min(m, (t + 1) * blocks_per_thread * kTile);
    if (m0 >= m1) break;
    try {
      threads.emplace_back([&, m0, m1] { gemm_rows(a, b_packed.data(), c.data(), m0, m1, n, k); });
    } catch (const std::system_error&) {  // no thread to be had: do this range here instead
      gemm_rows(a, b_packed.data(), c.data(), m0, m1, n, k);
    }
  }
  for (auto& th : threads) th.join();
  return c;
}

void expect_shape(int64_t m, int64_t n, int64_t k) {
  WEAVE_EXPECT_ARG(m >= 1, "argument 'm': must be >= 1, got " << m);
  WEAVE_EXPECT_ARG(n >= 1, "argument 'n': must be >= 1, got " << n);
  WEAVE_EXPECT_ARG(k >= 1, "argument 'k': must be >= 1, got " << k);
}

}  // namespace

std::vector<double> gemm_f64(const std::vector<float>& a_deq, const std::vector<float>& b_deq,
                             int64_t m, int64_t n, int64_t k) {
  expect_shape(m, n, k);
  WEAVE_EXPECT_ARG(a_deq.size() == static_cast<std::size_t>(m * k),
                   "argument 'a_deq': must hold m*k = " << m * k << " values, holds " << a_deq.size());
  WEAVE_EXPECT_ARG(b_deq.size() == static_cast<std::size_t>(n * k),
                   "argument 'b_deq': must hold n*k = " << n * k << " values, holds " << b_deq.size());
  // fp32 x fp32 products are exact in fp64; only the sum rounds.
  return gemm_impl(a_deq.data(), b_deq.data(), m, n, k);
}

std::vector<double> gemm_f64(const QuantMatrix& a, const QuantMatrix& b) {
  WEAVE_EXPECT_ARG(a.mode == b.mode, "argument 'b': mode must equal a's (" << to_string(a.mode)
                                                                         << "), got " << to_string(b.mode));
  WEAVE_EXPECT_ARG(a.cols == b.cols, "argument 'b': cols (K) must equal a's (" << a.cols << "), got "
                                                                              << b.cols);
  // Dequantised in fp64, where element x scale is exact, so the reference carries no rounding
  // of the operands (dequantize() rounds that product to fp32 for ptpc and blockscale).
  const std::vector<double> a_deq = detail::dequantize_f64(a, Operand::kA, "a");
  const std::vector<double> b_deq = detail::dequantize_f64(b, Operand::kB, "b");
  return gemm_impl(a_deq.data(), b_deq.data(), a.rows, b.rows, a.cols);
}

std::vector<float> round_to(const std::vector<double>& c, DType out_dtype) {
  WEAVE_EXPECT_ARG(out_dtype == DType::kF32 || out_dtype == DType::kBF16,
                   "argument 'out_dtype': must be fp32 or bf16, got " << to_string(out_dtype));
  std::vector<float> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i) {
    const auto f = static_cast<float>(c[i]);  // RNE (the default rounding mode), as the contract says
    out[i] = out_dtype == DType::kF32 ? f : bf16_to_float(float_to_bf16(f));
  }
  return out;
}

}  // namespace weave::ref
