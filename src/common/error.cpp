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

// WEAVE_LOCATION is __FILE__, the path the compiler was given: absolute in a plain CMake build
// (the build machine's folders, meaningless to whoever reads the error), relative (../src/...)
// under ccache's base_dir. Either way only the part from the project root on is kept
// ("src/comm/plan.cpp:123"); the root is what precedes this file's own path.
static std::string relative_location(std::string location) {
  static const std::string root = [] {
    const std::string self = __FILE__;
    const std::string tail = "src/common/error.cpp";
    if (self.size() < tail.size() || self.compare(self.size() - tail.size(), tail.size(), tail) != 0) return std::string();
    return self.substr(0, self.size() - tail.size());
  }();
  if (!root.empty() && location.compare(0, root.size(), root) == 0) location.erase(0, root.size());
  return location;
}

static std::string compose(Status status, const std::string& call, const std::string& location,
                           const std::string& message) {
  std::string text = std::string("weave: ") + to_string(status) + ": " + message;
  if (!call.empty()) text += " [in " + call + "]";
  if (!location.empty()) text += " (" + location + ")";
  return text;
}

Error::Error(Status status, std::string call, std::string location, std::string message)
    : std::runtime_error(compose(status, call, relative_location(location), message)),
      status_(status),
      call_(std::move(call)),
      location_(relative_location(std::move(location))),
      message_(std::move(message)) {}

}  // namespace weave
