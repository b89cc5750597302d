#include "bench/cublaslt.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <sstream>
#include <utility>

#include "common/check.hpp"
#include "gemm/scale_a_mn_copy.hpp"

namespace weave::bench {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }

std::string problem_name(const GemmProblem& p) {
  std::ostringstream os;
  os << "cuBLASLt " << to_string(p.mode) << " " << p.m << "x" << p.n << "x" << p.k << " ->"
     << to_string(p.out_dtype);
  return os.str();
}

// Checks a cuBLASLt call and names the status (WEAVE_CHECK_CUBLAS gives only its number).
#define WEAVE_LT(expr)                                                                          \
  do {                                                                                          \
    cublasStatus_t weave_lt_ = (expr);                                                          \
    if (weave_lt_ != CUBLAS_STATUS_SUCCESS)                                                     \
      throw ::weave::Error(::weave::Status::kCublasError, #expr, WEAVE_LOCATION,                \
                           std::string(cublasLtGetStatusName(weave_lt_)) + " (" +               \
                               cublasLtGetStatusString(weave_lt_) + ")");                      \
  } while (0)

cudaDataType_t lt_type(DType d) {
  switch (d) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF32: return CUDA_R_32F;
    case DType::kE4M3: return CUDA_R_8F_E4M3;
    case DType::kUE8M0: break;
  }
  throw Error(Status::kInvalidArgument, "", WEAVE_LOCATION, "no cuBLASLt type for ue8m0 data");
}

// [R][L] (ld_in) -> [R][ld_out >= L], pad filled with 0: the BLK128x128 weight-scale order.
__global__ void pad_scales(const float* __restrict__ in, int64_t ld_in, float* __restrict__ out,
                           int64_t rows, int64_t cols, int64_t ld_out) {
  const int64_t total = rows * ld_out;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / ld_out, c = i % ld_out;
    out[i] = c < cols ? in[r * ld_in + c] : 0.0f;
  }
}

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 2048)); }

}  // namespace

struct CublasLtGemm::Impl {
  GemmProblem problem;
  int device = 0;
  CublasLtOptions options;
  int64_t lda = 0, ldb = 0, ldc = 0;  // ours: A [M, K], B [N, K], C [M, N]
  std::string name;
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  cublasLtMatmulHeuristicResult_t heuristic{};
  void* workspace = nullptr;
  float* scale_placeholder = nullptr;    // see the heuristic query below
  const float* bound_a_scale = nullptr;  // scale pointers currently set on `desc`
  const float* bound_b_scale = nullptr;

  ~Impl() {
    if (scale_placeholder) cudaFree(scale_placeholder);
    if (workspace) cudaFree(workspace);
    if (lt_c) cublasLtMatrixLayoutDestroy(lt_c);
    if (lt_b) cublasLtMatrixLayoutDestroy(lt_b);
    if (lt_a) cublasLtMatrixLayoutDestroy(lt_a);
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (handle) cublasLtDestroy(handle);
  }

  bool fp8() const { return problem.mode != ScaleMode::kBF16; }
  DType in_dtype() const { return fp8() ? DType::kE4M3 : DType::kBF16; }
};

std::string CublasLtGemm::supports(const GemmProblem& p) {
  std::ostringstream why;
  if (p.m < 1 || p.n < 1 || p.k < 1) {
    why << "M, N, K must be >= 1 (got " << p.m << ", " << p.n << ", " << p.k << ")";
  } else if (p.out_dtype != DType::kBF16 && p.out_dtype != DType::kF32) {
    why << "output dtype must be bf16 or fp32 (got " << to_string(p.out_dtype) << ")";
  } else if (p.mode == ScaleMode::kMxfp8) {
    why << "cuBLASLt has no mxfp8 (VEC32_UE8M0) mode on Hopper; it is Blackwell-only";
  } else if (p.mode != ScaleMode::kBF16 && p.k % 16 != 0) {
    why << "fp8 needs K to be a multiple of 16 (16-byte rows); got K = " << p.k;
  } else if (p.mode == ScaleMode::kBlockscale && p.k % 128 != 0) {
    why << "blockscale needs K to be a multiple of 128 (the scale group); got K = " << p.k;
  } else if (p.mode == ScaleMode::kBlockscale && (p.m % 4 != 0 || p.n % 4 != 0)) {
    why << "cuBLASLt 128-element / 128x128 block scaling needs M and N to be multiples of 4 "
           "(cuBLAS manual 3.1.4.5.1); got M = "
        << p.m << ", N = " << p.n;
  }
  return why.str();
}

CublasLtGemm::CublasLtGemm(const GemmProblem& problem, int device, CublasLtOptions options,
                           int64_t lda, int64_t ldb, int64_t ldc)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.problem = problem;
  s.device = device;
  s.options = options;
  s.lda = lda ? lda : problem.k;
  s.ldb = ldb ? ldb : problem.k;
  s.ldc = ldc ? ldc : problem.n;
  s.name = problem_name(problem);
  const std::string why = supports(problem);
  if (!why.empty()) throw Error(Status::kUnsupported, "", WEAVE_LOCATION, s.name + ": " + why);
  WEAVE_EXPECT_ARG(s.lda >= problem.k && s.ldb >= problem.k && s.ldc >= problem.n,
                   s.name << ": leading dimensions must cover the rows (lda " << s.lda << ", ldb "
                          << s.ldb << " >= K; ldc " << s.ldc << " >= N)");
  WEAVE_EXPECT_ARG(!options.fast_accum || problem.mode == ScaleMode::kPtpc,
                   s.name << ": fast accumulation is only offered for ptpc (cuBLASLt refuses it "
                             "with block scaling; bf16 has no such switch)");
  with_context(s.name, [&] {
    int current = -1;
    WEAVE_CHECK_CUDA(cudaGetDevice(&current));
    WEAVE_EXPECT_ARG(current == device, "device " << device << " must be current (current is "
                                                  << current << ")");
    WEAVE_LT(cublasLtCreate(&s.handle));
    WEAVE_LT(cublasLtMatmulDescCreate(&s.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a,
                                            sizeof(trans_a)));
    WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b,
                                            sizeof(trans_b)));
    if (problem.mode == ScaleMode::kPtpc) {
      const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                              sizeof(mode)));
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                              sizeof(mode)));
      const int8_t fast = options.fast_accum ? 1 : 0;
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                              sizeof(fast)));
    } else if (problem.mode == ScaleMode::kBlockscale) {
      const int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;  // our weights
      const int32_t mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;      // our activations
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a,
                                              sizeof(mode_a)));
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b,
                                              sizeof(mode_b)));
    }
    const cudaDataType_t in = lt_type(s.in_dtype()), out = lt_type(problem.out_dtype);
    // Column-major views of our row-major buffers (see the header comment).
    WEAVE_LT(cublasLtMatrixLayoutCreate(&s.lt_a, in, problem.k, problem.n, s.ldb));
    WEAVE_LT(cublasLtMatrixLayoutCreate(&s.lt_b, in, problem.k, problem.m, s.lda));
    WEAVE_LT(cublasLtMatrixLayoutCreate(&s.lt_c, out, problem.n, problem.m, s.ldc));

    if (s.fp8()) {
      // cuBLASLt refuses the heuristic query (CUBLAS_STATUS_INVALID_VALUE: "the scaling mode ...
      // requires a custom pointer for A scale") for vector / block scale modes whose scale
      // pointers are unset, and a kernel chosen without scales need not support them. So the
      // query sees placeholder pointers (16-byte aligned device memory, never read); `run` binds
      // the real ones before every enqueue that changes them.
      WEAVE_CHECK_CUDA(cudaMalloc(&s.scale_placeholder, 256));
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &s.scale_placeholder, sizeof(s.scale_placeholder)));
      WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &s.scale_placeholder, sizeof(s.scale_placeholder)));
      s.bound_a_scale = s.bound_b_scale = s.scale_placeholder;
    }
    cublasLtMatmulPreference_t pref = nullptr;
    WEAVE_LT(cublasLtMatmulPreferenceCreate(&pref));
    std::size_t ws = options.workspace_bytes;
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(s.handle, s.desc, s.lt_a, s.lt_b, s.lt_c, s.lt_c, pref,
                                          1, &s.heuristic, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    WEAVE_LT(st);
    WEAVE_EXPECT(found > 0, Status::kUnsupported,
                 "cublasLtMatmulAlgoGetHeuristic returned no algorithm within a "
                     << ws << "-byte workspace");
    s.algo = s.heuristic.algo;
    if (options.workspace_bytes) WEAVE_CHECK_CUDA(cudaMalloc(&s.workspace, options.workspace_bytes));
  });
}

CublasLtGemm::~CublasLtGemm() = default;
CublasLtGemm::CublasLtGemm(CublasLtGemm&&) noexcept = default;
CublasLtGemm& CublasLtGemm::operator=(CublasLtGemm&&) noexcept = default;

const GemmProblem& CublasLtGemm::problem() const { return impl_->problem; }

CublasLtScales CublasLtGemm::prepare_scales(const GemmScales& scales, cudaStream_t stream) const {
  const Impl& s = *impl_;
  const GemmProblem& p = s.problem;
  CublasLtScales out;
  with_context(s.name + " prepare_scales", [&] {
    if (p.mode == ScaleMode::kBF16) return;
    if (p.mode == ScaleMode::kPtpc) {
      expect_vector(scales.a, "scales.a", DType::kF32, p.m, s.device);
      expect_vector(scales.b, "scales.b", DType::kF32, p.n, s.device);
      WEAVE_EXPECT_ARG(scales.a.strides[0] == 1 && scales.b.strides[0] == 1,
                       "ptpc scale vectors must be contiguous");
      out.lt_a = static_cast<const float*>(scales.b.data);
      out.lt_b = static_cast<const float*>(scales.a.data);
      return;
    }
    // blockscale
    const int64_t l = p.k / 128, l4 = round_up(l, 4), nb = ceil_div(p.n, 128);
    expect_matrix(scales.a, "scales.a",
                  MatrixRule{.dtype = DType::kF32, .rows = p.m, .cols = l, .device = s.device});
    expect_matrix(scales.b, "scales.b",
                  MatrixRule{.dtype = DType::kF32, .rows = nb, .cols = l, .device = s.device});
    struct Owned {
      float* a = nullptr;  // cuBLASLt A: weights, [nb][l4]
      float* b = nullptr;  // cuBLASLt B: activations, [l][M]
      ~Owned() {
        if (a) cudaFree(a);
        if (b) cudaFree(b);
      }
    };
    auto owned = std::make_shared<Owned>();
    WEAVE_CHECK_CUDA(cudaMalloc(&owned->a, sizeof(float) * nb * l4));
    WEAVE_CHECK_CUDA(cudaMalloc(&owned->b, sizeof(float) * l * p.m));
    pad_scales<<<blocks_for(nb * l4), 256, 0, stream>>>(
        static_cast<const float*>(scales.b.data), scales.b.ld(), owned->a, nb, l, l4);
    WEAVE_CHECK_LAUNCH();
    // [M][L] row-major -> [L][M] (M contiguous, ld M: `supports` keeps M a multiple of 4): the
    // VEC128 activation-scale order, by weave::Gemm's own copy for row-major scales.
    gemm::scale_a_mn_copy({.src = static_cast<const float*>(scales.a.data),
                           .src_ld = p.m > 1 ? scales.a.ld() : l,
                           .m = p.m,
                           .k_blocks = l,
                           .dst = owned->b,
                           .dst_ld = p.m},
                          stream);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream));
    out.lt_a = owned->a;
    out.lt_b = owned->b;
    out.owner = owned;
  });
  return out;
}

void CublasLtGemm::run(const TensorView& a, const TensorView& b, const CublasLtScales& scales,
                       const TensorView& c, cudaStream_t stream) {
  Impl& s = *impl_;
  const GemmProblem& p = s.problem;
  with_context(s.name, [&] {
    const DType in = s.in_dtype();
    expect_matrix(a, "A", MatrixRule{.dtype = in, .rows = p.m, .cols = p.k, .device = s.device});
    expect_matrix(b, "B", MatrixRule{.dtype = in, .rows = p.n, .cols = p.k, .device = s.device});
    expect_matrix(c, "C",
                  MatrixRule{.dtype = p.out_dtype, .rows = p.m, .cols = p.n, .device = s.device});
    WEAVE_EXPECT_ARG(a.ld() == s.lda && b.ld() == s.ldb && c.ld() == s.ldc,
                     "leading dimensions (" << a.ld() << ", " << b.ld() << ", " << c.ld()
                                            << ") differ from the planned (" << s.lda << ", "
                                            << s.ldb << ", " << s.ldc << ")");
    if (s.fp8()) {
      WEAVE_EXPECT_ARG(scales.lt_a && scales.lt_b,
                       "fp8 modes need scales from prepare_scales (got null pointers)");
      // Setting an attribute is host-only work on the descriptor; cuBLASLt reads the pointers
      // when the call is enqueued, so rotating weight copies under graph capture is safe.
      if (scales.lt_a != s.bound_a_scale) {
        WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                &scales.lt_a, sizeof(scales.lt_a)));
        s.bound_a_scale = scales.lt_a;
      }
      if (scales.lt_b != s.bound_b_scale) {
        WEAVE_LT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                &scales.lt_b, sizeof(scales.lt_b)));
        s.bound_b_scale = scales.lt_b;
      }
    }
    const float alpha = 1.0f, beta = 0.0f;  // beta = 0: C is not read, only written (as D)
    WEAVE_LT(cublasLtMatmul(s.handle, s.desc, &alpha, b.data, s.lt_a, a.data, s.lt_b, &beta,
                            c.data, s.lt_c, c.data, s.lt_c, &s.algo, s.workspace,
                            s.options.workspace_bytes, stream));
  });
}

std::string CublasLtGemm::describe() const {
  const Impl& s = *impl_;
  int32_t id = -1, splitk = 0;
  uint32_t tile = 0, stages = 0;
  uint16_t cluster = 0;
  std::size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&s.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&s.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                       &written);
  cublasLtMatmulAlgoConfigGetAttribute(&s.algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                       sizeof(stages), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&s.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                       sizeof(splitk), &written);
  cublasLtMatmulAlgoConfigGetAttribute(&s.algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster,
                                       sizeof(cluster), &written);
  std::ostringstream os;
  os << s.name << (s.options.fast_accum ? " fast-accum" : "") << " algo " << id << " tile "
     << tile << " stages " << stages << " splitk " << splitk << " cluster " << cluster
     << " waves " << s.heuristic.wavesCount << " ws " << s.heuristic.workspaceSize << " B";
  return os.str();
}

}  // namespace weave::bench
