// GemmAllGather's trait for the typed emulated-world suite: the bodies (fused_op_traits_all_gather.hpp).
#include "fused_op_traits_all_gather.hpp"

#include <cstring>

#include <gtest/gtest.h>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/hash.hpp"
#include "fused/all_gather/impl.hpp"
#include "fused_test_support.hpp"
#include "testing/gpu_reference.hpp"

namespace weave::test {

float ag_b_value(int64_t row, int64_t col) { return static_cast<float>(static_cast<int>(mix64((row << 20) ^ col) % 17) - 8); }

std::vector<int64_t> AgOneHot::wrong(const void* out, DType dt, uint64_t seed, int world, int64_t m) const {
  const auto* bytes = static_cast<const uint8_t*>(out);
  std::vector<int64_t> bad(world, 0);
  for (int s = 0; s < world; ++s)
    for (int64_t i = 0; i < m; ++i) {
      const int c = onehot_col(seed, s, i, k);
      for (int64_t j = 0; j < n; ++j) {
        const size_t e = static_cast<size_t>((s * m + i) * n + j);
        float v;
        if (dt == DType::kF32) {
          std::memcpy(&v, bytes + 4 * e, 4);
        } else {
          uint16_t u;
          std::memcpy(&u, bytes + 2 * e, 2);
          v = ref::bf16_to_float(u);
        }
        if (!(v == ag_b_value(j, c))) ++bad[s];  // (NaN, i.e. never written, compares unequal)
      }
    }
  return bad;
}

void AgOneHot::expect_right(const std::vector<uint8_t>& out, DType dt, uint64_t seed, int world, int64_t m,
                            const std::string& what) const {
  const auto bad = wrong(out.data(), dt, seed, world, m);
  for (int s = 0; s < world; ++s) EXPECT_EQ(bad[s], 0) << what << ": source " << s;
}

namespace {

// Wrong elements of one call's bf16 output against the one-hot closed form, each gathered row r
// times row_scale[r] when given (ptpc's A scales; powers of two, so still exact).
__global__ void check_onehot_kernel(const uint16_t* out, const uint16_t* b, const int* cols, int64_t rows, int64_t n,
                                    int64_t k, unsigned long long* wrong, const float* row_scale) {
  unsigned long long bad = 0;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < rows * n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / n, j = e % n;
    const uint16_t want = b[j * k + cols[r]];
    if (row_scale == nullptr) {
      if (out[e] != want) ++bad;
    } else if (__uint_as_float(uint32_t{out[e]} << 16) != __uint_as_float(uint32_t{want} << 16) * row_scale[r]) {
      ++bad;  // (NaN, i.e. never written, compares unequal)
    }
  }
  if (bad) atomicAdd(wrong, bad);
}

}  // namespace

AgDeviceExpect::AgDeviceExpect(const AgOneHot& oh_, uint64_t seed, int world, int64_t m, bool with_ptpc)
    : cols(world * m * 4), row_scales(with_ptpc ? world * m * 4 : 0), oh(&oh_), rows(world * m) {
  std::vector<int> hc(world * m);
  std::vector<float> hs(world * m);
  for (int s = 0; s < world; ++s)
    for (int64_t i = 0; i < m; ++i) {
      hc[s * m + i] = onehot_col(seed, s, i, oh->k);
      hs[s * m + i] = ptpc_row_scale(s, i);
    }
  cols.upload(hc.data(), hc.size() * 4);
  if (with_ptpc) row_scales.upload(hs.data(), hs.size() * 4);
}

void AgDeviceExpect::count_wrong(const void* out, bool ptpc, unsigned long long* wrong, int blocks,
                                 cudaStream_t st) const {
  check_onehot_kernel<<<blocks, 256, 0, st>>>(static_cast<const uint16_t*>(out), oh->b.as<uint16_t>(), cols.as<int>(),
                                              rows, oh->n, oh->k, wrong, ptpc ? row_scales.as<float>() : nullptr);
  WEAVE_CHECK_LAUNCH();
}

void AgReference::expect_close(const std::vector<uint8_t>& out, const std::string& arm) const {
  // Per source rank (rows the call never wrote are still NaN).
  const int world = static_cast<int>(as.size());
  const size_t ob = dtype_bytes(q.out), bytes = static_cast<size_t>(world * p.m * p.n) * ob;
  bench::DeviceBuffer got(bytes), refbuf(static_cast<size_t>(p.m * p.n) * 4);
  got.upload(out.data(), bytes);
  for (int s = 0; s < world; ++s) {
    bench::gpu_reference_gemm(p, as[s].view, b.view, GemmScales{as[s].scale_view, b.scale_view}, refbuf.as<float>(), st);
    const TensorView rows = TensorView::matrix(static_cast<char*>(got.get()) + s * p.m * p.n * ob, q.out, p.m, p.n, dev);
    const ref::Comparison cmp = bench::gpu_compare(rows, refbuf.as<float>(), bench::gemm_tolerance(q.quant, q.out), st);
    EXPECT_EQ(cmp.wrong, 0) << "m " << p.m << " " << arm << " source rank " << s << ": " << cmp.wrong << " of "
                            << cmp.count << " wrong (never written " << cmp.never_written << ", first at "
                            << cmp.first_wrong << "), rel_l2 " << cmp.rel_l2;
    EXPECT_LT(cmp.rel_l2, kFusedRelL2Bound) << "m " << p.m << " " << arm << " source rank " << s;  // issue 36 item 12
  }
}

std::unique_ptr<GemmAllGather> AllGatherTraits::create(comm::Group& g, const Config& c, const Hooks& h) {
  return GemmAllGather::Impl::create(g, c, h);
}

const char* AllGatherTraits::peer_output(Op& op, int peer) {
  const GemmAllGather::Impl& im = GemmAllGather::Impl::of(op);
  return im.rt->window().handle().base[peer] + im.out_off;
}

std::vector<Arm<GemmAllGatherConfig, GemmAllGatherMode>> AllGatherTraits::numerics_arms() {
  // fused-ce where the emulated world can run copy streams (W = 2): also bitwise equal. fused-ce
  // always runs mxfp8 on the native kernel (no bf16 route), while split's auto takes the route
  // where the planner's model says so (M = 128 here): the route's bits differ from the native
  // kernel's (it is more accurate), so mxfp8's fused-ce is held to a split pinned to native.
  auto ce_fits = [](const QuantCase&, int world) { return fits_queues(Mode::kFusedCe, world); };
  auto ce_mx = [](const QuantCase& q, int world) { return fits_queues(Mode::kFusedCe, world) && q.quant == ScaleMode::kMxfp8; };
  return {
      {.name = "fused-lsa", .mode = Mode::kFusedLsa, .last = Mode::kFusedLsa, .twins = {"split-lsa"}, .reference = true},
      {.name = "split-lsa", .mode = Mode::kSplitLsa},
      {.name = "fused-ce", .mode = Mode::kFusedCe, .present = ce_fits, .last = Mode::kFusedCe,
       .twins = {"split-lsa native", "split-lsa"}},
      {.name = "split-lsa native", .mode = Mode::kSplitLsa, .tweak = [](Config& c) { c.mx_route = MxRoute::kNative; },
       .present = ce_mx},
  };
}

void AllGatherTraits::slow_down_for_back_to_back(Hooks& h, int rank, int world, Mode) {
  if (rank == world / 2) h.delay_stores_ns = 200'000;
  if (rank == 0) h.delay_pull_ns = 100'000;  // fused-ce: a slow puller too
}

std::vector<SoakWorld<GemmAllGatherMode>> AllGatherTraits::soak_worlds() {
  // bf16 (kQuants[0]) and ptpc (kQuants[2]): fused-lsa and auto; ptpc's auto at W = 2; fused-ce
  // where copy streams fit the emulated world (W = 2; said, not run, at W = 3 and 4). Each world's
  // ops interleaved in one run: 5000 calls at W = 2 and 4, 1200 at W = 3 (11,200 in all).
  //
  // Cost at kSoakShape (N 7168, K 2048, M uniform in 1..1024, mean ~512): a rank's GEMM is
  // 2 x 512 x 7168 x 2048 = 15 GFLOP, 25 us at an H100's ~600 TFLOP/s bf16 dense; a call is W of
  // them on the one GPU, taken at 40% of peak (small M, SMs split W ways): ~0.13 ms x W. Each rank
  // also poisons, receives and checks W x M x N bf16 (W = 4: 29 MB per rank, ~0.04 ms per rank
  // at ~3 TB/s). W = 2: 5000 x ~0.3 ms = 1.5 s; W = 4: 5000 x ~0.7 ms = 3.5 s; W = 3: 1200 x
  // ~0.5 ms = 0.6 s: ~6 s of GPU time (ptpc, about a third of the calls, is faster), under 30 s
  // with the host's set-up.
  std::vector<SoakWorld<Mode>> worlds;
  for (int world : {2, 4, 3}) {
    std::vector<SoakOp<Mode>> ops = {{0, Mode::kFusedLsa}, {0, Mode::kAuto}, {2, Mode::kFusedLsa}};
    if (world == 2) ops.push_back({2, Mode::kAuto});
    ops.push_back({0, Mode::kFusedCe, /*if_it_fits=*/true});
    worlds.push_back({world, false, {{ops, world == 3 ? 1200 : 5000, 4242ull + world, 900}}});
  }
  return worlds;
}

std::string AllGatherTraits::calibration_header(int64_t k) {
  return "weave-calibration 1\nop gemm-ag\nquant bf16\nout bf16\nn 256\nk " + std::to_string(k) + "\nworld 2\nwhere test\n";
}

std::vector<BadConfig<GemmAllGatherConfig>> AllGatherTraits::bad_calibrated_configs() {
  return {{[](Config& c) { c.out_dtype = DType::kF32; }, "is for another op shape: out bf16 (this op: fp32)"}};
}

std::vector<BadConfig<GemmAllGatherConfig>> AllGatherTraits::bad_configs() {
  return {{[](Config& c) {
             c.quant = ScaleMode::kPtpc;
             c.out_dtype = DType::kF32;
           },
           "bf16 output"}};
}

}  // namespace weave::test
