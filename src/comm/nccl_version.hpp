// The NCCL weave was compiled against must be the NCCL this process loaded. The device API
// (ncclDevComm, windows, LSA barriers) is header-inline: its structures, and the code that reads
// them, are compiled into weave's kernels, while the library that fills them in is whichever
// libnccl.so.2 the process loaded (torch's, when torch came first). Nothing at load time checks
// that the two agree, so every Communicator factory does, before any GPU work.
#pragma once
#include <string>

namespace weave::comm {

// "2.28.9" from an NCCL version code (NCCL_VERSION_CODE, ncclGetVersion): major*10000 + minor*100
// + patch since NCCL 2.9, major*1000 + minor*100 + patch before.
std::string nccl_version_text(int code);

// The rule, as a pure function: "" when weave compiled against NCCL `built` may run with the
// loaded NCCL `loaded` (read from `loaded_from`, a file path, or "" when unknown); otherwise the
// refusal, naming both versions and how to make them match.
std::string nccl_version_problem(int built, int loaded, const std::string& loaded_from);

// ncclGetVersion() of the loaded NCCL (needs no GPU), and the file it was loaded from ("" when
// the dynamic linker cannot say).
int loaded_nccl_version();
std::string loaded_nccl_path();

// Throws Error(kUnsupported) with nccl_version_problem's message unless the loaded NCCL is the
// one weave was compiled against (NCCL_VERSION_CODE of the headers the kernels were built with).
void require_matching_nccl();

}  // namespace weave::comm
