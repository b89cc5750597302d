// Harness logic that needs no GPU: cold-copy arithmetic, rank reduction, report rows.
#include <gtest/gtest.h>

#include "bench/harness.hpp"

using namespace weave::bench;

TEST(HarnessCpu, ColdCopiesCoverThreeTimesL2) {
  const size_t l2 = 60ull << 20;
  EXPECT_EQ(cold_copies(l2 * 10, l2), 2);        // never fewer than 2
  EXPECT_EQ(cold_copies(l2 / 4, l2), 12);        // 3 x L2 / (L2/4)
  EXPECT_EQ(cold_copies(1ull << 20, l2, 3.0), 180);
  EXPECT_EQ(cold_copies(0, l2), 2);
}

TEST(HarnessCpu, MaxOverRanksTakesTheSlowestMedian) {
  Timing a{10, 9, 11, 20, 5}, b{12, 11, 12.5, 12.5, 5};
  Timing m = max_over_ranks({a, b});
  EXPECT_DOUBLE_EQ(m.median_us, 12);
  EXPECT_DOUBLE_EQ(m.noise_pct, 20);  // widest spread of any rank
}

TEST(HarnessCpu, UnvalidatedRowCountsAsWrong) {
  Report r("x");
  Row ok;
  ok.wrong = 0;
  r.add(ok);
  EXPECT_FALSE(r.any_wrong());
  r.add(Row{});  // wrong = -1: never validated
  EXPECT_TRUE(r.any_wrong());
  auto j = r.to_json();
  EXPECT_EQ(j["rows"].size(), 2u);
  EXPECT_TRUE(j["rows"][0]["time_us"].is_null());
}
