#include "fused/self_test_support.hpp"

#include <cuda_runtime.h>

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

// `bytes` bytes repeating `pattern` (psize bytes), on the device.
std::unique_ptr<OwnedDeviceMemory> filled(size_t bytes, const void* pattern, size_t psize) {
  std::vector<uint8_t> h(bytes);
  for (size_t i = 0; i < bytes; ++i) h[i] = static_cast<const uint8_t*>(pattern)[i % psize];
  return upload(h);
}

}  // namespace

std::unique_ptr<SelfTestOperands> make_self_test_operands(ScaleMode quant, ScaleLayout layout, int64_t m, int64_t n,
                                                          int64_t k, int dev,
                                                          const std::function<int64_t(int64_t)>& a_col,
                                                          const std::function<int(int64_t, int64_t)>& b_val) {
  auto o = std::make_unique<SelfTestOperands>();
  const bool fp8 = quant != ScaleMode::kBF16;
  const size_t in_bytes = fp8 ? 1 : 2;
  std::vector<uint8_t> ha(static_cast<size_t>(m * k) * in_bytes, 0), hb(static_cast<size_t>(n * k) * in_bytes);
  auto put = [&](std::vector<uint8_t>& v, int64_t idx, float x) {
    if (fp8) {
      v[idx] = ref::float_to_e4m3(x);
    } else {
      const uint16_t h = ref::float_to_bf16(x);
      std::memcpy(&v[idx * 2], &h, 2);
    }
  };
  for (int64_t i = 0; i < m; ++i) put(ha, i * k + a_col(i), 1.0f);
  for (int64_t row = 0; row < n; ++row)
    for (int64_t kk = 0; kk < k; ++kk) put(hb, row * k + kk, static_cast<float>(b_val(row, kk)));
  const DType in_dtype = fp8 ? DType::kE4M3 : DType::kBF16;
  o->a = upload(ha);
  o->b = upload(hb);
  o->a_view = TensorView::matrix(o->a->p, in_dtype, m, k, dev);
  o->b_view = TensorView::matrix(o->b->p, in_dtype, n, k, dev);
  const float one = 1.0f;
  const uint8_t e127 = 127;
  GemmScales& s = o->scales;
  switch (quant) {
    case ScaleMode::kBF16: break;
    case ScaleMode::kPtpc:
      o->scale_a = filled(m * 4, &one, 4);
      o->scale_b = filled(n * 4, &one, 4);
      s.a = TensorView::vector(o->scale_a->p, DType::kF32, m, dev);
      s.b = TensorView::vector(o->scale_b->p, DType::kF32, n, dev);
      break;
    case ScaleMode::kBlockscale: {
      const int64_t kb = (k + 127) / 128, nb = (n + 127) / 128;
      o->scale_b = filled(nb * kb * 4, &one, 4);
      s.b = TensorView::matrix(o->scale_b->p, DType::kF32, nb, kb, dev);
      if (layout == ScaleLayout::kMnMajor) {  // M-contiguous, column stride rounded up to 4 floats
        const int64_t ld = ref::mn_major_scale_ld(m);
        o->scale_a = filled(kb * ld * 4, &one, 4);
        s.a = TensorView{.data = o->scale_a->p, .dtype = DType::kF32, .rank = 2, .shape = {m, kb}, .strides = {1, ld},
                         .device = dev};
      } else {
        o->scale_a = filled(m * kb * 4, &one, 4);
        s.a = TensorView::matrix(o->scale_a->p, DType::kF32, m, kb, dev);
      }
      break;
    }
    case ScaleMode::kMxfp8: {
      const int64_t nb = (n + 31) / 32;
      if (layout == ScaleLayout::kRaw) {
        o->scale_a = filled(m * (k / 32), &e127, 1);
        o->scale_b = filled(nb * (k / 32), &e127, 1);
        s.a = TensorView::matrix(o->scale_a->p, DType::kUE8M0, m, k / 32, dev);
        s.b = TensorView::matrix(o->scale_b->p, DType::kUE8M0, nb, k / 32, dev);
      } else {  // packed words of all-127 bytes: every byte 127 whatever the packing order
        const int64_t kw = (k + 127) / 128;
        o->scale_a = filled(kw * 4 * m, &e127, 1);
        o->scale_b = filled(kw * 4 * nb, &e127, 1);
        s.a = TensorView::matrix(o->scale_a->p, DType::kUE8M0, kw, 4 * m, dev);
        s.b = TensorView::matrix(o->scale_b->p, DType::kUE8M0, kw, 4 * nb, dev);
      }
      break;
    }
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
