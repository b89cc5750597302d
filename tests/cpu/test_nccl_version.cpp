// The rule that weave runs only with the NCCL release it was compiled against (comm/nccl_version),
// and that the loaded version is readable without a GPU, which lets the refusal come first.
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>

#include "comm/nccl_version.hpp"
#include "weave/communicator.hpp"
#include "weave/device.hpp"
#include "weave/error.hpp"

using namespace weave;

namespace {
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST(NcclVersion, TextDecodesBothCodeFormats) {
  EXPECT_EQ(comm::nccl_version_text(22809), "2.28.9");
  EXPECT_EQ(comm::nccl_version_text(23007), "2.30.7");
  EXPECT_EQ(comm::nccl_version_text(30100), "3.1.0");
  EXPECT_EQ(comm::nccl_version_text(2804), "2.8.4");  // before 2.9: major*1000 + minor*100 + patch
}

TEST(NcclVersion, OnlyTheSameReleaseIsAccepted) {
  EXPECT_EQ(comm::nccl_version_problem(22809, 22809, "/x/lib/libnccl.so.2"), "");
  EXPECT_EQ(comm::nccl_version_problem(23007, 23007, ""), "");
  // Another patch of the same minor is refused too: the device-API structs changed within 2.28.
  for (int loaded : {22807, 22803, 22900, 23007, 32809, 2804})
    EXPECT_NE(comm::nccl_version_problem(22809, loaded, ""), "") << loaded;
}

TEST(NcclVersion, RefusalNamesBothVersionsTheLibraryAndTheRebuild) {
  const std::string wheel = "/venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2";
  const std::string why = comm::nccl_version_problem(22809, 23007, wheel);
  EXPECT_TRUE(contains(why, "built against NCCL 2.28.9")) << why;
  EXPECT_TRUE(contains(why, "loaded NCCL 2.30.7 (" + wheel + ")")) << why;
  EXPECT_TRUE(contains(why, "NCCL_ROOT=/venv/lib/python3.12/site-packages/nvidia/nccl pip install .")) << why;
  EXPECT_TRUE(contains(why, "or load NCCL 2.28.9 instead")) << why;

  const std::string toolkit = comm::nccl_version_problem(22809, 22807, "/usr/local/cuda/lib64/libnccl.so.2");
  EXPECT_TRUE(contains(toolkit, "-DNCCL_ROOT=/usr/local/cuda ")) << toolkit;
  // A path without a lib/ folder (or none at all) gives the generic instruction, not a wrong root.
  for (const std::string& odd : {std::string("libnccl.so.2"), std::string("/opt/libnccl.so.2"), std::string()})
    EXPECT_TRUE(contains(comm::nccl_version_problem(22809, 22807, odd), "-DNCCL_ROOT=<folder with include/nccl.h"))
        << odd;
}

TEST(NcclVersion, LoadedVersionAndPathAreReadWithoutAGpu) {
  // This binary links the NCCL it was compiled against, so the check passes here and the query
  // (ncclGetVersion, dladdr) works on a machine without a driver.
  EXPECT_EQ(comm::loaded_nccl_version(), NCCL_VERSION_CODE);
  EXPECT_TRUE(contains(comm::loaded_nccl_path(), "libnccl")) << comm::loaded_nccl_path();
  EXPECT_NO_THROW(comm::require_matching_nccl());
  EXPECT_EQ(comm::nccl_version_text(NCCL_VERSION_CODE), WEAVE_NCCL_BUILD_VERSION);
}

TEST(NcclVersion, CreateLocalWithoutAGpuSaysWhy) {
  if (no_gpu_reason().empty()) GTEST_SKIP() << "a Hopper GPU is visible; this checks the no-GPU path";
  try {
    Communicator::create_local({0});
    FAIL() << "create_local succeeded without a Hopper GPU";
  } catch (const Error& e) {
    // Not NCCL's "unhandled cuda error" (kNcclError) from ncclCommInitAll: the reason itself.
    EXPECT_EQ(e.status(), Status::kNoDevice) << e.what();
    if (list_devices().empty()) EXPECT_EQ(e.message(), no_gpu_reason());
  }
}
