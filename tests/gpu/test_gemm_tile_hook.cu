// The staged epilogue's per-tile completion hook, proved on one GPU the way a fused operator will
// use it: a test epilogue TMA-stores the GEMM into a second buffer and, from its tile_stored hook
// (after cp.async.bulk.wait_group + fence.proxy.async.global), adds one per stored warpgroup
// half to its row band's counter with a release. A checker kernel on another stream, resident at
// the same time, waits for each band's count (ld.acquire, bounded) and then checks every element
// of that band against a host fp64 reference (integer inputs: exact). Negative control: the same
// epilogue counting in before_store (the tile published before its stores) must be caught.
// Counting at tile_issued (committed, not yet complete) is run and reported too: on one GPU the
// stores land in L2 faster than the checker can look, so it is measured, not asserted.
// docs/memory_ordering.md "tile-publish".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gemm/kernel.cuh"
#include "hopper/ptx/comm_flags.cuh"
#include "hopper/tma_descriptor.hpp"
#include "hopper/wait_record.hpp"
#include "support/gpu.hpp"
#include "testing/gemm_operands.hpp"
#include "weave/reference.hpp"

namespace weave::test {
namespace {

struct CountParams {
  CUtensorMap tma_c;
  uint32_t* counters = nullptr;  // [row bands of kBlockM rows]
  int32_t when = 0;              // 0: count at tile_stored; 1: at tile_issued; 2: in before_store
};

template <class Out>
struct EpilogueStoreCount {
  using Params = CountParams;
  using OutType = Out;
  static constexpr bool kHasBeforeHook = true;
  static constexpr bool kHasStoredHook = true;
  static constexpr bool kHasIssuedHook = true;
  static constexpr bool kHasCallHooks = false;
  static constexpr bool kMultiDestination = false;
  __device__ __forceinline__ static void before_store(const Params& p, int m_blk, int, int, int) {
    if (p.when == 2) ptx::red_release_gpu_add_u32(p.counters + m_blk, 1);
  }
  __device__ __forceinline__ static void tile_issued(const Params& p, int m_blk, int, int, int) {
    if (p.when == 1) ptx::red_release_gpu_add_u32(p.counters + m_blk, 1);
  }
  __device__ __forceinline__ static void tile_stored(const Params& p, int m_blk, int, int, int) {
    if (p.when == 0) ptx::red_release_gpu_add_u32(p.counters + m_blk, 1);
  }
};

using Tile = gemm::TileShape<gemm::InBf16, 128, 128>;
using Epi = EpilogueStoreCount<float>;
using Instance = gemm::KernelInstance<Tile, gemm::ScaleNone, Epi, gemm::GroupedRowsScheduler>;

struct CheckResult {
  uint32_t wrong;          // elements that differ from the reference (NaN poison included)
  uint32_t first_bad;      // index of one of them (any)
  uint32_t timeouts;       // bands whose count never arrived
  uint32_t waited;         // bands whose first poll saw an incomplete count (the test had a race to see)
  uint32_t timeout_band, timeout_seen;
};

// One CTA per row band: thread 0 waits (bounded) until the band's count reaches `expected`, then
// the CTA compares the band's rows with the reference, bitwise.
__global__ void check_bands(const uint32_t* counters, uint32_t expected, const float* out, const float* ref,
                            int m, int n, uint64_t timeout_ns, CheckResult* result) {
  __shared__ int ok;
  const int band = blockIdx.x;
  if (threadIdx.x == 0) {
    const uint64_t t0 = ptx::globaltimer_ns();
    uint32_t seen = ptx::ld_acquire_gpu_u32(counters + band);
    if (seen < expected) atomicAdd(&result->waited, 1u);
    while (seen < expected && ptx::globaltimer_ns() - t0 < timeout_ns) seen = ptx::ld_acquire_gpu_u32(counters + band);
    ok = seen >= expected;
    if (!ok) {
      atomicAdd(&result->timeouts, 1u);
      result->timeout_band = static_cast<uint32_t>(band);
      result->timeout_seen = seen;
    }
  }
  __syncthreads();  // orders every thread's loads below after thread 0's acquire
  if (!ok) return;
  const int row0 = band * Tile::kBlockM;
  const int rows = min(Tile::kBlockM, m - row0);
  // From the band's end: the last strips stored are read first, while they may still be landing.
  for (int64_t e = int64_t{rows} * n - 1 - threadIdx.x; e >= 0; e -= blockDim.x) {
    const int64_t idx = int64_t{row0} * n + e;
    const float v = out[idx];
    if (!(v == ref[idx])) {
      atomicAdd(&result->wrong, 1u);
      result->first_bad = static_cast<uint32_t>(idx);
    }
  }
}

struct Case {
  int64_t m, n, k;
  int grid;
};

class GemmTileHook : public ::testing::Test {
 protected:
  void SetUp() override { WEAVE_REQUIRE_GPUS(1); }

  // Runs `repeats` launches of one case; returns the summed check results.
  CheckResult run_case(const Case& c, int when, int repeats, uint64_t seed) {
    ref::Random rng(seed);
    std::vector<uint16_t> a(static_cast<std::size_t>(c.m * c.k)), b(static_cast<std::size_t>(c.n * c.k));
    std::vector<float> af(a.size()), bf(b.size());
    for (std::size_t i = 0; i < a.size(); ++i) af[i] = static_cast<float>(rng.integer(-2, 2)), a[i] = ref::float_to_bf16(af[i]);
    for (std::size_t i = 0; i < b.size(); ++i) bf[i] = static_cast<float>(rng.integer(-2, 2)), b[i] = ref::float_to_bf16(bf[i]);
    std::vector<float> expect(static_cast<std::size_t>(c.m * c.n));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < c.k; ++kk) s += double(af[i * c.k + kk]) * double(bf[j * c.k + kk]);
        expect[i * c.n + j] = static_cast<float>(s);  // |s| <= 4k: exact in fp32
      }
    const int bands = static_cast<int>((c.m + Tile::kBlockM - 1) / Tile::kBlockM);
    const int n_blocks = static_cast<int>((c.n + Tile::kBlockN - 1) / Tile::kBlockN);
    const uint32_t expected = static_cast<uint32_t>(Tile::kConsumerWarpgroups * n_blocks);

    bench::DeviceBuffer da(a.size() * 2), db(b.size() * 2), dout(expect.size() * 4), dref(expect.size() * 4),
        dcount(static_cast<std::size_t>(bands) * 4), dres(sizeof(CheckResult));
    da.upload(a.data(), da.bytes());
    db.upload(b.data(), db.bytes());
    dref.upload(expect.data(), dref.bytes());

    gemm::KernelArgs<CountParams> args{};
    args.main.tma_a = hopper::make_tma_2d("A", da.get(), DType::kBF16, c.m, c.k, c.k, Tile::kBlockM, Tile::kBlockK,
                                          hopper::TmaSwizzle::k128B);
    args.main.tma_b = hopper::make_tma_2d("B", db.get(), DType::kBF16, c.n, c.k, c.k, Tile::kBlockN, Tile::kBlockK,
                                          hopper::TmaSwizzle::k128B);
    args.main.m = static_cast<int32_t>(c.m);
    args.main.n = static_cast<int32_t>(c.n);
    args.main.k = static_cast<int32_t>(c.k);
    args.main.group_rows = 8;
    args.main.timeout_record = hopper::wait_timeout_record();
    args.epi.tma_c = hopper::make_tma_3d_planes("out", dout.get(), DType::kF32, 1, c.m, c.n, c.n, c.m * c.n,
                                                gemm::kEpilogueBoxRows, 32, hopper::TmaSwizzle::k128B);
    args.epi.counters = static_cast<uint32_t*>(dcount.get());
    args.epi.when = when;
    Instance::prepare();

    cudaStream_t gemm_stream, check_stream;
    EXPECT_EQ(cudaStreamCreateWithFlags(&gemm_stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&check_stream, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t ready;
    EXPECT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
    CheckResult total{};
    for (int r = 0; r < repeats; ++r) {
      // Fresh poison and zero counts, then the checker first (it must be resident while the GEMM
      // runs), then the GEMM on the other stream once the setup is done.
      EXPECT_EQ(cudaMemsetAsync(dout.get(), 0xFF, dout.bytes(), check_stream), cudaSuccess);  // NaN
      EXPECT_EQ(cudaMemsetAsync(dcount.get(), 0, dcount.bytes(), check_stream), cudaSuccess);
      EXPECT_EQ(cudaMemsetAsync(dres.get(), 0, dres.bytes(), check_stream), cudaSuccess);
      EXPECT_EQ(cudaEventRecord(ready, check_stream), cudaSuccess);
      check_bands<<<bands, 256, 0, check_stream>>>(static_cast<uint32_t*>(dcount.get()), expected,
                                                   static_cast<float*>(dout.get()), static_cast<float*>(dref.get()),
                                                   static_cast<int>(c.m), static_cast<int>(c.n), 2'000'000'000ull,
                                                   static_cast<CheckResult*>(dres.get()));
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      EXPECT_EQ(cudaStreamWaitEvent(gemm_stream, ready), cudaSuccess);
      gemm::sm90_gemm_kernel<Tile, gemm::ScaleNone, Epi, gemm::GroupedRowsScheduler>
          <<<c.grid, Tile::kThreads, Instance::Layout::kBytes, gemm_stream>>>(args);
      EXPECT_EQ(cudaGetLastError(), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(gemm_stream), cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(check_stream), cudaSuccess);
      CheckResult res{};
      dres.download(&res, sizeof(res));
      total.wrong += res.wrong;
      total.timeouts += res.timeouts;
      total.waited += res.waited;
      if (res.wrong) total.first_bad = res.first_bad;
      if (res.timeouts) total.timeout_band = res.timeout_band, total.timeout_seen = res.timeout_seen;
      if (when == 0) {
        // Independently of the checker: the whole output equals the reference.
        std::vector<float> got(expect.size());
        dout.download(got.data(), dout.bytes());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i) bad += !(got[i] == expect[i]);
        EXPECT_EQ(bad, 0u) << "case " << c.m << "x" << c.n << "x" << c.k << " grid " << c.grid << " launch " << r;
      }
    }
    EXPECT_EQ(hopper::take_wait_timeout_report(), "");
    cudaEventDestroy(ready);
    cudaStreamDestroy(gemm_stream);
    cudaStreamDestroy(check_stream);
    return total;
  }
};

TEST_F(GemmTileHook, CheckerSeesEveryBandCompleteWhenItsCountArrives) {
  // Row remainders (1000, 777), one and several N tiles, K of 1..8 stages, grids from a few CTAs
  // (tiles complete one after another while the checker watches) to many.
  const Case cases[] = {{1024, 512, 256, 4},  {1000, 384, 512, 8},  {2048, 1024, 128, 16},
                        {777, 128, 1024, 3},  {4096, 256, 384, 32}, {1536, 640, 64, 100}};
  uint32_t waited = 0, bands_checked = 0;
  uint64_t seed = 0x7117;
  for (const Case& c : cases) {
    const int repeats = 10;
    const CheckResult r = run_case(c, /*when=*/0, repeats, seed++);
    EXPECT_EQ(r.wrong, 0u) << c.m << "x" << c.n << "x" << c.k << " grid " << c.grid << ": first bad element "
                           << r.first_bad;
    EXPECT_EQ(r.timeouts, 0u) << c.m << "x" << c.n << "x" << c.k << ": band " << r.timeout_band << " saw count "
                              << r.timeout_seen;
    waited += r.waited;
    bands_checked += repeats * static_cast<uint32_t>((c.m + 127) / 128);
  }
  // The proof needs races: the checker must have found counts still incomplete and waited.
  EXPECT_GT(waited, bands_checked / 4) << "the checker rarely ran ahead of the GEMM (" << waited << " of "
                                       << bands_checked << " bands waited): the test did not exercise the hook";
  std::printf("tile hook: %u of %u bands were checked while the GEMM was still running\n", waited, bands_checked);
}

TEST_F(GemmTileHook, NegativeControlPublishingBeforeTheStoresIsCaught) {
  // Counting in before_store publishes a tile before any of it is stored: the checker must see
  // NaN poison. Counting at tile_issued (the missing wait_group) is reported alongside.
  const Case c{2048, 1024, 256, 16};
  const CheckResult before = run_case(c, /*when=*/2, 20, 0xBAD);
  EXPECT_EQ(before.timeouts, 0u);
  EXPECT_GT(before.wrong, 0u) << "publishing before the stores was never caught: the checker cannot see unpublished data";
  const CheckResult issued = run_case(c, /*when=*/1, 20, 0xBAD);
  EXPECT_EQ(issued.timeouts, 0u);
  std::printf("tile hook negative controls over 20 launches: published before storing: %u wrong elements seen; "
              "published at issue (no wait_group): %u wrong elements seen\n",
              before.wrong, issued.wrong);
}

}  // namespace
}  // namespace weave::test
