#include "weave/error.hpp"

namespace weave {

const char* to_string(Status status) noexcept {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kUnsupported: return "unsupported";
    case Status::kUnavailable: return "unavailable";
    case Status::kNoDevice: return "no device";
    case Status::kCudaError: return "CUDA runtime error";
    case Status::kDriverError: return "CUDA driver error";
    case Status::kNcclError: return "NCCL error";
    case Status::kCublasError: return "cuBLAS error";
    case Status::kTimeout: return "timeout";
    case Status::kMismatch: return "configuration mismatch";
    case Status::kInternal: return "internal error";
  }
  return "unknown";
}

static std::string compose(Status status, const std::string& call, const std::string& location,
                           const std::string& message) {
  std::string text = std::string("weave: ") + to_string(status) + ": " + message;
  if (!call.empty()) text += " [in " + call + "]";
  if (!location.empty()) text += " (" + location + ")";
  return text;
}

Error::Error(Status status, std::string call, std::string location, std::string message)
    : std::runtime_error(compose(status, call, location, message)),
      status_(status),
      call_(std::move(call)),
      location_(std::move(location)),
      message_(std::move(message)) {}

}  // namespace weave
