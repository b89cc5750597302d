// weave::Gemm on one GPU, in every quantisation mode: C[M, N] = A[M, K] * B[N, K]^T.
//
// For each mode the example quantises fp32 data on the host with weave::ref::quantize (the same
// rounding the kernels are tested against), uploads values and scales in the layouts
// include/weave/gemm.hpp documents, runs the GEMM and checks it against the fp64 reference:
//
//   mode        A, B values      A scales                     B scales
//   bf16        bf16 [M,K],[N,K]  none                         none
//   ptpc        e4m3              fp32 [M]                     fp32 [N]
//   blockscale  e4m3              fp32 [M, K/128]              fp32 [ceil(N/128), K/128]
//   mxfp8 raw   e4m3              ue8m0 [M, K/32]              ue8m0 [ceil(N/32), K/32]
//   mxfp8 packed e4m3             the uint32 words of weave::ref::pack_mxfp8_scales, viewed as
//                                 ue8m0 [ceil(K/128), 4*M] and [ceil(K/128), 4*ceil(N/32)]
//
// Without a Hopper GPU it still validates and plans every mode (pure CPU), says why the GPU part
// is skipped, and exits 77 (the usual "skipped" status: it could not run the GEMMs).
// Exit 0: every mode ran and matched; 1: a result was wrong; 2: bad arguments, a shape some mode
// cannot run (each says why), or weave raised an error.
//   ./gemm [M N K]        (default 256 512 1024; each 1 .. 2^31 - 1)
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "weave/weave.hpp"

namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Owns one device allocation.
struct DeviceBytes {
  void* ptr = nullptr;
  explicit DeviceBytes(std::size_t bytes, const void* host = nullptr) {
    check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc");
    if (host) check_cuda(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceBytes() { cudaFree(ptr); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
};

struct Operand {  // one quantised matrix on the device, with views in weave's layouts
  std::vector<std::unique_ptr<DeviceBytes>> owned;
  weave::TensorView values, scales;
  void* keep(std::size_t bytes, const void* host) {
    owned.push_back(std::make_unique<DeviceBytes>(bytes, host));
    return owned.back()->ptr;
  }
};

void upload(const weave::ref::QuantMatrix& q, weave::ScaleLayout layout, int device, Operand& out) {
  using weave::DType;
  using weave::TensorView;
  const bool bf16 = q.mode == weave::ScaleMode::kBF16;
  void* values = bf16 ? out.keep(q.bf16.size() * 2, q.bf16.data()) : out.keep(q.e4m3.size(), q.e4m3.data());
  out.values = TensorView::matrix(values, bf16 ? DType::kBF16 : DType::kE4M3, q.rows, q.cols, device);
  switch (q.mode) {
    case weave::ScaleMode::kBF16:
      break;  // no scales: a default TensorView (rank 0)
    case weave::ScaleMode::kPtpc:
      out.scales = TensorView::vector(out.keep(q.scales.size() * 4, q.scales.data()), DType::kF32, q.rows, device);
      break;
    case weave::ScaleMode::kBlockscale:
      out.scales = TensorView::matrix(out.keep(q.scales.size() * 4, q.scales.data()), DType::kF32, q.scale_rows,
                                      q.scale_cols, device);
      break;
    case weave::ScaleMode::kMxfp8:
      if (layout == weave::ScaleLayout::kRaw) {
        out.scales = TensorView::matrix(out.keep(q.ue8m0.size(), q.ue8m0.data()), DType::kUE8M0, q.scale_rows,
                                        q.scale_cols, device);
      } else {
        const std::vector<uint32_t> words = weave::ref::pack_mxfp8_scales(q.ue8m0.data(), q.scale_rows, q.scale_cols);
        const int64_t k_words = (q.cols + 127) / 128;
        out.scales = TensorView::matrix(out.keep(words.size() * 4, words.data()), DType::kUE8M0, k_words,
                                        4 * q.scale_rows, device);
      }
      break;
  }
}

// A dimension from the command line: decimal digits only (atoll would read "abc" as 0 and "1e3"
// as 1), 1 .. 2^31 - 1 (TMA coordinates are 32-bit).
bool parse_dim(const char* text, int64_t* out) {
  int64_t v = 0;
  if (*text == '\0') return false;
  for (const char* c = text; *c; ++c) {
    if (*c < '0' || *c > '9') return false;
    v = v * 10 + (*c - '0');
    if (v > (int64_t{1} << 31) - 1) return false;
  }
  *out = v;
  return v >= 1;
}

struct Case {
  const char* name;
  weave::ScaleMode mode;
  weave::ScaleLayout layout;
};

}  // namespace

int main(int argc, char** argv) try {
  int64_t m = 256, n = 512, k = 1024;
  if (argc != 1 && (argc != 4 || !parse_dim(argv[1], &m) || !parse_dim(argv[2], &n) || !parse_dim(argv[3], &k))) {
    std::fprintf(stderr, "usage: %s [M N K]: three integers, each 1 .. 2147483647 (default 256 512 1024)\n", argv[0]);
    return 2;
  }
  std::printf("weave %s (headers %s): GEMM %lld x %lld x %lld\n", weave::version(), WEAVE_VERSION_STRING,
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
  const std::vector<Case> cases = {{"bf16", weave::ScaleMode::kBF16, weave::ScaleLayout::kRaw},
                                   {"ptpc", weave::ScaleMode::kPtpc, weave::ScaleLayout::kRaw},
                                   {"blockscale", weave::ScaleMode::kBlockscale, weave::ScaleLayout::kRaw},
                                   {"mxfp8 raw", weave::ScaleMode::kMxfp8, weave::ScaleLayout::kRaw},
                                   {"mxfp8 packed", weave::ScaleMode::kMxfp8, weave::ScaleLayout::kPacked}};

  // CPU part: validate and plan every mode (no GPU needed; 132 SMs = H100/H200).
  int cannot_run = 0;
  for (const Case& c : cases) {
    const weave::GemmProblem p{.m = m, .n = n, .k = k, .mode = c.mode, .scale_layout = c.layout,
                               .out_dtype = weave::DType::kF32};
    const std::string why = weave::gemm_validate_problem(p);
    if (!why.empty()) {
      std::printf("  %-12s cannot run: %s\n", c.name, why.c_str());
      ++cannot_run;
      continue;
    }
    const weave::GemmPlan plan = weave::gemm_plan(p, 132);
    std::printf("  %-12s plan: %s grid %d split_k %d\n", c.name, plan.kernel.c_str(), plan.grid, plan.split_k);
  }
  if (cannot_run > 0) {
    std::fprintf(stderr, "%lld x %lld x %lld breaks a rule of %d mode(s) (above); every mode needs a shape it can run\n",
                 static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k), cannot_run);
    return 2;
  }
  const std::string no_gpu = weave::no_gpu_reason();
  if (!no_gpu.empty()) {
    std::printf("GPU part skipped: %s\n", no_gpu.c_str());
    return 77;
  }

  // GPU part: run each mode and compare with the fp64 reference.
  const int device = 0;
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  weave::ref::Random rng(42);
  const std::vector<float> xa = weave::ref::random_normal(rng, m * k), xb = weave::ref::random_normal(rng, n * k);
  int wrong_modes = 0;
  for (const Case& c : cases) {
    const weave::GemmProblem p{.m = m, .n = n, .k = k, .mode = c.mode, .scale_layout = c.layout,
                               .out_dtype = weave::DType::kF32};
    const auto qa = weave::ref::quantize(xa.data(), m, k, c.mode, weave::ref::Operand::kA);
    const auto qb = weave::ref::quantize(xb.data(), n, k, c.mode, weave::ref::Operand::kB);
    Operand a, b;
    upload(qa, c.layout, device, a);
    upload(qb, c.layout, device, b);
    DeviceBytes out(static_cast<std::size_t>(m * n) * 4);
    const weave::TensorView cview = weave::TensorView::matrix(out.ptr, weave::DType::kF32, m, n, device);
    weave::Gemm gemm(p, a.values, b.values, weave::GemmScales{a.scales, b.scales}, cview);
    std::unique_ptr<DeviceBytes> workspace;  // split-K plans need one (fp32 partials)
    if (gemm.workspace_bytes() > 0) {
      workspace = std::make_unique<DeviceBytes>(gemm.workspace_bytes());
      gemm.set_workspace(workspace->ptr, gemm.workspace_bytes());
    }
    gemm.run(stream);  // enqueues only; graph-capturable
    check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::vector<float> got(static_cast<std::size_t>(m * n));
    check_cuda(cudaMemcpy(got.data(), out.ptr, got.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    const std::vector<double> want = weave::ref::gemm_f64(qa, qb);
    double sq = 0;
    for (double v : want) sq += v * v;
    const double rms = std::sqrt(sq / static_cast<double>(want.size()));
    // fp32 accumulation against an fp64 sum of the same quantised operands; the benchmark's bounds.
    const bool bf16 = c.mode == weave::ScaleMode::kBF16;
    const weave::ref::Comparison cmp =
        weave::ref::compare(got.data(), want.data(), m * n, bf16 ? 1e-4 : 1e-3, (bf16 ? 5e-4 : 1e-2) * rms);
    std::printf("  %-12s ran %s: %lld of %lld wrong, rel_l2 %.2e\n", c.name, gemm.plan().kernel.c_str(),
                static_cast<long long>(cmp.wrong), static_cast<long long>(cmp.count), cmp.rel_l2);
    wrong_modes += cmp.wrong != 0;
  }
  cudaStreamDestroy(stream);
  return wrong_modes == 0 ? 0 : 1;
} catch (const weave::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
