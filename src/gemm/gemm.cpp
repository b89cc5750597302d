// weave::Gemm, the standalone op: validates operands, plans once, builds the TMA descriptors on
// the host, and enqueues one kernel per run().
#include "weave/gemm.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/kernel_args.hpp"
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
};

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
    case ScaleMode::kMxfp8:
      // Only the GEMV path takes mxfp8; it checks its own scale layouts (gemv_launch).
      break;
  }
}

struct ArgsOut {
  gemm::LocalKernelArgs& args;
  detail::GemvArgs& gemv;
};

static void fill_args(const GemmProblem& p, const GemmPlan& plan, bool drop_wait, ArgsOut out, const TensorView& a,
                      const TensorView& b, const GemmScales& s, const TensorView& c) {
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
  m.scale_a = static_cast<const float*>(s.a.data);
  m.scale_b = static_cast<const float*>(s.b.data);
  m.scale_a_ld = p.mode == ScaleMode::kBlockscale ? s.a.ld() : 0;
  m.scale_b_ld = p.mode == ScaleMode::kBlockscale ? s.b.ld() : 0;
  m.m = static_cast<int32_t>(p.m);
  m.n = static_cast<int32_t>(p.n);
  m.k = static_cast<int32_t>(p.k);
  m.group_rows = plan.group_rows;
  m.debug_drop_full_wait = drop_wait ? 1 : 0;
  m.timeout_record = hopper::wait_timeout_record();
  out.args.epi.c = c.data;
  out.args.epi.ldc = c.ld();
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
  fill_args(problem, im.plan, im.drop_wait, ArgsOut{im.args, im.gemv}, a, b, scales, c);
}

Gemm::~Gemm() = default;
Gemm::Gemm(Gemm&&) noexcept = default;
Gemm& Gemm::operator=(Gemm&&) noexcept = default;

const GemmPlan& Gemm::plan() const { return impl_->plan; }

void Gemm::set_operands(TensorView a, TensorView b, GemmScales scales, TensorView c) {
  check_operands(impl_->problem, a, b, scales, c, impl_->device);
  auto& im = *impl_;
  fill_args(im.problem, im.plan, im.drop_wait, ArgsOut{im.args, im.gemv}, a, b, scales, c);
}

std::size_t Gemm::workspace_bytes() const { return 0; }

void Gemm::set_workspace(void* workspace, std::size_t bytes) {
  WEAVE_EXPECT_ARG(bytes == 0 || workspace != nullptr, "argument 'workspace': null with " << bytes << " bytes");
}

void Gemm::run(cudaStream_t stream) const {
  const auto& im = *impl_;
  if (im.plan.gemv) {
    detail::gemv_launch(im.gemv, im.num_sms, stream);
    return;
  }
  im.instance->launch(im.args, im.plan.grid, stream);
}

}  // namespace weave
