// mxfp8 in the fused operators: weave::Gemm's bf16 route as an either/or (docs/fused.md "mxfp8 in
// the fused operators"). Per call, on every rank: flag = 0; convert A and B exactly to bf16 (the
// conversion sets the flag where a scale byte outside [10, 246] scales a non-zero element); then
// the op enqueues BOTH its kernels, the bf16 one guarded to run only if the flag is 0 and the
// native mxfp8 one only if it is not. Exactly one runs, and it runs before any tile leaves the
// rank, so no second pass can ever store over what a peer has counted (why weave::Gemm's
// rerun-after cannot be copied here). A skipped kernel returns before its call protocol begins,
// so only the running one advances the op's epochs. Ranks need not agree: the protocols do not
// depend on how a rank computed its tiles. Not for the fused-ce mode of either op (its copy streams
// fork from the kernel's start, and the skipped first kernel would start first: docs/fused.md).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gemm/dispatch.hpp"
#include "gemm/kernel_args.hpp"
#include "gemm/mx_dequant.hpp"
#include "weave/gemm.hpp"
#include "weave/tensor.hpp"

namespace weave::fused {

// Whether an mxfp8 call of problem `p` takes the bf16 route under `setting` (auto: the planner's
// model, gemm::mx_route_model). False for every other quant.
bool mx_bf16_route_wanted(MxRoute setting, const GemmProblem& p, int num_sms);

class MxBf16Route {
 public:
  // Device buffers for bf16 copies of A (m_max x k) and B (n x k) and the flag word, on the
  // current device (allocated here, at the op's construction; never in run()).
  MxBf16Route(int64_t m_max, int64_t n, int64_t k);
  ~MxBf16Route();
  MxBf16Route(const MxBf16Route&) = delete;
  MxBf16Route& operator=(const MxBf16Route&) = delete;
  std::size_t bytes() const noexcept { return bytes_; }

  // Enqueues flag = 0 and the conversion of the call's mxfp8 operands; guards `native` to run only
  // if the conversion was inexact; returns the bf16 kernel's main-loop arguments (the same tile and
  // grid, `bf16_plan`), guarded to run only if it was exact. The caller launches the bf16 kernel,
  // then the native one, on `stream`. `unguarded` (testing): neither is guarded, both run.
  gemm::MainloopArgs prepare(const GemmProblem& p, const GemmPlan& bf16_plan, const TensorView& a, const TensorView& b,
                             const GemmScales& s, gemm::MainloopArgs& native, int num_sms, bool unguarded,
                             cudaStream_t stream);

 private:
  char* mem_ = nullptr;
  std::size_t bytes_ = 0, a_off_ = 0, b_off_ = 0;
  int64_t m_max_ = 0, n_ = 0, k_ = 0;
};

}  // namespace weave::fused

namespace weave::fused {

// At an op's construction (mxfp8, setting not native): with its bf16 kernels built
// (`kernels_built`; `prepare_kernels` raises their shared-memory limits), the route's buffers;
// without them null (auto: logged, every call native; bf16: Error(kUnavailable) naming `config`).
std::unique_ptr<MxBf16Route> make_mx_route(const char* config, MxRoute setting, const std::string& who,
                                           bool kernels_built, const std::function<void()>& prepare_kernels,
                                           int64_t m_max, int64_t n, int64_t k);

// One call's operands, for launch_either.
struct MxRouteCall {
  GemmProblem problem;  // the mxfp8 problem
  GemmPlan bf16_plan;   // the bf16 kernel's plan (same tile and grid as the native one)
  TensorView a, b;
  GemmScales scales;
  int num_sms = 0;
  bool unguarded = false;  // testing: both kernels run
};

// A call's operands, with the bf16 kernel's plan of the op's fixed tile and grid.
MxRouteCall mx_route_call(const GemmProblem& p, const TensorView& a, const TensorView& b, const GemmScales& s,
                          int num_sms, int block_m, int block_n, int grid, bool unguarded);

// Enqueues an op's GEMM kernel: `native` with `args`; with `route`, first the conversion and the
// bf16 kernel `bf16` (same Params), the two guarded either/or (MxBf16Route::prepare).
template <class Params>
void launch_either(const gemm::GemmKernelEntry<Params>& native, const gemm::GemmKernelEntry<Params>* bf16,
                   gemm::KernelArgs<Params> args, int grid, MxBf16Route* route, const MxRouteCall& call,
                   cudaStream_t stream) {
  if (route != nullptr) {
    gemm::KernelArgs<Params> converted = args;
    converted.main = route->prepare(call.problem, call.bf16_plan, call.a, call.b, call.scales, args.main, call.num_sms,
                                    call.unguarded, stream);
    bf16->launch(converted, grid, stream);
  }
  native.launch(args, grid, stream);
}

}  // namespace weave::fused
