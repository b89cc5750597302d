// The report of a timed-out GEMM pipeline wait (hopper::format_wait_timeout, what
// take_wait_timeout_report() returns after a kernel trapped), on the CPU. The device side that
// fills the record and the host-mapped round trip are GPU tests (tests/gpu/test_gemm_wait_timeout.cu).
//
// Catches: a record reported without its magic (a half-written record, or none), the two wait
// sites swapped or mislabelled, fields swapped (block/thread, stage/parity), the time printed in
// the wrong unit or rounded up, and signed/unsigned mix-ups at the ends of the fields' ranges.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "hopper/wait_report.hpp"

namespace weave::hopper {
namespace {

WaitTimeoutRecord record(WaitSite site, uint32_t stage, uint32_t parity, int32_t block, int32_t thread,
                         uint64_t waited_ns) {
  WaitTimeoutRecord r;
  r.magic = kWaitTimeoutMagic;
  r.site = static_cast<uint32_t>(site);
  r.stage = stage;
  r.parity = parity;
  r.block = block;
  r.thread = thread;
  r.waited_ns = waited_ns;
  return r;
}

TEST(WaitTimeoutReport, EmptyWithoutTheMagic) {
  WaitTimeoutRecord r = record(WaitSite::kConsumerFull, 3, 1, 5, 130, 10'000'000'000ull);
  r.magic = 0;
  EXPECT_EQ(format_wait_timeout(r), "");
  r.magic = kWaitTimeoutMagic ^ 1u;
  EXPECT_EQ(format_wait_timeout(r), "");
  EXPECT_EQ(format_wait_timeout(WaitTimeoutRecord{}), "");
}

TEST(WaitTimeoutReport, NamesEveryFieldOfAConsumerWait) {
  EXPECT_EQ(format_wait_timeout(record(WaitSite::kConsumerFull, 3, 1, 17, 130, 10'000'999'999ull)),
            "GEMM pipeline wait timed out after 10000 ms: block 17 thread 130 waiting on full[3] parity 1");
}

TEST(WaitTimeoutReport, NamesEveryFieldOfAProducerWait) {
  EXPECT_EQ(format_wait_timeout(record(WaitSite::kProducerEmpty, 5, 0, 0, 0, 12'345'678'901ull)),
            "GEMM pipeline wait timed out after 12345 ms: block 0 thread 0 waiting on empty[5] parity 0");
}

TEST(WaitTimeoutReport, NamesTheTileScaleWaits) {
  EXPECT_EQ(format_wait_timeout(record(WaitSite::kProducerScalesEmpty, 1, 0, 2, 0, 10'000'000'000ull)),
            "GEMM pipeline wait timed out after 10000 ms: block 2 thread 0 waiting on tile-scales empty[1] parity 0");
  EXPECT_EQ(format_wait_timeout(record(WaitSite::kConsumerScalesFull, 0, 1, 3, 200, 10'000'000'000ull)),
            "GEMM pipeline wait timed out after 10000 ms: block 3 thread 200 waiting on tile-scales full[0] parity 1");
  WaitTimeoutRecord bad = record(WaitSite::kConsumerFull, 0, 0, 0, 0, 0);
  bad.site = 99;  // a record no kernel writes still formats, naming the site as unknown
  EXPECT_EQ(format_wait_timeout(bad),
            "GEMM pipeline wait timed out after 0 ms: block 0 thread 0 waiting on unknown-site[0] parity 0");
}

TEST(WaitTimeoutReport, EndsOfTheFieldRanges) {
  const uint32_t u32max = std::numeric_limits<uint32_t>::max();
  const int32_t i32max = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(format_wait_timeout(record(WaitSite::kConsumerFull, u32max, 1, i32max, 383, 18'446'744'073'709'551'615ull)),
            "GEMM pipeline wait timed out after 18446744073709 ms: block 2147483647 thread 383 waiting on "
            "full[4294967295] parity 1");
  EXPECT_EQ(format_wait_timeout(record(WaitSite::kProducerEmpty, 0, 0, 0, 0, 999'999ull)),
            "GEMM pipeline wait timed out after 0 ms: block 0 thread 0 waiting on empty[0] parity 0");
}

}  // namespace
}  // namespace weave::hopper
