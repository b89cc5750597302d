// weave error model: every failure is a weave::Error carrying a status, the failing call, the
// source location and a message that names the argument and the rule it broke. Library code
// never calls exit() or abort(); callers decide. Thread-safe to construct and copy.
#pragma once
#include <stdexcept>
#include <string>

#include "weave/export.hpp"

namespace weave WEAVE_API {

enum class Status {
  kOk = 0,
  kInvalidArgument,  // a caller's input broke a documented rule
  kUnsupported,      // valid input this build / device / configuration cannot run
  kUnavailable,      // a requested resource (transport, GPU, peer) is missing; message says why
  kNoDevice,         // no CUDA device visible, or not a Hopper one
  kCudaError,        // CUDA runtime API
  kDriverError,      // CUDA driver API
  kNcclError,
  kCublasError,
  kTimeout,          // a bounded wait on a flag or a peer ran out
  kMismatch,         // ranks disagree on configuration
  kInternal,
};

const char* to_string(Status status) noexcept;

class Error : public std::runtime_error {
 public:
  Error(Status status, std::string call, std::string location, std::string message);

  Status status() const noexcept { return status_; }
  const std::string& call() const noexcept { return call_; }          // e.g. "cudaMalloc(&p, n)"
  const std::string& location() const noexcept { return location_; }  // "file.cpp:123"
  const std::string& message() const noexcept { return message_; }

 private:
  Status status_;
  std::string call_;
  std::string location_;
  std::string message_;
};

}  // namespace weave
