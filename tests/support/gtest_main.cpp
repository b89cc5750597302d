// main() of every test binary: GoogleTest's, plus the skip contract CTest relies on.
//
// A run in which every selected test skipped (GTEST_SKIP: no GPU, too few GPUs) exits with
// kSkipExitCode, which tests/CMakeLists.txt registers as SKIP_RETURN_CODE, so CTest reports it as
// Skipped, never as passed. A failure, a crash (even after the summary, in static destructors) or
// a run with anything but skips keeps its own status: a failing test cannot read as skipped, as it
// could with a SKIP_REGULAR_EXPRESSION on GoogleTest's "[  SKIPPED ]" text (a matching regex wins
// over the exit status). Every skipped test also prints one line,
//   weave-test: skipped: <Suite.Name>: <reason>
// and appends it to the file named by WEAVE_TEST_SKIP_LOG (CTest sets it), from which CTest's
// post-test step (tests/skip_summary.cmake) prints the reasons after its summary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr int kSkipExitCode = 77;  // the automake convention for "skipped"

class SkipReasonPrinter : public testing::EmptyTestEventListener {
 public:
  void OnTestStart(const testing::TestInfo&) override { reason_.clear(); }
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.skipped()) return;
    std::string msg = r.message();
    for (char& c : msg) {  // one line, and no CMake list characters (the summary reads it as a list)
      if (c == '\n') c = ' ';
      if (c == ';') c = ',';
      if (c == '[') c = '(';
      if (c == ']') c = ')';
    }
    reason_ += (reason_.empty() ? "" : " / ") + (msg.empty() ? std::string("(no reason given)") : msg);
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (!info.result()->Skipped()) return;
    const std::string line =
        std::string("weave-test: skipped: ") + info.test_suite_name() + "." + info.name() + ": " + reason_ + "\n";
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
    // One write() of one line with O_APPEND: whole lines even when CTest runs tests in parallel.
    if (const char* log = std::getenv("WEAVE_TEST_SKIP_LOG"); log != nullptr && *log != '\0') {
      const int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        [[maybe_unused]] const ssize_t n = ::write(fd, line.data(), line.size());
        ::close(fd);
      }
    }
  }

 private:
  std::string reason_;
};

}  // namespace

int main(int argc, char** argv) {
  // Before any CUDA call: the emulated world (testing/emulated_world.hpp) runs W ranks' streams
  // on one GPU, and streams beyond the hardware queues share a queue, where one rank's waiting
  // kernel would block another rank's work (a false dependency a real multi-GPU run lacks). 32 is
  // the most CUDA allows; a value the caller set is kept.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  testing::InitGoogleTest(&argc, argv);
  testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  unit.listeners().Append(new SkipReasonPrinter);
  const int rc = RUN_ALL_TESTS();
  if (rc == 0 && unit.test_to_run_count() > 0 && unit.skipped_test_count() == unit.test_to_run_count())
    return kSkipExitCode;
  return rc;
}
