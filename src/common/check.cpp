#include "common/check.hpp"

#include "common/driver_api.hpp"

namespace weave::detail {

void throw_cuda(cudaError_t err, const char* call, std::string location) {
  Status status = (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
                      ? Status::kNoDevice
                      : Status::kCudaError;
  throw Error(status, call, std::move(location),
              std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err));
}

void throw_cu(CUresult err, const char* call, std::string location) {
  throw Error(Status::kDriverError, call, std::move(location), driver_error_string(err));
}

void throw_nccl(ncclResult_t err, const char* call, std::string location) {
  std::string text = std::string("ncclResult ") + std::to_string(static_cast<int>(err)) + ": " +
                     ncclGetErrorString(err);
  throw Error(Status::kNcclError, call, std::move(location), text);
}

void throw_cublas(cublasStatus_t err, const char* call, std::string location) {
  throw Error(Status::kCublasError, call, std::move(location),
              std::string("cublasStatus ") + std::to_string(static_cast<int>(err)));
}

}  // namespace weave::detail
