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
#include "gemm/operands.hpp"
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

// The operand rules of weave/gemm.hpp; throws kInvalidArgument naming the argument.
static void check_operands(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                           const TensorView& c, int device) {
  gemm::check_gemm_inputs(p, a, b, s, device);
  expect_matrix(c, "C", MatrixRule{p.out_dtype, p.m, p.n, true, true, device});
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
    out.gemv = gemm::make_gemv_args(p, a, b, s, c.data, c.ld());
    return;
  }
  out.args.main = gemm::make_mainloop_args(p, plan, a, b, s, drop_wait);
  // With split-K the kernel stores fp32 partials into the workspace (set_workspace builds that
  // map); C is then written by the reduction only.
  if (plan.split_k <= 1) out.args.epi.tma_c = gemm::make_epilogue_map("C", c.data, p.out_dtype, 1, p.m, p.n, c.ld());
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
  if (im.plan.gemv) gemm::check_gemv_scales(problem, scales);
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
  if (im.plan.gemv) gemm::check_gemv_scales(im.problem, scales);
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
    im.split_epi.tma_c = gemm::make_epilogue_map("workspace", workspace, DType::kF32, im.plan.split_k, im.problem.m,
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
