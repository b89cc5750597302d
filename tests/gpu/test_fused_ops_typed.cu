// The fused operators in the emulated world (testing/emulated_world.hpp: W ranks as threads on one
// GPU, the same op code and kernels as over NCCL), the behaviours every fused op has, once per
// operator (fused_op_typed.hpp): every mode x quant x W through self_test and its teeth, fused
// bitwise equal to split and within tolerance of a reference that is not weave's kernel, a
// calibration table, the caller's out, bad inputs. The protocol's behaviours:
// test_fused_ops_typed_protocol.cu; what only one op has: test_gemm_all_gather.cu,
// test_gemm_all_reduce*.cu.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused_op_typed.hpp"
#include "support/expect_error.hpp"
#include "testing/emulated_world.hpp"

namespace weave::test {

// Every mode x quant x world through self_test (known values, every rank's share checked on every
// rank), at the trait's M (one row, a partial tile, one tile, many tiles): W = 2, 4, 8 every
// quant, W = 3, 5, 6, 7 (kOtherWorlds) the first quant (bf16). A mode a world cannot run is said
// with its reason; every world must have passed its count of self-tests (rank 0 counted).
TYPED_TEST(EmulatedFusedOp, SelfTestEveryModeQuantAndWorld) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const OpShape s = T::kSelfTestShape;
  std::vector<int> worlds = {2, 4, 8};
  worlds.insert(worlds.end(), std::begin(kOtherWorlds), std::end(kOtherWorlds));
  int passed = 0;
  for (int world : worlds) {
    const bool every_quant = world == 2 || world == 4 || world == 8;
    bench::EmulatedWorld ew(world, 0, 20);
    int expected_here = 0, passed_here = 0;
    for (const QuantCase& q : T::kQuants) {
      if (!every_quant && &q != &T::kQuants[0]) break;
      for (typename T::Mode mode : T::kSelfTestModes) {
        if (const std::string why = not_run_reason(mode, world); !why.empty()) {
          if (&q == &T::kQuants[0]) print_not_run(mode_name(mode), world, why);  // once per mode and world
          continue;
        }
        expected_here += static_cast<int>(std::size(T::kSelfTestMs));
        SCOPED_TRACE(std::string(q.name) + " " + mode_name(mode) + " W" + std::to_string(world));
        ew.run([&](comm::Group& g) {
          auto op = T::create(g, T::config(q, mode, s.n, s.k, s.m_max));
          for (int64_t m : T::kSelfTestMs) {
            const SelfTestReport rep = op->self_test(m);
            EXPECT_TRUE(rep.ok) << rep.detail;
            if (g.rank() == 0 && rep.ok) ++passed_here;
          }
        });
      }
    }
    EXPECT_GT(expected_here, 0) << "W" << world << ": no mode ran";
    EXPECT_EQ(passed_here, expected_here) << "W" << world << ": self-tests passed of those run";
    std::printf("  %s W%d: %d of %d self-tests passed (%s)\n", T::kName, world, passed_here, expected_here,
                every_quant ? "every quant" : T::kQuants[0].name);
    passed += passed_here;
  }
  std::printf("  %s self-tests passed: %d (rank 0 counted)\n", T::kName, passed);
}

// self_test has teeth: gemm-only moves nothing, so the peer's share of every rank's output is
// missing, and the error is attributed to that peer.
TYPED_TEST(EmulatedFusedOp, SelfTestFailsWhenNothingMoves) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    auto op = T::create(g, T::config(T::kQuants[0], T::Mode::kGemmOnly, 256, 512, 256));
    const SelfTestReport rep = op->self_test(200);
    EXPECT_FALSE(rep.ok) << rep.detail;
    EXPECT_EQ(rep.wrong_from_rank[g.rank()], 0) << T::kOwnShareIsLocal;
    EXPECT_GT(rep.wrong_from_rank[1 - g.rank()], 0) << T::kPeerShareMissing;
    if (g.rank() == 0) std::printf("  %s\n", rep.detail.c_str());
  });
}

namespace {

// One world and quant of the numerics tests: random operands per rank, the trait's arms (fused
// modes, split-lsa, exact_own) on an op shape, each fused arm's output bitwise equal to its split
// twin, identical on every rank, and within the trait's reference (per source rank for
// all-gather, the sum over ranks for all-reduce: per-element bounds and kFusedRelL2Bound). Every
// output NaN-poisoned before its call. An arm the world cannot run (the copy-engine modes past
// W = 2) is said with its reason. `hooks` go to every arm's op (a forced tile). Returns the M
// checked (rank 0's count).
template <class T>
int numerics_case(bench::EmulatedWorld& ew, int world, const QuantCase& q, const OpShape& shape,
                  const std::vector<int64_t>& ms, const typename T::Hooks& given = {}) {
  const int64_t n = shape.n, k = shape.k, m_max = shape.m_max;
  // fused == split is about the tile both run: a split mode that takes weave::Gemm's K split or
  // GEMV instead (small m, long K) has its own test (SplitModesRunWeaveGemmsKSplitOrGemvBitwise).
  typename T::Hooks hooks = given;
  if constexpr (requires { hooks.split_leg; }) hooks.split_leg = false;
  const auto arms = T::numerics_arms();
  if (&q == &T::kQuants[0])  // once per world
    for (const auto& arm : arms)
      if (const std::string why = not_run_reason(arm.mode, world); !why.empty())
        print_not_run(std::string(T::kName) + " numerics arm " + arm.name, world, why);
  int checked = 0;
  ew.run([&](comm::Group& g) {
    const int dev = g.device(), r = g.rank();
    std::vector<const Arm<typename T::Config, typename T::Mode>*> here;  // the arms run here, in order
    std::vector<std::unique_ptr<typename T::Op>> ops;
    for (const auto& arm : arms) {
      if (arm.present != nullptr && !arm.present(q, world)) continue;
      auto c = T::config(q, arm.mode, n, k, m_max);
      if (arm.tweak != nullptr) arm.tweak(c);
      here.push_back(&arm);
      ops.push_back(T::create(g, c, hooks));
    }
    auto index_of = [&](const char* name) {
      for (size_t i = 0; i < here.size(); ++i)
        if (std::strcmp(here[i]->name, name) == 0) return static_cast<int>(i);
      return -1;
    };
    std::vector<bench::DeviceOperand> bs;  // B, or every rank's shard (this rank regenerates them)
    for (int s = 0; s < (T::kBPerRank ? world : 1); ++s)
      bs.push_back(bench::upload_operand(
          bench::quantize_parallel(bench::random_operand(77 + s, n, k), n, k, q.quant, ref::Operand::kB), dev));
    const bench::DeviceOperand& b = bs[T::kBPerRank ? r : 0];
    Stream st;
    const size_t ob = dtype_bytes(q.out);
    for (int64_t m : ms) {
      const std::vector<bench::DeviceOperand> as = upload_every_a(world, 1000, m, k, q.quant, dev);
      LayoutScales held;
      const GemmScales sc = scales_in_layout(q.layout, as[r], b, held);
      const int64_t rows = T::out_rows(world, m);
      const size_t bytes = static_cast<size_t>(rows * n) * ob;
      // One op's call at a time across the ranks, its output NaN-poisoned first
      // (test::poisoned_call): back-to-back calls of two ops at W = 4 were seen to stall in the
      // emulated world (testing/emulated_world.hpp "Queues"); this test is about numerics,
      // back-to-back calls are BackToBack's and the soak's.
      std::vector<std::vector<uint8_t>> outs;
      for (auto& op : ops) outs.push_back(poisoned_call(g, *op, m, as[r].view, b.view, sc, bytes, st.s));
      for (size_t i = 0; i < here.size(); ++i) {
        if (here[i]->last) EXPECT_EQ(ops[i]->last_mode(), *here[i]->last) << here[i]->name;
        if (hooks.tile.forced() && here[i]->mode == T::kFused) {  // the public plan shows the tile it ran
          const auto plan = ops[i]->plan(m);
          EXPECT_EQ(plan.block_m * 10000 + plan.block_n, hooks.tile.block_m * 10000 + hooks.tile.block_n)
              << here[i]->name << " m " << m << ": " << plan.reason;
        }
        for (const char* twin : here[i]->twins) {
          const int t = index_of(twin);
          if (t < 0) continue;  // not run here: the next twin
          size_t first = 0;
          while (first < bytes && outs[i][first] == outs[t][first]) ++first;
          EXPECT_EQ(first, bytes) << "m " << m << ": " << here[i]->name << " differs from " << twin << " from byte "
                                  << first << " (row " << first / ob / n << " of " << rows << ", column "
                                  << first / ob % n << ")";
          break;
        }
      }
      const auto hashes = g.all_gather(fnv1a64(outs[0].data(), bytes), "the output hash");
      for (int s = 1; s < world; ++s) EXPECT_EQ(hashes[s], hashes[0]) << "m " << m << ": rank " << s << " differs";
      const GemmProblem p{.m = m, .n = n, .k = k, .mode = q.quant, .scale_layout = ScaleLayout::kRaw, .out_dtype = q.out};
      const typename T::Reference want(q, p, as, bs, r, dev, st.s);
      for (size_t i = 0; i < here.size(); ++i)
        if (here[i]->reference) want.expect_close(outs[i], here[i]->name);
      if (r == 0) ++checked;
      g.barrier();  // nobody starts the next m while a peer still reads this one's output
    }
  });
  return checked;
}

}  // namespace

// The numerics of numerics_case at the trait's kNumericsShape: W = 2 and 4 over every quant and M
// (kNumericsMs and one random M); W = 8 (the lsa modes) at M = 1, 128 and 1000 (numerics_runs);
// W = 3, 5, 6, 7 (kOtherWorlds) the first quant (bf16) at M = 1, 128, 1000 and the random M.
TYPED_TEST(EmulatedFusedOp, FusedEqualsSplitBitwiseAndMatchesReference) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  std::mt19937_64 rng(20261201);
  std::vector<int64_t> ms(std::begin(T::kNumericsMs), std::end(T::kNumericsMs));
  const int64_t random_m = 1 + static_cast<int64_t>(rng() % 8000);
  ms.push_back(random_m);
  std::vector<int> worlds = {2, 4, 8};
  worlds.insert(worlds.end(), std::begin(kOtherWorlds), std::end(kOtherWorlds));
  for (int world : worlds) {
    if (!fits_queues(T::kFused, world)) {
      ADD_FAILURE() << "W" << world << " not run: " << not_run_reason(T::kFused, world);
      continue;
    }
    const bool every_quant = world == 2 || world == 4 || world == 8;
    std::vector<int64_t> here;
    for (int64_t m : ms)
      if (every_quant ? T::numerics_runs(world, m) : (m == 1 || m == 128 || m == 1000 || m == random_m))
        here.push_back(m);
    bench::EmulatedWorld ew(world, 0, T::kNumericsTimeoutS);
    int checked = 0, quants = 0;
    for (const QuantCase& q : T::kQuants) {
      if (!every_quant && &q != &T::kQuants[0]) break;
      SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world));
      checked += numerics_case<T>(ew, world, q, T::kNumericsShape, here);
      ++quants;
    }
    EXPECT_EQ(checked, quants * static_cast<int>(here.size())) << "W" << world << ": M checked";
    std::printf("  %s W%d: %d quants x %zu M checked (fused == split, reference)\n", T::kName, world, quants,
                here.size());
  }
}

// Every tile the op may run (its candidates: built with its fused epilogue and the local store,
// fused/tile_choice.hpp), forced on every arm: fused == split bitwise and the reference, every
// quant at W = 2 (the bf16 quant at W = 3 too), M of one row, a partial tile, several tiles and
// a partial band; N 672 leaves a partial column tile at every width (64, 128, 160 and 256). The
// planner reaches only some tiles at the other tests' shapes; this holds every built instance.
TYPED_TEST(EmulatedFusedOp, EveryBuiltTileFusedEqualsSplit) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const OpShape shape{672, 1024, 1024};
  const std::vector<int64_t> ms = {1, 77, 300, 1000};
  for (int world : {2, 3}) {
    bench::EmulatedWorld ew(world, 0, T::kNumericsTimeoutS);
    int tiles = 0;
    for (const QuantCase& q : T::kQuants) {
      if (world == 3 && &q != &T::kQuants[0]) break;
      const auto cands = T::tile_candidates(T::config(q, T::kFused, shape.n, shape.k, shape.m_max));
      for (const auto& t : cands) {
        SCOPED_TRACE(std::string(q.name) + " W" + std::to_string(world) + " tile " + std::to_string(t.block_m) + "x" +
                     std::to_string(t.block_n));
        typename T::Hooks h;
        h.tile = {t.block_m, t.block_n};
        EXPECT_EQ(numerics_case<T>(ew, world, q, shape, ms, h), static_cast<int>(ms.size()));
        ++tiles;
      }
      EXPECT_GE(cands.size(), q.quant == ScaleMode::kMxfp8 ? 1u : 4u) << q.name << ": the tiles built";
    }
    std::printf("  %s W%d: %d quant x tile cases, %zu M each (fused == split, reference)\n", T::kName, world, tiles,
                ms.size());
  }
}

// The same at model width and depth: N = 7168, K_r = 7168 (bf16, W = 2, every arm incl. fused-ce),
// small M (one row, one tile, a partial band), against the reference that is not weave's kernel.
// A term lost or doubled anywhere along the 56 K blocks or the 28 column blocks shows here.
TYPED_TEST(EmulatedFusedOp, FusedEqualsSplitAtModelWidthAndDepth) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const OpShape shape{7168, 7168, 384};
  const std::vector<int64_t> ms = {1, 128, 333};
  bench::EmulatedWorld ew(2, 0, 30);
  SCOPED_TRACE(std::string(T::kQuants[0].name) + " W2 N 7168 K 7168");
  const int checked = numerics_case<T>(ew, 2, T::kQuants[0], shape, ms);
  EXPECT_EQ(checked, static_cast<int>(ms.size()));
  std::printf("  %s W2 N 7168 K 7168: %d M checked (fused == split, reference)\n", T::kName, checked);
}

// A calibration table (Config::calibration): auto follows it where the op can run the mode (at an
// M where the model says split), self_test passes through that path; a table for another shape,
// or with an explicit mode, is kInvalidArgument at construction, and ranks reading different
// tables are kMismatch on every rank.
TYPED_TEST(EmulatedFusedOp, CalibrationTableIsFollowedAndCheckedAtConstruction) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const auto& cal = T::kCalibration;
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto write = [&](const std::string& name, int64_t k, const char* rows) {
    const std::string path =
        dir + "/weave-cal-" + T::kName + "-" + std::to_string(::getpid()) + "-" + name + ".txt";
    std::ofstream f(path);
    f << T::calibration_header(k) << rows;
    return path;
  };
  const std::string good = write("good", cal.shape.k, cal.good_rows), other = write("other", cal.shape.k, cal.other_rows);
  const std::string wrong_k = write("k", 512, cal.wrong_k_rows);
  bench::EmulatedWorld ew(2, 0, 10);
  ew.run([&](comm::Group& g) {
    auto cfg = T::config(T::kQuants[0], T::Mode::kAuto, cal.shape.n, cal.shape.k, cal.shape.m_max);
    EXPECT_EQ(T::create(g, cfg)->plan(cal.m).mode, cal.model) << "the model";
    cfg.calibration = good;
    auto op = T::create(g, cfg);
    const auto p = op->plan(cal.m);
    EXPECT_EQ(p.mode, cal.table) << p.reason;
    EXPECT_NE(p.reason.find("measured fastest"), std::string::npos) << p.reason;
    const SelfTestReport rep = op->self_test(cal.m);
    EXPECT_TRUE(rep.ok) << rep.detail;
    EXPECT_EQ(op->last_mode(), cal.table);
    auto refused = [&](const typename T::Config& bad, Status status) {
      return error_of([&] { T::create(g, bad); }, status);
    };
    auto bad = cfg;
    bad.calibration = wrong_k;
    const std::string other_k = "is for another op shape: k 512 (this op: " + std::to_string(cal.shape.k) + ")";
    EXPECT_NE(refused(bad, Status::kInvalidArgument).find(other_k), std::string::npos);
    bad = cfg;
    bad.mode = cal.table;
    EXPECT_NE(refused(bad, Status::kInvalidArgument).find("only mode auto consults a calibration"), std::string::npos);
    for (const BadConfig<typename T::Config>& c : T::bad_calibrated_configs()) {
      bad = cfg;
      c.tweak(bad);
      EXPECT_NE(refused(bad, c.status).find(c.needle), std::string::npos) << c.needle;
    }
    bad = cfg;
    bad.calibration = g.rank() == 0 ? good : other;
    EXPECT_NE(refused(bad, Status::kMismatch).find("calibration"), std::string::npos);
  });
  for (const auto& path : {good, other, wrong_k}) std::filesystem::remove(path);
}

// run(m, a, b, scales, out, stream): the output copied into the caller's buffer after the call, on
// its stream. W = 2; the trait's modes and out dtypes; its M: out (a row-strided column slice of a
// wider buffer, NaN-poisoned first) is the window's view bitwise and the closed form, the columns
// beside it untouched; the same from graphs replayed with changing A (where the trait's modes run
// per-rank graphs). Bad outs are kInvalidArgument naming 'out' and the rule, before any GPU work;
// the ranks stay in step (the next call is right).
TYPED_TEST(EmulatedFusedOp, CallerOutputIsTheWindowViewCopiedAfterTheCall) {
  using T = TypeParam;
  WEAVE_REQUIRE_GPUS(1);
  const int64_t n = T::kCallerOutShape.n, k = T::kCallerOutShape.k, m_max = T::kCallerOutShape.m_max;
  const int world = 2;
  for (typename T::Mode mode : T::kCallerOutModes)
    for (int qi : T::kCallerOutQuants) {
      const QuantCase& q = T::kQuants[qi];
      if (!fits_queues(mode, world)) {
        ADD_FAILURE() << mode_name(mode) << " not run at W2 in the emulated world";
        continue;
      }
      SCOPED_TRACE(mode_name(mode) + " " + q.name);
      bench::EmulatedWorld ew(world, 0, 20);
      ew.run([&](comm::Group& g) {
        const int dev = g.device(), r = g.rank();
        auto op = T::create(g, T::config(q, mode, n, k, m_max));
        typename T::OneHot oh(m_max, n, k, r);
        Stream st;
        const double bound = 2 * g.timeout_s() + 5;
        auto check_out = [&](const CallerOut& out, uint64_t seed, int64_t m, const std::string& what) {
          expect_out_is_the_window_view(*op, m, out, what);
          oh.expect_right(out.rows(), q.out, seed, world, m, what);
        };
        for (int64_t m : T::kCallerOutMs) {
          const uint64_t seed = 40 + m;
          oh.set_a(seed, m);
          const CallerOut out(q.out, T::out_rows(world, m), n, n + 3, dev);  // a row pitch of no particular alignment
          out.poison(st.s);
          g.barrier();
          op->run(m, oh.a_view(m, dev), oh.b_view(dev), {}, out.view, st.s);
          comm::sync_stream_bounded(st.s, bound, "a call with out");
          op->check();
          check_out(out, seed, m, "m " + std::to_string(m) + " (" + mode_name(op->last_mode()) + ")");
          g.barrier();  // nobody starts the next call while a peer still reads this one's output
        }
        // Graphs: [A variant -> the live A, the call with out], one per variant and rank, replayed
        // in turn with out poisoned before each replay.
        const int64_t m = 300;
        const CallerOut out(q.out, T::out_rows(world, m), n, n + 24, dev);
        if (T::caller_out_graphs(mode))
          expect_out_graph_replays(
              g, *op, m, k, m_max, oh.b_view(dev), out, [&](uint64_t seed) { return oh.host_a(seed, m); }, check_out,
              dev, st.s, bound);
        // Bad outs, then a good call: every rank is still in step.
        g.barrier();
        const int peer = 1 - r;
        oh.set_a(41, m);
        expect_refused_outs_then_a_good_call(g, *op, m, oh.a_view(m, dev), oh.b_view(dev), out,
                                             T::peer_output(*op, peer), peer, 41, check_out, st.s, bound);
      });
    }
}

// Bad inputs: each a clear error naming the argument and the rule; N or K differing across ranks
// is a kMismatch at construction on every rank.
TYPED_TEST(EmulatedFusedOp, BadInputsAreClearErrors) {
  using T = TypeParam;
  using Op = typename T::Op;
  WEAVE_REQUIRE_GPUS(1);
  const auto cfg = T::config(T::kQuants[0], T::kFused, 256, 256, 256);
  EXPECT_NE(Op::validate(cfg, 9).find("world"), std::string::npos);
  auto c2 = cfg;
  c2.n = 100;
  EXPECT_NE(Op::validate(c2, 2).find("multiple of 8"), std::string::npos);
  c2 = cfg;
  c2.m_max = 0;
  EXPECT_NE(Op::validate(c2, 2).find("m_max"), std::string::npos);
  for (const BadConfig<typename T::Config>& c : T::bad_configs()) {  // this op's own rules
    c2 = cfg;
    c.tweak(c2);
    EXPECT_NE(Op::validate(c2, 2).find(c.needle), std::string::npos) << c.needle;
  }
  bench::EmulatedWorld ew(2, 0, 5);
  for (int what = 0; what < 2; ++what)
    ew.run([&](comm::Group& g) {
      auto c = cfg;
      if (g.rank() == 1) (what == 0 ? c.n : c.k) = 512;
      const std::string msg = error_of([&] { T::create(g, c); }, Status::kMismatch);
      EXPECT_NE(msg.find(std::string(T::kName) + " configuration"), std::string::npos) << msg;
    });
  ew.run([&](comm::Group& g) {
    auto op = T::create(g, cfg);
    typename T::OneHot oh(256, 256, 256, g.rank());
    Stream st;
    const int dev = g.device();
    std::string msg = error_of([&] { op->run(257, oh.a_view(256, dev), oh.b_view(dev), {}, st.s); });
    EXPECT_NE(msg.find("m_max"), std::string::npos) << msg;
    msg = error_of([&] { op->run(0, oh.a_view(256, dev), oh.b_view(dev), {}, st.s); });
    EXPECT_NE(msg.find("m must be"), std::string::npos) << msg;
    msg = error_of([&] { op->run(128, oh.a_view(256, dev), oh.b_view(dev), {}, st.s); });  // A has 256 rows
    EXPECT_NE(msg.find("'A'"), std::string::npos) << msg;
    msg = error_of(
        [&] { op->run(256, TensorView::matrix(oh.a.get(), DType::kE4M3, 256, 256, dev), oh.b_view(dev), {}, st.s); });
    EXPECT_NE(msg.find("'A'"), std::string::npos) << msg;
    expect_misaligned_a_b_named(*op, oh.a.get(), oh.b.get(), oh.a_view(256, dev), oh.b_view(dev), st.s);
    msg = error_of([&] { op->output(257); });
    EXPECT_NE(msg.find("m must be"), std::string::npos) << msg;
  });
  for (const BadConfig<typename T::Config>& c : T::refused_at_construction())
    ew.run([&](comm::Group& g) {
      auto bad = cfg;
      c.tweak(bad);
      const std::string msg = error_of([&] { T::create(g, bad); }, c.status);
      EXPECT_NE(msg.find(c.needle), std::string::npos) << msg;
    });
}

}  // namespace weave::test
