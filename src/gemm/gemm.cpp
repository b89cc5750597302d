// weave::Gemm, the standalone op: validates operands, plans once, builds the TMA descriptors on
// the host, and enqueues one kernel per run() (two with split-K: the GEMM writing fp32 partials
// into the caller's workspace, then gemm::split_k_reduce). The mxfp8 bf16 route (GemmPlan::
// mx_dequant) enqueues: flag reset, gemm::mx_dequant_bf16 of A and B into the workspace, the bf16
// kernel (and its split-K reduction), then the native kernel guarded by the flag. Blockscale's
// MN-major copy of row-major A scales (GemmPlan::scale_a_mn_copy) enqueues gemm::scale_a_mn_copy
// into the workspace, then the MN-major kernel reading the copy.
//
// Workspace layout (offsets multiples of 1024, so every TMA base is aligned):
//   [0, 1024)            the route's "inexact" flag word (mx_dequant only)
//   A_bf16 [M, K]         mx_dequant only
//   B_bf16 [N, K]         mx_dequant only
//   scale_a [K/128, ld]   fp32, MN-major (ld = ref::mn_major_scale_ld(M)), scale_a_mn_copy only
//   partials [S, M, N]    fp32, split-K only
#include "weave/gemm.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/kernel_args.hpp"
#include "gemm/mx_dequant.hpp"
#include "gemm/operands.hpp"
#include "gemm/pdl_flags.hpp"
#include "gemm/planner.hpp"
#include "gemm/scale_a_mn_copy.hpp"
#include "gemm/split_k_reduce.hpp"
#include "gemv/gemv.hpp"
#include "hopper/tma_descriptor.hpp"
#include "hopper/wait_record.hpp"
#include "weave/quant.hpp"

namespace weave {

namespace {
constexpr std::size_t kWorkspaceAlign = 1024;
std::size_t align_up(std::size_t x) { return (x + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign; }

// Byte offsets of the workspace regions (layout at the top of this file).
struct WorkspaceLayout {
  std::size_t flag = 0, a_bf16 = 0, b_bf16 = 0, scale_a = 0, partials = 0, total = 0;
};
WorkspaceLayout workspace_layout(const GemmProblem& p, const GemmPlan& plan) {
  WorkspaceLayout w;
  std::size_t at = 0;
  if (plan.mx_dequant) {
    w.flag = 0;
    w.a_bf16 = kWorkspaceAlign;
    w.b_bf16 = align_up(w.a_bf16 + static_cast<std::size_t>(p.m) * static_cast<std::size_t>(p.k) * 2);
    at = align_up(w.b_bf16 + static_cast<std::size_t>(p.n) * static_cast<std::size_t>(p.k) * 2);
  }
  if (plan.scale_a_mn_copy) {
    w.scale_a = at;
    at = align_up(at + static_cast<std::size_t>(gemm::scale_a_mn_copy_bytes(p.m, p.k / 128)));
  }
  w.partials = at;
  if (!plan.gemv && plan.split_k > 1)
    at += static_cast<std::size_t>(plan.split_k) * static_cast<std::size_t>(p.m) * static_cast<std::size_t>(p.n) *
          sizeof(float);
  w.total = at;
  return w;
}
}  // namespace

// The operands of the MN-major copy route: what the copy reads and writes, and A, B and B's scales
// for the main-loop arguments, which can only be built once the copy's address (the workspace) is
// known.
struct ScaleCopyRoute {
  gemm::ScaleAMnCopy copy{};
  TensorView a, b, scale_b;
};

// The main-loop arguments of the route: the MN-major problem over the workspace's copy of A's
// scales (null until set_workspace: then the arguments are built there).
static void fill_scale_copy_main(const GemmProblem& p, const GemmPlan& plan, const gemm::MainloopDebug& debug,
                                 const ScaleCopyRoute& r, gemm::LocalKernelArgs& args) {
  if (r.copy.dst == nullptr) return;
  GemmProblem mn = p;
  mn.scale_layout = ScaleLayout::kMnMajor;
  const TensorView sa{.data = r.copy.dst,
                      .dtype = DType::kF32,
                      .rank = 2,
                      .shape = {p.m, p.k / 128},
                      .strides = {1, r.copy.dst_ld},
                      .device = r.a.device};
  args.main = gemm::make_mainloop_args(mn, plan, r.a, r.b, GemmScales{sa, r.scale_b}, debug);
}

// A persistent grid of clusters larger than the device holds at once runs its last clusters after
// the first ones have finished all their items (twice the time where half fit): the planner's
// grid (whole pairs up to the SM count, a pure function of num_sms) is cut to the CTAs resident.
static void cap_grid_at_resident(GemmPlan& plan, const gemm::GemmInstance& instance, int device) {
  int current = -1;
  WEAVE_CHECK_CUDA(cudaGetDevice(&current));
  if (current != device) WEAVE_CHECK_CUDA(cudaSetDevice(device));
  const int resident = instance.resident_ctas();
  if (current != device) WEAVE_CHECK_CUDA(cudaSetDevice(current));
  const int cap = resident - resident % plan.cluster;
  if (cap >= plan.cluster && plan.grid > cap) {
    plan.reason += "; grid cut to " + std::to_string(cap) + ": the CTAs of " + std::to_string(plan.cluster) +
                   "-CTA clusters this device holds at once";
    plan.grid = cap;
  }
}

struct Gemm::Impl {
  GemmProblem problem;
  GemmPlan plan;
  int device = -1;
  int num_sms = 0;
  const gemm::GemmInstance* instance = nullptr;  // null on the GEMV path
  gemm::LocalKernelArgs args{};
  detail::GemvArgs gemv{};
  int gemv_split = 0;      // the GEMV's K split forced (split_k beside decode_route = gemv); 0: the launch plans it
  bool allow_pdl = false;  // set_allow_pdl: the GEMV launched with programmatic stream serialization
  gemm::MainloopDebug debug;  // debug-only knobs (environment at construction)
  bool skip_mx_rerun = false;  // debug negative control (WEAVE_GEMM_DEBUG_SKIP_MX_RERUN)
  WorkspaceLayout ws_layout;   // what this plan needs where (fixed at construction)
  void* workspace = nullptr;  // the caller's (set_workspace; layout at the top of this file)
  std::size_t workspace_size = 0;
  gemm::StoreLocalParams split_epi{};  // the epilogue over the workspace planes (split-K only)
  void* c = nullptr;                   // C and its leading dimension (the split-K reduction's output)
  int64_t ldc = 0;
  // mxfp8 bf16 route (plan.mx_dequant): the conversion's operands (their dst set by
  // set_workspace), and the guarded native rerun.
  gemm::MxDequantOperand dq_a{}, dq_b{};
  GemmPlan native_plan;
  const gemm::GemmInstance* native_instance = nullptr;
  gemm::LocalKernelArgs native_args{};
  // Blockscale's MN-major copy of A's scales (plan.scale_a_mn_copy): the copy (its dst set by
  // set_workspace) and the operands the main loop reads beside it.
  ScaleCopyRoute sa_route{};
};

namespace {
const gemm::GemmInstance* instance_named(const std::string& name) {
  for (const auto& i : gemm::gemm_instances())
    if (name == i.name) return &i;
  WEAVE_EXPECT(false, Status::kInternal, "planned kernel " << name << " is not registered");
  return nullptr;
}

// Raises the instance's shared-memory limit on `device` (host call, once per construction).
void prepare_on(const gemm::GemmInstance& instance, int device) {
  int current = -1;
  WEAVE_CHECK_CUDA(cudaGetDevice(&current));
  if (current != device) WEAVE_CHECK_CUDA(cudaSetDevice(device));
  try {
    instance.prepare();
  } catch (...) {
    if (current != device) cudaSetDevice(current);
    throw;
  }
  if (current != device) WEAVE_CHECK_CUDA(cudaSetDevice(current));
}

}  // namespace

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
  // mxfp8 bf16 route only:
  gemm::MxDequantOperand& dq_a;
  gemm::MxDequantOperand& dq_b;
  gemm::LocalKernelArgs& native_args;
  const GemmPlan& native_plan;
  // The instances the plans name (resolved once at construction): their TMA-store box widths
  // (GemmKernelEntry::epi_box_bytes) shape the output maps. Null on the GEMV path / off the route.
  const gemm::GemmInstance* instance;
  const gemm::GemmInstance* native_instance;
  // blockscale MN-major copy route only:
  ScaleCopyRoute& sa_route;
};

static void fill_args(const GemmProblem& p, const GemmPlan& plan, const gemm::MainloopDebug& debug, ArgsOut out, const TensorView& a,
                      const TensorView& b, const GemmScales& s, const TensorView& c) {
  out.c = c.data;
  out.ldc = c.ld();
  if (plan.gemv) {
    out.gemv = gemm::make_gemv_args(p, a, b, s, c.data, c.ld());
    return;
  }
  if (plan.mx_dequant) {
    // The bf16 kernel's main loop reads the workspace copies (set_workspace builds it); the
    // conversion and the guarded native rerun read the caller's operands. What set_workspace
    // filled in (the copies' addresses, the flag) survives re-pointed operands.
    void* const a_copy = out.dq_a.dst;
    void* const b_copy = out.dq_b.dst;
    const uint32_t* const flag = out.native_args.main.run_if_flag;
    out.dq_a = gemm::mx_dequant_operand(a, s.a, 1, a_copy);
    out.dq_b = gemm::mx_dequant_operand(b, s.b, 32, b_copy);
    out.native_args.main = gemm::make_mainloop_args(p, out.native_plan, a, b, s, debug);
    out.native_args.main.run_if_flag = flag;
    out.native_args.epi.tma_c =
        gemm::make_epilogue_map("C", c.data, p.out_dtype, 1, p.m, p.n, c.ld(), out.native_instance->epi_box_bytes);
  } else if (plan.scale_a_mn_copy) {
    // The copy reads the caller's row-major scales; the kernel reads A, B, B's scales and the copy.
    // What set_workspace filled in (the copy's address) survives re-pointed operands.
    ScaleCopyRoute& r = out.sa_route;
    const int64_t kb = p.k / 128;
    r.copy.src = static_cast<const float*>(s.a.data);
    r.copy.src_ld = p.m > 1 ? s.a.ld() : kb;  // a one-row tensor's row stride is never used
    r.copy.m = p.m;
    r.copy.k_blocks = kb;
    r.copy.dst_ld = ref::mn_major_scale_ld(p.m);
    r.a = a;
    r.b = b;
    r.scale_b = s.b;
    fill_scale_copy_main(p, plan, debug, r, out.args);
  } else {
    out.args.main = gemm::make_mainloop_args(p, plan, a, b, s, debug);
  }
  if (plan.cluster == 2) out.args.tma_b_half = gemm::make_multicast_b_map(p, plan, b);  // the caller's B, either route
  // With split-K the kernel stores fp32 partials into the workspace (set_workspace builds that
  // map); C is then written by the reduction only.
  if (plan.split_k <= 1)
    out.args.epi.tma_c = gemm::make_epilogue_map("C", c.data, p.out_dtype, 1, p.m, p.n, c.ld(), out.instance->epi_box_bytes);
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
  if (im.plan.gemv && overrides.decode_route == DecodeRoute::kGemv) im.gemv_split = overrides.split_k;
  im.ws_layout = workspace_layout(problem, im.plan);
  if (im.plan.gemv) gemm::check_gemv_scales(problem, scales);
  im.debug = gemm::MainloopDebug::from_env();
  if (!im.plan.gemv) {
    im.instance = instance_named(im.plan.kernel);
    prepare_on(*im.instance, im.device);
    if (im.plan.cluster > 1 && overrides.grid == 0) cap_grid_at_resident(im.plan, *im.instance, im.device);
  }
  if (im.plan.mx_dequant) {
    im.skip_mx_rerun = env::get_bool("WEAVE_GEMM_DEBUG_SKIP_MX_RERUN", false);
    if (im.skip_mx_rerun)
      WEAVE_LOG(kWarn, "WEAVE_GEMM_DEBUG_SKIP_MX_RERUN=1: the mxfp8 bf16 route never reruns on the native kernel "
                       "(negative control; scales outside [10, 246] then give wrong results)");
    GemmPlanOverrides native;
    native.mx_route = MxRoute::kNative;
    native.split_k = 1;
    native.group_rows = overrides.group_rows;
    im.native_plan = gemm_plan(problem, im.num_sms, native);
    WEAVE_EXPECT(im.native_plan.kernel == im.plan.fallback_kernel, Status::kInternal,
                 "mxfp8 fallback plan " << im.native_plan.kernel << " differs from " << im.plan.fallback_kernel);
    im.native_instance = instance_named(im.native_plan.kernel);
    prepare_on(*im.native_instance, im.device);
  }
  fill_args(problem, im.plan, im.debug,
            ArgsOut{im.args, im.gemv, im.c, im.ldc, im.dq_a, im.dq_b, im.native_args, im.native_plan, im.instance,
                    im.native_instance, im.sa_route}, a, b, scales, c);
}

Gemm::~Gemm() = default;
Gemm::Gemm(Gemm&&) noexcept = default;
Gemm& Gemm::operator=(Gemm&&) noexcept = default;

const GemmPlan& Gemm::plan() const { return impl_->plan; }

void Gemm::set_operands(TensorView a, TensorView b, GemmScales scales, TensorView c) {
  check_operands(impl_->problem, a, b, scales, c, impl_->device);
  auto& im = *impl_;
  if (im.plan.gemv) gemm::check_gemv_scales(im.problem, scales);
  fill_args(im.problem, im.plan, im.debug,
            ArgsOut{im.args, im.gemv, im.c, im.ldc, im.dq_a, im.dq_b, im.native_args, im.native_plan, im.instance,
                    im.native_instance, im.sa_route}, a, b, scales, c);
}

std::size_t gemm_workspace_bytes(const GemmProblem& problem, const GemmPlan& plan) {
  return workspace_layout(problem, plan).total;
}

std::size_t Gemm::workspace_bytes() const { return impl_->ws_layout.total; }

void Gemm::set_workspace(void* workspace, std::size_t bytes) {
  auto& im = *impl_;
  WEAVE_EXPECT_ARG(bytes == 0 || workspace != nullptr, "argument 'workspace': null with " << bytes << " bytes");
  const WorkspaceLayout& lay = im.ws_layout;
  const std::size_t need = lay.total;
  if (need > 0) {
    WEAVE_EXPECT_ARG(workspace != nullptr && bytes >= need,
                     "argument 'bytes': the plan (" << workspace_purpose() << ") needs a workspace of " << need
                                                    << " bytes (got " << bytes << ")");
    WEAVE_EXPECT_ARG(reinterpret_cast<uintptr_t>(workspace) % 16 == 0,
                     "argument 'workspace': must be 16-byte aligned (TMA bases and float4 partials)");
    cudaPointerAttributes attr{};
    WEAVE_CHECK_CUDA(cudaPointerGetAttributes(&attr, workspace));
    WEAVE_EXPECT_ARG(attr.type == cudaMemoryTypeDevice && attr.device == im.device,
                     "argument 'workspace': must be device memory on cuda:" << im.device);
  }
  im.workspace = workspace;
  im.workspace_size = bytes;
  if (need == 0) return;
  auto* base = static_cast<uint8_t*>(workspace);
  if (!im.plan.gemv && im.plan.split_k > 1) {
    im.split_epi.tma_c = gemm::make_epilogue_map("workspace", base + lay.partials, DType::kF32, im.plan.split_k,
                                                 im.problem.m, im.problem.n, im.problem.n,
                                                 im.instance->epi_box_bytes);
  }
  if (im.plan.mx_dequant) {
    const auto& p = im.problem;
    im.dq_a.dst = base + lay.a_bf16;
    im.dq_b.dst = base + lay.b_bf16;
    GemmProblem bf = p;
    bf.mode = ScaleMode::kBF16;
    bf.scale_layout = ScaleLayout::kRaw;
    const TensorView a = TensorView::matrix(base + lay.a_bf16, DType::kBF16, p.m, p.k, im.device);
    const TensorView b = TensorView::matrix(base + lay.b_bf16, DType::kBF16, p.n, p.k, im.device);
    im.args.main = gemm::make_mainloop_args(bf, im.plan, a, b, GemmScales{}, im.debug);
    im.native_args.main.run_if_flag = reinterpret_cast<const uint32_t*>(base + lay.flag);
  }
  if (im.plan.scale_a_mn_copy) {
    im.sa_route.copy.dst = reinterpret_cast<float*>(base + lay.scale_a);
    fill_scale_copy_main(im.problem, im.plan, im.debug, im.sa_route, im.args);
  }
}

void Gemm::set_allow_pdl(bool allow) noexcept { impl_->allow_pdl = allow; }
bool Gemm::allow_pdl() const noexcept { return impl_->allow_pdl; }

std::string Gemm::workspace_purpose() const {
  const auto& im = *impl_;
  std::string out;
  if (im.plan.mx_dequant) out = "the mxfp8 bf16 route: bf16 copies of A and B and a flag word";
  if (im.plan.scale_a_mn_copy) out = "blockscale: an MN-major copy of A's scales";
  if (!im.plan.gemv && im.plan.split_k > 1)
    out += std::string(out.empty() ? "" : "; ") + "split-K " + std::to_string(im.plan.split_k) + ": fp32 partials";
  return out;
}

void Gemm::check() const {
  const std::string report = hopper::take_wait_timeout_report();
  WEAVE_EXPECT(report.empty(), Status::kTimeout,
               report << " (an earlier GEMM call aborted; its output is incomplete. A pipeline wait that "
                         "times out is a protocol bug: please report it with this line)");
}

void Gemm::run(cudaStream_t stream) const {
  check();
  const auto& im = *impl_;
  if (im.plan.gemv) {
    detail::GemvArgs args = im.gemv;
    args.pdl = im.allow_pdl;
    args.split = im.gemv_split;
    detail::gemv_launch(args, im.num_sms, stream);
    return;
  }
  const bool needs_workspace = im.plan.split_k > 1 || im.plan.mx_dequant || im.plan.scale_a_mn_copy;
  WEAVE_EXPECT(!needs_workspace || (im.workspace != nullptr && im.workspace_size >= im.ws_layout.total),
               Status::kInvalidArgument,
               "Gemm::run: the plan (" << workspace_purpose() << ") needs a device workspace of " << workspace_bytes()
                                       << " bytes; call Gemm::set_workspace(ptr, bytes) with bytes >= "
                                          "workspace_bytes() before run()");
  // PDL (the caller's opt-in): the kernel requests B before it waits for the kernel before it.
  // Not on the mxfp8 bf16 route, whose B is the conversion's copy written right before. The flags
  // are read before anything is enqueued (a bad WEAVE_GEMM_PDL raises here).
  const bool pdl = im.allow_pdl && !im.plan.mx_dequant && im.instance->launch_pdl != nullptr;
  const uint32_t pdl_flags = pdl ? gemm::pdl_flags_for_launch() : 0;
  auto launch = [&](gemm::LocalKernelArgs args) {
    if (!pdl) return im.instance->launch(args, im.plan.grid, stream);
    args.main.pdl_flags = pdl_flags;
    im.instance->launch_pdl(args, im.plan.grid, stream);
  };
  if (im.plan.mx_dequant) {
    // Flag first: the conversion only ever sets it, and the guarded native launch reads it.
    auto* flag = static_cast<uint32_t*>(im.workspace);
    WEAVE_CHECK_CUDA(cudaMemsetAsync(flag, 0, sizeof(uint32_t), stream));
    gemm::mx_dequant_bf16(im.dq_a, im.dq_b, im.problem.k, im.problem.scale_layout, flag, im.num_sms, stream);
  }
  if (im.plan.scale_a_mn_copy) gemm::scale_a_mn_copy(im.sa_route.copy, stream);
  if (im.plan.split_k <= 1) {
    launch(im.args);
  } else {
    // split-K: the fp32-output kernel writes partial s into rows [s * M, s * M + M) of the
    // workspace's partials, then the reduction sums them in split order into C.
    gemm::LocalKernelArgs args = im.args;
    args.epi = im.split_epi;
    launch(args);
    gemm::split_k_reduce(reinterpret_cast<const float*>(static_cast<const uint8_t*>(im.workspace) + im.ws_layout.partials),
                         im.problem.m, im.problem.n, im.plan.split_k, im.c, im.ldc, im.problem.out_dtype, im.num_sms,
                         gemm::split_reduce_pdl(im.problem.mode), stream);
  }
  // Last, so that when it runs it overwrites all of C: returns at once unless the conversion
  // met a scale it could not carry exactly.
  if (im.plan.mx_dequant && !im.skip_mx_rerun) im.native_instance->launch(im.native_args, im.native_plan.grid, stream);
}

}  // namespace weave
