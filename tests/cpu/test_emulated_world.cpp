// The emulated world's host rendezvous on the CPU (no GPU work): every rank gets every rank's value
// in rank order round after round, and a rank that never arrives makes the others raise kTimeout
// naming it (instead of hanging).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "support/expect_error.hpp"
#include "testing/emulated_world.hpp"

using namespace weave;

TEST(EmulatedWorldRendezvous, AllGatherInRankOrderManyRounds) {
  const int w = 4;
  bench::EmulatedWorld ew(w, 0, 10);
  std::vector<std::thread> threads;
  std::vector<int> bad(w, 0);
  for (int r = 0; r < w; ++r)
    threads.emplace_back([&, r] {
      for (uint64_t round = 0; round < 500; ++round) {
        const auto all = ew.rank(r).all_gather(round * 100 + r, "a test round");
        for (int s = 0; s < w; ++s) bad[r] += all[s] != round * 100 + static_cast<uint64_t>(s);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < w; ++r) EXPECT_EQ(bad[r], 0) << "rank " << r;
}

TEST(EmulatedWorldRendezvous, AMissingRankTimesOutNamed) {
  bench::EmulatedWorld ew(3, 0, 0.2);
  std::vector<std::string> msgs(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { msgs[r] = test::error_of([&] { ew.rank(r).barrier(); }, Status::kTimeout); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_NE(msgs[r].find("rank(s) 2"), std::string::npos) << msgs[r];
}

TEST(EmulatedWorldRendezvous, BadWorldIsRefused) {
  const std::string msg = test::error_of([] { bench::EmulatedWorld ew(9, 0, 1); });
  EXPECT_NE(msg.find("world must be in 1..8"), std::string::npos) << msg;
}

// After a rendezvous timed out, its round can never complete (the rank that gave up is still
// counted in it): the rank that comes late, and every later rendezvous, fail at once naming the
// first cause, rather than waiting out the timeout again with a misleading list of missing ranks.
TEST(EmulatedWorldRendezvous, AfterATimeoutEveryLaterRendezvousFailsAtOnceWithTheCause) {
  bench::EmulatedWorld ew(2, 0, 0.2);
  const std::string first = test::error_of([&] { ew.rank(0).barrier(); }, Status::kTimeout);
  EXPECT_NE(first.find("rank(s) 1"), std::string::npos) << first;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string late = test::error_of([&] { ew.rank(1).barrier(); }, Status::kTimeout);
  const std::string again = test::error_of([&] { ew.rank(0).all_gather(7, "a second round"); }, Status::kTimeout);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 0.1) << "later rendezvous must not wait out the timeout again";
  for (const std::string* m : {&late, &again}) {
    EXPECT_NE(m->find("the world is broken"), std::string::npos) << *m;
    EXPECT_NE(m->find("rank 0 waited 0.2 s in a barrier for rank(s) 1"), std::string::npos) << *m;
  }
}
