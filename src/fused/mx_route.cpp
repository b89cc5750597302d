#include "fused/mx_route.hpp"

#include <cuda_runtime.h>

#include "common/check.hpp"
#include "common/log.hpp"
#include "gemm/operands.hpp"
#include "gemm/planner.hpp"

namespace weave::fused {

bool mx_bf16_route_wanted(MxRoute setting, const GemmProblem& p, int num_sms) {
  if (p.mode != ScaleMode::kMxfp8 || setting == MxRoute::kNative) return false;
  if (setting == MxRoute::kBf16) return true;
  const gemm::MxRouteModel r = gemm::mx_route_model(p, num_sms);
  return r.bf16_us < r.native_us;
}

std::unique_ptr<MxBf16Route> make_mx_route(const char* config, MxRoute setting, const std::string& who,
                                           bool kernels_built, const std::function<void()>& prepare_kernels,
                                           int64_t m_max, int64_t n, int64_t k) {
  WEAVE_EXPECT(kernels_built || setting == MxRoute::kAuto, Status::kUnavailable,
               config << ".mx_route = bf16: this build has no bf16 128x128 kernels for the route");
  if (!kernels_built) {
    WEAVE_LOG(kInfo, who << " mxfp8: no bf16 kernels for the route in this build; every call runs the native kernel");
    return nullptr;
  }
  prepare_kernels();
  return std::make_unique<MxBf16Route>(m_max, n, k);
}

MxRouteCall mx_route_call(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                          int num_sms, int block_m, int block_n, int grid, bool unguarded) {
  GemmProblem bf = p;
  bf.mode = ScaleMode::kBF16;
  bf.scale_layout = ScaleLayout::kRaw;
  return MxRouteCall{.problem = p,
                     .bf16_plan = gemm::fixed_tile_plan(bf, num_sms, block_m, block_n, grid),
                     .a = a,
                     .b = b,
                     .scales = s,
                     .num_sms = num_sms,
                     .unguarded = unguarded};
}

namespace {
std::size_t align_up(std::size_t x) { return (x + 255) / 256 * 256; }
}  // namespace

MxBf16Route::MxBf16Route(int64_t m_max, int64_t n, int64_t k) : m_max_(m_max), n_(n), k_(k) {
  a_off_ = 256;  // the flag word first
  b_off_ = align_up(a_off_ + static_cast<std::size_t>(m_max) * static_cast<std::size_t>(k) * 2);
  bytes_ = align_up(b_off_ + static_cast<std::size_t>(n) * static_cast<std::size_t>(k) * 2);
  WEAVE_CHECK_CUDA(cudaMalloc(&mem_, bytes_));
}

MxBf16Route::~MxBf16Route() { cudaFree(mem_); }

gemm::MainloopArgs MxBf16Route::prepare(const GemmProblem& p, const GemmPlan& bf16_plan, const TensorView& a,
                                        const TensorView& b, const GemmScales& s, gemm::MainloopArgs& native,
                                        int num_sms, bool unguarded, cudaStream_t stream) {
  WEAVE_EXPECT(p.mode == ScaleMode::kMxfp8 && p.m <= m_max_ && p.n == n_ && p.k == k_, Status::kInternal,
               "MxBf16Route::prepare: the problem is not the one the route was sized for");
  auto* flag = reinterpret_cast<uint32_t*>(mem_);
  WEAVE_CHECK_CUDA(cudaMemsetAsync(flag, 0, sizeof(uint32_t), stream));
  const gemm::MxDequantOperand da = gemm::mx_dequant_operand(a, s.a, 1, mem_ + a_off_);
  const gemm::MxDequantOperand db = gemm::mx_dequant_operand(b, s.b, 32, mem_ + b_off_);
  gemm::mx_dequant_bf16(da, db, p.k, p.scale_layout, flag, num_sms, stream);
  GemmProblem bf = p;
  bf.mode = ScaleMode::kBF16;
  bf.scale_layout = ScaleLayout::kRaw;
  const int dev = a.device;
  gemm::MainloopArgs route = gemm::make_mainloop_args(bf, bf16_plan, TensorView::matrix(mem_ + a_off_, DType::kBF16, p.m, p.k, dev),
                                                      TensorView::matrix(mem_ + b_off_, DType::kBF16, p.n, p.k, dev),
                                                      GemmScales{});
  route.pipeline_timeout_ns = native.pipeline_timeout_ns;
  route.timeout_record = native.timeout_record;
  if (!unguarded) {
    route.run_if_flag = flag;
    route.run_if_flag_clear = 1;
    native.run_if_flag = flag;
    native.run_if_flag_clear = 0;
  }
  return route;
}

}  // namespace weave::fused
