#include "comm/nccl_version.hpp"

#include <dlfcn.h>
#include "common/nccl_header_check.hpp"

#include "common/check.hpp"

namespace weave::comm {

std::string nccl_version_text(int code) {
  const bool old_format = code < 10000;  // before NCCL 2.9: 2800 + patch for 2.8.x
  const int major = old_format ? code / 1000 : code / 10000;
  const int minor = old_format ? (code % 1000) / 100 : (code % 10000) / 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

namespace {
// ".../nccl/lib/libnccl.so.2" -> ".../nccl": the folder NCCL_ROOT names (include/ and lib/ in it),
// as in the nvidia-nccl wheels and the CUDA toolkit; "" when the path has no such shape.
std::string root_of(const std::string& library_path) {
  const auto file = library_path.rfind('/');
  if (file == std::string::npos || file == 0) return "";
  const auto dir = library_path.rfind('/', file - 1);
  if (dir == std::string::npos) return "";
  const std::string leaf = library_path.substr(dir + 1, file - dir - 1);
  return leaf == "lib" || leaf == "lib64" ? library_path.substr(0, dir) : "";
}
}  // namespace

std::string nccl_version_problem(int built, int loaded, const std::string& loaded_from) {
  // Exact release, patch included: ncclDevComm's layout changed within one minor (2.28.3 -> 2.28.9).
  if (built == loaded) return "";
  const std::string b = nccl_version_text(built), l = nccl_version_text(loaded), root = root_of(loaded_from);
  return "weave was built against NCCL " + b + " but this process loaded NCCL " + l +
         (loaded_from.empty() ? "" : " (" + loaded_from + ")") +
         "; weave's kernels compile in NCCL's device-API structures, so both must be the same release. "
         "Rebuild weave against the loaded NCCL (" +
         (root.empty() ? "-DNCCL_ROOT=<folder with include/nccl.h and lib/libnccl.so.2>"
                       : "NCCL_ROOT=" + root + " pip install ., or -DNCCL_ROOT=" + root + " for CMake") +
         "), or load NCCL " + b + " instead (for PyTorch: a torch whose nvidia-nccl wheel is " + b + ")";
}

int loaded_nccl_version() {
  int v = 0;
  WEAVE_CHECK_NCCL(ncclGetVersion(&v));
  return v;
}

std::string loaded_nccl_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

void require_matching_nccl() {
  const std::string problem = nccl_version_problem(NCCL_VERSION_CODE, loaded_nccl_version(), loaded_nccl_path());
  WEAVE_EXPECT(problem.empty(), Status::kUnsupported, problem);
}

}  // namespace weave::comm
