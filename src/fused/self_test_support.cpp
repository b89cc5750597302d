#include "fused/self_test_support.hpp"

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "weave/quant.hpp"

namespace weave::fused {

namespace {

std::unique_ptr<OwnedDeviceMemory> upload(const std::vector<uint8_t>& h) {
  auto d = std::make_unique<OwnedDeviceMemory>(h.size());
  WEAVE_CHECK_CUDA(cudaMemcpy(d->p, h.data(), h.size(), cudaMemcpyHostToDevice));
  return d;
}

}  // namespace

// A power-of-two exponent 0..3 for scale block (row block, K block) of an operand (salt: A or B):
// the scales vary per row and per block, so a kernel that applies a wrong block's scale, or none,
// is off by a power of two in every element it touches.
static int scale_exponent(uint64_t salt, int64_t row_block, int64_t k_block) {
  uint64_t x = salt * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(row_block) << 32) ^ static_cast<uint64_t>(k_block);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<int>(x & 3);
}

SelfTestHostOperands make_self_test_host_operands(ScaleMode quant, int64_t m, int64_t n, int64_t k,
                                                  const std::function<int64_t(int64_t)>& a_col,
                                                  const std::function<int(int64_t, int64_t)>& b_val) {
  SelfTestHostOperands h;
  const bool fp8 = quant != ScaleMode::kBF16;
  // Scale blocks: A 1 x group, B rows_b x group (blockscale 128 x 128, mxfp8 32 x 32); ptpc one per row.
  const int64_t group = quant == ScaleMode::kMxfp8 ? 32 : (quant == ScaleMode::kBlockscale ? 128 : k);
  const int64_t rows_b = quant == ScaleMode::kMxfp8 ? 32 : (quant == ScaleMode::kBlockscale ? 128 : 1);
  const int64_t k_blocks = (k + group - 1) / group;
  for (ref::QuantMatrix* q : {&h.a, &h.b}) {
    const bool is_a = q == &h.a;
    q->rows = is_a ? m : n;
    q->cols = k;
    q->mode = quant;
    if (fp8) q->e4m3.assign(static_cast<size_t>(q->rows * k), 0);
    else q->bf16.assign(static_cast<size_t>(q->rows * k), 0);
    if (!fp8) continue;
    const int64_t per = is_a ? 1 : rows_b;
    q->scale_rows = (q->rows + per - 1) / per;
    q->scale_cols = quant == ScaleMode::kPtpc ? 1 : k_blocks;
    for (int64_t r = 0; r < q->scale_rows; ++r)
      for (int64_t kb = 0; kb < q->scale_cols; ++kb) {
        const int e = scale_exponent(is_a ? 1 : 2, r, kb);
        if (quant == ScaleMode::kMxfp8) q->ue8m0.push_back(static_cast<uint8_t>(127 + e));
        else q->scales.push_back(std::ldexp(1.0f, e));
      }
  }
  // Each stored value is divided by its block's scale 2^e (exact: |b| <= 8 keeps 3 mantissa bits
  // and 2^-3 is a normal e4m3), so the scaled products are the unscaled closed form.
  auto exponent = [&](const ref::QuantMatrix& q, int64_t row, int64_t kk) {
    if (!fp8) return 0;
    const int64_t per = &q == &h.a ? 1 : rows_b;
    const size_t at = static_cast<size_t>((row / per) * q.scale_cols + (quant == ScaleMode::kPtpc ? 0 : kk / group));
    return quant == ScaleMode::kMxfp8 ? int(q.ue8m0[at]) - 127 : std::ilogb(q.scales[at]);
  };
  auto put = [&](ref::QuantMatrix& q, int64_t row, int64_t kk, float x) {
    const float v = std::ldexp(x, -exponent(q, row, kk));
    const size_t at = static_cast<size_t>(row * k + kk);
    if (fp8) q.e4m3[at] = ref::float_to_e4m3(v);
    else q.bf16[at] = ref::float_to_bf16(v);
  };
  for (int64_t i = 0; i < m; ++i) put(h.a, i, a_col(i), 1.0f);
  for (int64_t row = 0; row < n; ++row)
    for (int64_t kk = 0; kk < k; ++kk) put(h.b, row, kk, static_cast<float>(b_val(row, kk)));
  return h;
}

std::unique_ptr<SelfTestOperands> make_self_test_operands(ScaleMode quant, ScaleLayout layout, int64_t m, int64_t n,
                                                          int64_t k, int dev,
                                                          const std::function<int64_t(int64_t)>& a_col,
                                                          const std::function<int(int64_t, int64_t)>& b_val) {
  const SelfTestHostOperands h = make_self_test_host_operands(quant, m, n, k, a_col, b_val);
  auto o = std::make_unique<SelfTestOperands>();
  auto bytes_of = [](const void* p, size_t bytes) {
    std::vector<uint8_t> v(bytes);
    std::memcpy(v.data(), p, bytes);
    return upload(v);
  };
  const bool fp8 = quant != ScaleMode::kBF16;
  const DType in_dtype = fp8 ? DType::kE4M3 : DType::kBF16;
  o->a = fp8 ? bytes_of(h.a.e4m3.data(), h.a.e4m3.size()) : bytes_of(h.a.bf16.data(), h.a.bf16.size() * 2);
  o->b = fp8 ? bytes_of(h.b.e4m3.data(), h.b.e4m3.size()) : bytes_of(h.b.bf16.data(), h.b.bf16.size() * 2);
  o->a_view = TensorView::matrix(o->a->p, in_dtype, m, k, dev);
  o->b_view = TensorView::matrix(o->b->p, in_dtype, n, k, dev);
  GemmScales& s = o->scales;
  switch (quant) {
    case ScaleMode::kBF16: break;
    case ScaleMode::kPtpc:
      o->scale_a = bytes_of(h.a.scales.data(), h.a.scales.size() * 4);
      o->scale_b = bytes_of(h.b.scales.data(), h.b.scales.size() * 4);
      s.a = TensorView::vector(o->scale_a->p, DType::kF32, m, dev);
      s.b = TensorView::vector(o->scale_b->p, DType::kF32, n, dev);
      break;
    case ScaleMode::kBlockscale:
      o->scale_b = bytes_of(h.b.scales.data(), h.b.scales.size() * 4);
      s.b = TensorView::matrix(o->scale_b->p, DType::kF32, h.b.scale_rows, h.b.scale_cols, dev);
      if (layout == ScaleLayout::kMnMajor) {  // M-contiguous, column stride rounded up to 4 floats
        const std::vector<float> mn = ref::mn_major_block_scales(h.a.scales.data(), m, h.a.scale_cols);
        o->scale_a = bytes_of(mn.data(), mn.size() * 4);
        s.a = TensorView{.data = o->scale_a->p, .dtype = DType::kF32, .rank = 2, .shape = {m, h.a.scale_cols},
                         .strides = {1, ref::mn_major_scale_ld(m)}, .device = dev};
      } else {
        o->scale_a = bytes_of(h.a.scales.data(), h.a.scales.size() * 4);
        s.a = TensorView::matrix(o->scale_a->p, DType::kF32, m, h.a.scale_cols, dev);
      }
      break;
    case ScaleMode::kMxfp8:
      if (layout == ScaleLayout::kRaw) {
        o->scale_a = bytes_of(h.a.ue8m0.data(), h.a.ue8m0.size());
        o->scale_b = bytes_of(h.b.ue8m0.data(), h.b.ue8m0.size());
        s.a = TensorView::matrix(o->scale_a->p, DType::kUE8M0, h.a.scale_rows, h.a.scale_cols, dev);
        s.b = TensorView::matrix(o->scale_b->p, DType::kUE8M0, h.b.scale_rows, h.b.scale_cols, dev);
      } else {  // packed: the words ref::pack_mxfp8_scales arranges, [ceil(groups / 4), 4 * scale rows]
        auto packed = [&](const ref::QuantMatrix& q, std::unique_ptr<OwnedDeviceMemory>& mem) {
          const std::vector<uint32_t> words = ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, q.scale_cols);
          mem = bytes_of(words.data(), words.size() * 4);
          return TensorView::matrix(mem->p, DType::kUE8M0, (q.scale_cols + 3) / 4, 4 * q.scale_rows, dev);
        };
        s.a = packed(h.a, o->scale_a);
        s.b = packed(h.b, o->scale_b);
      }
      break;
  }
  return o;
}

std::vector<uint8_t> run_self_test_call(const comm::Group& g, cudaStream_t stream, void* out, size_t bytes,
                                        const std::string& what, const std::function<void()>& call,
                                        const std::function<void()>& check) {
  WEAVE_CHECK_CUDA(cudaMemsetAsync(out, 0xFF, bytes, stream));
  comm::sync_stream_bounded(stream, g.timeout_s(), what + ": poisoning the output");
  g.barrier();
  call();
  comm::sync_stream_bounded(stream, g.timeout_s(), what + ": the call");
  check();
  g.barrier();
  std::vector<uint8_t> got(bytes);
  WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost));
  return got;
}

}  // namespace weave::fused
