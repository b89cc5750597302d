// weave::Gemm, the standalone op: validates operands, plans once, builds the TMA descriptors on
// the host, and enqueues one kernel per run() (two with split-K: the GEMM writing fp32 partials
// into the caller's workspace, then gemm::split_k_reduce).
#include "weave/gemm.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/kernel_args.hpp"
#include "gemm/planner.hpp"
#include "gemm/split_k_reduce.hpp"
#include "gemv/gemv.hpp"
#include "hopper/tma_descriptor.hpp"
#include "hopper/wait_record.hpp"

namespace weave {

struct Gemm::Impl {
  GemmProblem problem;
  GemmPlan plan;
  int device = -1;
  int num_sms = 0;
  const gemm::GemmInstance* instance = nullptr;  // null on the GEMV path
  gemm::LocalKernelArgs args{};
  detail::GemvArgs gemv{};
  bool drop_wait = false;
  void* workspace = nullptr;  // split-K partials (set_workspace)
  std::size_t workspace_size = 0;
  gemm::StoreLocalParams split_epi{};  // the epilogue over the workspace planes (split-K only)
  void* c = nullptr;                   // C and its leading dimension (the split-K reduction's output)
  int64_t ldc = 0;
};

// The epilogue's TMA-store map over `planes` stacked [m, n] outputs of `dtype` (gemm/kernel_args.hpp).
static CUtensorMap epilogue_map(const char* what, void* base, DType dtype, int64_t planes, int64_t m, int64_t n,
                                int64_t ld) {
  return hopper::make_tma_3d_planes(what, base, dtype, planes, m, n, ld, m * ld, gemm::kEpilogueBoxRows,
                                    static_cast<int>(128 / dtype_bytes(dtype)), hopper::TmaSwizzle::k128B);
}

static DType input_dtype(ScaleMode mode) { return mode == ScaleMode::kBF16 ? DType::kBF16 : DType::kE4M3; }

// The operand rules of weave/gemm.hpp; throws kInvalidArgument naming the argument.
static void check_operands(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                           const TensorView& c, int device) {
  const DType in = input_dtype(p.mode);
  expect_matrix(a, "A", MatrixRule{in, p.m, p.k, true, true, device});
  expect_matrix(b, "B", MatrixRule{in, p.n, p.k, true, true, device});
  expect_matrix(c, "C", MatrixRule{p.out_dtype, p.m, p.n, true, true, device});
  switch (p.mode) {
    case ScaleMode::kBF16:
      WEAVE_EXPECT_ARG(s.a.rank == 0 && s.b.rank == 0,
                       "argument 'scales': mode bf16 takes no scales (got scale_a rank " << s.a.rank << ", scale_b rank "
                                                                                         << s.b.rank << ")");
      break;
    case ScaleMode::kPtpc:
      expect_vector(s.a, "scale_a", DType::kF32, p.m, device);
      expect_vector(s.b, "scale_b", DType::kF32, p.n, device);
      break;
    case ScaleMode::kBlockscale: {
      // Exactly one layout is accepted: row-major, K-block contiguous. A transposed (M-major)
      // tensor of the same shape fails the contiguity rule instead of being guessed.
      const int64_t kb = p.k / 128;
      expect_matrix(s.a, "scale_a", MatrixRule{DType::kF32, p.m, kb, true, false, device});
      expect_matrix(s.b, "scale_b", MatrixRule{DType::kF32, (p.n + 127) / 128, kb, true, false, device});
      WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(s.a.data) % 4 == 0 && reinterpret_cast<uintptr_t>(s.b.data) % 4 == 0,
                       "arguments 'scale_a'/'scale_b': must be 4-byte aligned fp32");
      break;
    }
    case ScaleMode::kMxfp8: {
      // The layout is explicit (problem.scale_layout), so a tensor whose shape happens to fit both
      // layouts (e.g. M = 1, K = 128) is read as the one declared.
      const int64_t groups = p.k / 32, b_rows = (p.n + 31) / 32;
      if (p.scale_layout == ScaleLayout::kRaw) {
        expect_matrix(s.a, "scale_a", MatrixRule{DType::kUE8M0, p.m, groups, true, false, device});
        expect_matrix(s.b, "scale_b", MatrixRule{DType::kUE8M0, b_rows, groups, true, false, device});
      } else {
        // pack_mxfp8_scales' uint32 words [ceil(K/128), rows], viewed as bytes [ceil(K/128), 4 * rows].
        const int64_t k_words = (p.k + 127) / 128;
        expect_matrix(s.a, "scale_a", MatrixRule{DType::kUE8M0, k_words, 4 * p.m, true, false, device});
        expect_matrix(s.b, "scale_b", MatrixRule{DType::kUE8M0, k_words, 4 * b_rows, true, false, device});
        WEAVE_EXPECT_ARG(s.a.ld() % 4 == 0 && s.b.ld() % 4 == 0,
                         "arguments 'scale_a'/'scale_b': packed mxfp8 rows must be whole uint32 words (leading "
                         "dimensions "
                             << s.a.ld() << " and " << s.b.ld() << " bytes must be multiples of 4)");
      }
      WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(s.a.data) % 4 == 0 && reinterpret_cast<uintptr_t>(s.b.data) % 4 == 0,
                       "arguments 'scale_a'/'scale_b': mxfp8 scale tensors must be 4-byte aligned (the kernels copy "
                       "aligned 4-byte words)");
      break;
    }
  }
}

// The decode GEMV reads blockscale and mxfp8 scales densely (no leading dimension).
static void check_gemv_scales(const GemmProblem& p, const GemmScales& s) {
  if (p.mode != ScaleMode::kBlockscale && p.mode != ScaleMode::kMxfp8) return;
  WEAVE_EXPECT_ARG(s.a.ld() == s.a.cols() && s.b.ld() == s.b.cols(),
                   "arguments 'scale_a'/'scale_b': m = " << p.m << " runs the decode GEMV, which reads "
                                                         << to_string(p.mode)
                                                         << " scales densely; leading dimensions must equal the "
                                                            "column counts (got "
                                                         << s.a.ld() << " / " << s.a.cols() << " and " << s.b.ld()
                                                         << " / " << s.b.cols() << ")");
}

struct ArgsOut {
  gemm::LocalKernelArgs& args;
  detail::GemvArgs& gemv;
  void*& c;
  int64_t& ldc;
};

static void fill_args(const GemmProblem& p, const GemmPlan& plan, bool drop_wait, ArgsOut out, const TensorView& a,
                      const TensorView& b, const GemmScales& s, const TensorView& c) {
  out.c = c.data;
  out.ldc = c.ld();
  if (plan.gemv) {
    auto& g = out.gemv;
    g.a = a.data;
    g.b = b.data;
    g.scale_a = s.a.data;
    g.scale_b = s.b.data;
    g.c = c.data;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.lda = a.ld();
    g.ldb = b.ld();
    g.ldc = c.ld();
    g.mode = p.mode;
    g.out_dtype = p.out_dtype;
    return;
  }
  const DType in = input_dtype(p.mode);
  auto& m = out.args.main;
  m.tma_a = hopper::make_tma_2d("A", a.data, in, p.m, p.k, a.ld(), plan.block_m, plan.block_k,
                                hopper::TmaSwizzle::k128B);
  m.tma_b = hopper::make_tma_2d("B", b.data, in, p.n, p.k, b.ld(), plan.block_n, plan.block_k,
                                hopper::TmaSwizzle::k128B);
  m.scale_a = s.a.data;
  m.scale_b = s.b.data;
  // Row strides in the unit each policy indexes: floats (blockscale), bytes (mxfp8 raw), uint32
  // words (mxfp8 packed).
  const bool packed = p.mode == ScaleMode::kMxfp8 && p.scale_layout == ScaleLayout::kPacked;
  const bool strided = p.mode == ScaleMode::kBlockscale || p.mode == ScaleMode::kMxfp8;
  m.scale_a_ld = strided ? (packed ? s.a.ld() / 4 : s.a.ld()) : 0;
  m.scale_b_ld = strided ? (packed ? s.b.ld() / 4 : s.b.ld()) : 0;
  m.m = static_cast<int32_t>(p.m);
  m.n = static_cast<int32_t>(p.n);
  m.k = static_cast<int32_t>(p.k);
  m.group_rows = plan.group_rows;
  const int64_t k_blocks = (p.k + plan.block_k - 1) / plan.block_k;
  m.split_k = plan.split_k;
  m.k_blocks_per_split = static_cast<int32_t>(gemm::split_k_blocks_per_split(k_blocks, plan.split_k));
  WEAVE_EXPECT(plan.split_k >= 1 && static_cast<int64_t>(plan.split_k - 1) * m.k_blocks_per_split < k_blocks,
               Status::kInternal,
               "split-K plan " << plan.split_k << " over " << k_blocks << " K blocks leaves an empty split");
  m.debug_drop_full_wait = drop_wait ? 1 : 0;
  m.timeout_record = hopper::wait_timeout_record();
  // With split-K the kernel stores fp32 partials into the workspace (set_workspace builds that
  // map); C is then written by the reduction only.
  if (plan.split_k <= 1) out.args.epi.tma_c = epilogue_map("C", c.data, p.out_dtype, 1, p.m, p.n, c.ld());
}

Gemm::Gemm(const GemmProblem& problem, TensorView a, TensorView b, GemmScales scales, TensorView c,
           const GemmPlanOverrides& overrides)
    : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.problem = problem;
  const std::string bad = gemm_validate_problem(problem);
  WEAVE_EXPECT_ARG(bad.empty(), "problem m=" << problem.m << " n=" << problem.n << " k=" << problem.k << ": " << bad);
  WEAVE_EXPECT_ARG(a.device >= 0, "argument 'A': must live in GPU memory (got " << a.describe() << ")");
  im.device = a.device;
  check_operands(problem, a, b, scales, c, im.device);
  WEAVE_CHECK_CUDA(cudaDeviceGetAttribute(&im.num_sms, cudaDevAttrMultiProcessorCount, im.device));
  im.plan = gemm_plan(problem, im.num_sms, overrides);
  if (im.plan.gemv) check_gemv_scales(problem, scales);
  im.drop_wait = env::get_bool("WEAVE_GEMM_DEBUG_DROP_WAIT", false);
  if (im.drop_wait)
    WEAVE_LOG(kWarn, "WEAVE_GEMM_DEBUG_DROP_WAIT=1: GEMM consumers skip the full-barrier wait before reading a stage "
                     "(negative control; results will be wrong)");
  if (!im.plan.gemv) {
    for (const auto& i : gemm::gemm_instances())
      if (im.plan.kernel == i.name) im.instance = &i;
    WEAVE_EXPECT(im.instance != nullptr, Status::kInternal, "planned kernel " << im.plan.kernel << " is not registered");
    int current = -1;
    WEAVE_CHECK_CUDA(cudaGetDevice(&current));
    if (current != im.device) WEAVE_CHECK_CUDA(cudaSetDevice(im.device));
    try {
      im.instance->prepare();
    } catch (...) {
      if (current != im.device) cudaSetDevice(current);
      throw;
    }
    if (current != im.device) WEAVE_CHECK_CUDA(cudaSetDevice(current));
  }
  fill_args(problem, im.plan, im.drop_wait, ArgsOut{im.args, im.gemv, im.c, im.ldc}, a, b, scales, c);
}

Gemm::~Gemm() = default;
Gemm::Gemm(Gemm&&) noexcept = default;
Gemm& Gemm::operator=(Gemm&&) noexcept = default;

const GemmPlan& Gemm::plan() const { return impl_->plan; }

void Gemm::set_operands(TensorView a, TensorView b, GemmScales scales, TensorView c) {
  check_operands(impl_->problem, a, b, scales, c, impl_->device);
  auto& im = *impl_;
  if (im.plan.gemv) check_gemv_scales(im.problem, scales);
  fill_args(im.problem, im.plan, im.drop_wait, ArgsOut{im.args, im.gemv, im.c, im.ldc}, a, b, scales, c);
}

std::size_t Gemm::workspace_bytes() const {
  const auto& im = *impl_;
  if (im.plan.gemv || im.plan.split_k <= 1) return 0;
  return static_cast<std::size_t>(im.plan.split_k) * static_cast<std::size_t>(im.problem.m) *
         static_cast<std::size_t>(im.problem.n) * sizeof(float);
}

void Gemm::set_workspace(void* workspace, std::size_t bytes) {
  auto& im = *impl_;
  WEAVE_EXPECT_ARG(bytes == 0 || workspace != nullptr, "argument 'workspace': null with " << bytes << " bytes");
  const std::size_t need = workspace_bytes();
  if (need > 0) {
    WEAVE_EXPECT_ARG(workspace != nullptr && bytes >= need,
                     "argument 'bytes': the plan (split-K " << im.plan.split_k << ") needs a workspace of " << need
                                                            << " bytes for its fp32 partials (got " << bytes << ")");
    WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
                     "argument 'workspace': must be 16-byte aligned (the partials are read as float4)");
    cudaPointerAttributes attr{};
    WEAVE_CHECK_CUDA(cudaPointerGetAttributes(&attr, workspace));
    WEAVE_EXPECT_ARG(attr.type == cudaMemoryTypeDevice && attr.device == im.device,
                     "argument 'workspace': must be device memory on cuda:" << im.device);
  }
  im.workspace = workspace;
  im.workspace_size = bytes;
  if (need > 0) {
    im.split_epi.tma_c = epilogue_map("workspace", workspace, DType::kF32, im.plan.split_k, im.problem.m,
                                           im.problem.n, im.problem.n);
  }
}

void Gemm::run(cudaStream_t stream) const {
  const auto& im = *impl_;
  if (im.plan.gemv) {
    detail::gemv_launch(im.gemv, im.num_sms, stream);
    return;
  }
  if (im.plan.split_k <= 1) {
    im.instance->launch(im.args, im.plan.grid, stream);
    return;
  }
  // split-K: the fp32-output kernel writes partial s into rows [s * M, s * M + M) of the
  // workspace, then the reduction sums them in split order into C.
  WEAVE_EXPECT(im.workspace != nullptr && im.workspace_size >= workspace_bytes(), Status::kInvalidArgument,
               "Gemm::run: the plan splits K " << im.plan.split_k << " ways and needs a device workspace of "
                                               << workspace_bytes()
                                               << " bytes for its fp32 partials; call Gemm::set_workspace(ptr, bytes) "
                                                  "with bytes >= workspace_bytes() before run()");
  gemm::LocalKernelArgs args = im.args;
  args.epi = im.split_epi;
  im.instance->launch(args, im.plan.grid, stream);
  gemm::split_k_reduce(static_cast<const float*>(im.workspace), im.problem.m, im.problem.n, im.plan.split_k, im.c,
                       im.ldc, im.problem.out_dtype, im.num_sms, stream);
}

}  // namespace weave
