// Internal check macros. Each turns a failing status into a weave::Error naming the call and
// the source line. WEAVE_CHECK_LAUNCH() goes after every kernel launch.
#pragma once
#include <cublasLt.h>
#include <cuda.h>  // types only: CUresult. libcuda is reached through driver_api.hpp.
#include <cuda_runtime.h>
#include "common/nccl_header_check.hpp"  // nccl.h, the release CMake found

#include <sstream>
#include <string>

#include "weave/error.hpp"

#define WEAVE_STRINGIFY_(x) #x
#define WEAVE_STRINGIFY(x) WEAVE_STRINGIFY_(x)
#define WEAVE_LOCATION (std::string(__FILE__) + ":" + WEAVE_STRINGIFY(__LINE__))

namespace weave::detail {
[[noreturn]] void throw_cuda(cudaError_t err, const char* call, std::string location);
[[noreturn]] void throw_cu(CUresult err, const char* call, std::string location);
[[noreturn]] void throw_nccl(ncclResult_t err, const char* call, std::string location);
[[noreturn]] void throw_cublas(cublasStatus_t err, const char* call, std::string location);
}  // namespace weave::detail

#define WEAVE_CHECK_CUDA(expr)                                                          \
  do {                                                                                  \
    cudaError_t weave_err_ = (expr);                                                    \
    if (weave_err_ != cudaSuccess) ::weave::detail::throw_cuda(weave_err_, #expr, WEAVE_LOCATION); \
  } while (0)

#define WEAVE_CHECK_CU(expr)                                                            \
  do {                                                                                  \
    CUresult weave_err_ = (expr);                                                       \
    if (weave_err_ != CUDA_SUCCESS) ::weave::detail::throw_cu(weave_err_, #expr, WEAVE_LOCATION); \
  } while (0)

#define WEAVE_CHECK_NCCL(expr)                                                          \
  do {                                                                                  \
    ncclResult_t weave_err_ = (expr);                                                   \
    if (weave_err_ != ncclSuccess && weave_err_ != ncclInProgress)                      \
      ::weave::detail::throw_nccl(weave_err_, #expr, WEAVE_LOCATION);                   \
  } while (0)

#define WEAVE_CHECK_CUBLAS(expr)                                                        \
  do {                                                                                  \
    cublasStatus_t weave_err_ = (expr);                                                 \
    if (weave_err_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::weave::detail::throw_cublas(weave_err_, #expr, WEAVE_LOCATION);                 \
  } while (0)

// After every kernel launch: catches bad launch configurations at once (not at the next sync).
#define WEAVE_CHECK_LAUNCH() WEAVE_CHECK_CUDA(cudaPeekAtLastError())

// WEAVE_EXPECT(cond, Status::kInvalidArgument, "argument 'm': must be >= 1, got " << m)
#define WEAVE_EXPECT(cond, status, msg)                                                 \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::ostringstream weave_os_;                                                     \
      weave_os_ << msg;                                                                 \
      throw ::weave::Error((status), "", WEAVE_LOCATION, weave_os_.str());              \
    }                                                                                   \
  } while (0)

#define WEAVE_EXPECT_ARG(cond, msg) WEAVE_EXPECT(cond, ::weave::Status::kInvalidArgument, msg)

namespace weave {
// Runs `body` and returns what it returns; a weave::Error escaping it is re-thrown with `what`
// in front of its message ("create_sharing_window: all_reduces[1]: ..."), so an error raised deep
// inside says which op, list entry or operation it belongs to.
template <class F>
auto with_context(const std::string& what, F&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error& e) {
    throw Error(e.status(), e.call(), e.location(), what + ": " + e.message());
  }
}
}  // namespace weave
