// An exception that escapes a fused op's call after its argument checks (mid-enqueue) leaves the
// op's protocol words possibly half-advanced: the op must refuse every later call and check()
// (kInternal, "unusable"), on the rank that raised. The negative control: an argument error before
// anything is enqueued leaves the op usable. (Issue 36 item 7.)
#include <gtest/gtest.h>

#include <string>

#include "comm/timeout.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused/all_reduce/impl.hpp"
#include "fused_op_traits_all_gather.hpp"
#include "fused_op_traits_all_reduce.hpp"
#include "fused_test_support.hpp"
#include "support/expect_error.hpp"
#include "support/gpu.hpp"
#include "testing/emulated_world.hpp"

using namespace weave;

namespace {

template <class T>
void an_error_mid_enqueue_breaks_the_op() {
  const int64_t n = 256, k = 256, m = 200;
  bench::EmulatedWorld ew(2, 0, 10);
  std::string first, later_check, later_run, arg_error;
  bool control_clean = false;
  ew.run([&](comm::Group& g) {
    // The control op: an argument error (m = 0) is raised before anything is enqueued.
    auto control = T::create(g, T::config(T::kQuants[0], T::kFused, n, k, m));
    auto op = T::create(g, T::config(T::kQuants[0], T::kFused, n, k, m));
    typename T::OneHot oh(m, n, k, g.rank());
    oh.set_a(3, m);
    test::Stream st;
    const std::string bad = test::error_of([&] { control->run(0, oh.a_view(1, g.device()), oh.b_view(g.device()), {}, st.s); });
    g.barrier();
    control->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    comm::sync_stream_bounded(st.s, 20, "the control op's call");
    control->check();  // raises if the argument error had broken it
    // Both ranks enqueue the whole call (so the peer's waits pass); rank 0's run() then raises.
    if (g.rank() == 0) T::Op::Impl::of(*op).fail_after_enqueue_for_testing = true;
    g.barrier();
    std::string e;
    if (g.rank() == 0)
      e = test::error_of([&] { op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s); },
                         Status::kInternal);
    else
      op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s);
    g.barrier();
    comm::sync_stream_bounded(st.s, 20, "the call that raised after enqueueing");
    if (g.rank() == 0) {
      first = e;
      arg_error = bad;
      control_clean = true;
      later_check = test::error_of([&] { op->check(); }, Status::kInternal);
      later_run = test::error_of([&] { op->run(m, oh.a_view(m, g.device()), oh.b_view(g.device()), {}, st.s); },
                                 Status::kInternal);
    } else {
      op->check();  // the peer's call completed: its own op is clean
    }
    g.barrier();
  });
  EXPECT_NE(arg_error.find("m must be"), std::string::npos) << arg_error;
  EXPECT_TRUE(control_clean) << "an argument error must leave the op usable";
  EXPECT_NE(first.find("(testing)"), std::string::npos) << first;
  EXPECT_NE(later_check.find("unusable"), std::string::npos) << "check() after the escape: " << later_check;
  EXPECT_NE(later_run.find("unusable"), std::string::npos) << "run() after the escape: " << later_run;
  std::printf("  %s: after an error mid-enqueue: %s\n", T::kName, later_run.c_str());
}

}  // namespace

TEST(FusedOpBroken, GemmAllReduceRefusesEveryCallAfterAnErrorMidEnqueue) {
  WEAVE_REQUIRE_GPUS(1);
  an_error_mid_enqueue_breaks_the_op<test::AllReduceTraits>();
}

TEST(FusedOpBroken, GemmAllGatherRefusesEveryCallAfterAnErrorMidEnqueue) {
  WEAVE_REQUIRE_GPUS(1);
  an_error_mid_enqueue_breaks_the_op<test::AllGatherTraits>();
}
