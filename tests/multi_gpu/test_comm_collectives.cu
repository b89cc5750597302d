// Every collective x transport x algorithm x dtype x size class, through self_test() (known
// per-rank values, checked per source rank, caller buffers and window buffers, in- and
// out-of-place), plus bitwise identity of all-reduce results across ranks and against a CPU
// reference that sums in rank order with fp32 accumulation.
#include <cstring>
#include <random>

#include "comm_support.hpp"
#include "common/check.hpp"
#include "weave/quant.hpp"

using namespace weave;
using namespace weave::test;

namespace {
struct Combo {
  CollectiveOp op;
  Transport transport;
  Algorithm algorithm;
};

const Combo kCombos[] = {
    {CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault},
    {CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclCopyEngine},
    {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush},
    {CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPull},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kLowLatency},
    {CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kAuto},
    {CollectiveOp::kReduceScatter, Transport::kNccl, Algorithm::kNcclDefault},
    {CollectiveOp::kReduceScatter, Transport::kCe, Algorithm::kPush},
    {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush},
    {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kLowLatency},
    {CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kAuto},
    {CollectiveOp::kAllReduce, Transport::kNccl, Algorithm::kNcclDefault},
    {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kOneShot},
    {CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kOneShot},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kTwoShot},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kAuto},
    {CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kLowLatency},
};

std::string name_of(const Combo& c, DType d) {
  std::string s = std::string(to_string(c.op)) + "/" + std::string(to_string(c.transport)) + "/" +
                  std::string(to_string(c.algorithm));
  if (c.op != CollectiveOp::kAllGather) s += "/" + std::string(to_string(d));
  return s;
}

void self_test_sizes(const Combo& combo, DType dtype, const std::vector<size_t>& counts, double ce_sm_share = 0) {
  size_t max_count = 0;
  for (size_t n : counts) max_count = std::max(max_count, n);
  for_each_rank([&](Communicator& c) {
    CollectiveConfig cfg = collective_config(combo.op, combo.transport, combo.algorithm, dtype, max_count);
    cfg.ce_sm_share = ce_sm_share;
    Collective op(c, cfg);
    EXPECT_EQ(op.transport(), combo.transport);
    for (size_t n : counts) {
      const SelfTestReport rep = op.self_test(n);
      EXPECT_TRUE(rep.ok) << name_of(combo, dtype) << " count " << n << ": " << rep.detail;
      if (!rep.ok) break;
    }
  });
}

}  // namespace

TEST(Collectives, SelfTestEveryTransportAlgorithmDtypeAndSizeClass) {
  WEAVE_REQUIRE_GPUS(2);
  // 1, odd, a 16-byte multiple, tails against 16 bytes and against the per-block partition.
  const std::vector<size_t> counts = {1, 7, 16, 4099, 65536 + 13, (size_t(3) << 20) + 5};
  for (const Combo& combo : kCombos) {
    const std::vector<DType> dtypes = combo.op == CollectiveOp::kAllGather ? std::vector<DType>{DType::kBF16}
                                                                            : std::vector<DType>{DType::kBF16, DType::kF32};
    for (DType d : dtypes) {
      SCOPED_TRACE(name_of(combo, d));
      self_test_sizes(combo, d, counts);
    }
  }
}

// Which sizes NCCL's own symmetric kernels (both buffers in a registered window) get right, called
// directly (no weave transport in between): logged, and held to the rule the nccl transport's
// refusal is built on (see the end of the test). The test below checks that refusal.
TEST(Collectives, NcclSymmetricKernelsOnOddSizesCharacterised) {
  WEAVE_REQUIRE_GPUS(2);
  std::vector<size_t> counts;
  for (size_t n = 1; n <= 40; ++n) counts.push_back(n);
  for (size_t n : {size_t(63), size_t(64), size_t(65), size_t(4095), size_t(4096), size_t(4099), size_t(65549)})
    counts.push_back(n);
  const size_t max_n = 65549;
  std::vector<size_t> bad_ag, bad_rs;  // sizes with a wrong element on some rank
  for_each_rank([&](Communicator& c) {
    const int w = c.world_size(), r = c.rank();
    WindowLayout layout;
    layout.add("ag", RegionKind::kData, w * max_n);
    layout.add("rs.in", RegionKind::kData, w * max_n * 2);
    layout.add("rs.out", RegionKind::kData, max_n * 2);
    SymmetricWindow win(c, layout);
    StreamHolder st;
    for (size_t n : counts) {
      // all-gather in place: my block of the window is my input.
      std::vector<uint8_t> mine(n), got(w * n);
      for (size_t j = 0; j < n; ++j) mine[j] = byte_value(r, j, static_cast<uint32_t>(n));
      char* ag = win.region("ag");
      WEAVE_CHECK_CUDA(cudaMemsetAsync(ag, 0xFF, w * n, st.s));
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(ag + r * n, mine.data(), n, cudaMemcpyHostToDevice, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      c.barrier();
      WEAVE_CHECK_NCCL(ncclAllGather(ag + r * n, ag, n, ncclUint8, c.nccl(), st.s));
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(got.data(), ag, w * n, cudaMemcpyDeviceToHost, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      size_t wrong = 0;
      for (size_t i = 0; i < w * n; ++i) wrong += got[i] != byte_value(static_cast<int>(i / n), i % n, static_cast<uint32_t>(n));
      // reduce-scatter bf16 out of place, both buffers in the window.
      std::vector<uint16_t> in(w * n), out(n);
      for (size_t j = 0; j < w * n; ++j) {
        in[j] = ref::float_to_bf16(small_value(r, j, 3));
      }
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(win.region("rs.in"), in.data(), w * n * 2, cudaMemcpyHostToDevice, st.s));
      WEAVE_CHECK_CUDA(cudaMemsetAsync(win.region("rs.out"), 0xFF, n * 2, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      c.barrier();
      WEAVE_CHECK_NCCL(ncclReduceScatter(win.region("rs.in"), win.region("rs.out"), n, ncclBfloat16, ncclSum, c.nccl(), st.s));
      WEAVE_CHECK_CUDA(cudaMemcpyAsync(out.data(), win.region("rs.out"), n * 2, cudaMemcpyDeviceToHost, st.s));
      WEAVE_CHECK_CUDA(cudaStreamSynchronize(st.s));
      size_t wrong_rs = 0;
      for (size_t j = 0; j < n; ++j) {
        float want = 0;
        for (int q = 0; q < w; ++q) want += small_value(q, r * n + j, 3);
        wrong_rs += ref::bf16_to_float(out[j]) != want;
      }
      const auto all_ag = c.all_gather(wrong, "ag outcome"), all_rs = c.all_gather(wrong_rs, "rs outcome");
      if (r == 0) {
        uint64_t t_ag = 0, t_rs = 0;
        for (auto v : all_ag) t_ag += v;
        for (auto v : all_rs) t_rs += v;
        if (t_ag) bad_ag.push_back(n);
        if (t_rs) bad_rs.push_back(n);
      }
    }
  });
  auto list = [](const std::vector<size_t>& v) {
    std::string s;
    for (size_t n : v) s += " " + std::to_string(n);
    return v.empty() ? std::string(" none") : s;
  };
  std::printf("[ INFO     ] NCCL ncclAllGather in place on window buffers: wrong for bytes per rank:%s\n",
              list(bad_ag).c_str());
  std::printf("[ INFO     ] NCCL ncclReduceScatter bf16 on window buffers: wrong for elements per rank:%s\n",
              list(bad_rs).c_str());
  // What the characterisation stands for (docs/comm.md "NCCL symmetric kernels"): weave's nccl
  // transport refuses window-buffer all-gather / reduce-scatter calls whose per-rank block is not a
  // multiple of 4 bytes (Collective::Impl::nccl_symmetric_defect) and passes every other size to
  // NCCL. So (1) no size outside that rule may come back wrong: it would reach users; and (2) the
  // defect the rule exists for must still show for some refused size, or the refusal is stale
  // (a newer NCCL fixed it: narrow the rule, then this expectation).
  auto refused = [](size_t block_bytes) { return block_bytes % 4 != 0; };
  for (size_t n : bad_ag) EXPECT_TRUE(refused(n)) << "all-gather of " << n << " bytes per rank is passed to NCCL and came back wrong";
  for (size_t n : bad_rs)
    EXPECT_TRUE(refused(2 * n)) << "bf16 reduce-scatter of " << n << " elements per rank is passed to NCCL and came back wrong";
  EXPECT_FALSE(bad_ag.empty() && bad_rs.empty())
      << "no refused size came back wrong: NCCL's symmetric kernels no longer show the defect "
         "(revisit nccl_symmetric_defect and docs/comm.md)";
}

TEST(Collectives, NcclTransportRefusesWhatNcclSymmetricKernelsGetWrong) {
  WEAVE_REQUIRE_GPUS(2);
  for_each_rank([&](Communicator& c) {
    CollectiveConfig cfg;
    cfg.op = CollectiveOp::kAllGather;
    cfg.transport = Transport::kNccl;
    cfg.max_count = 4096;
    Collective op(c, cfg);
    char* out = static_cast<char*>(op.window_output());
    try {
      op.run(out + c.rank() * 7, out, 7, nullptr);
      ADD_FAILURE() << "7-byte in-place all-gather on window buffers accepted by the nccl transport";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::kUnsupported) << e.what();
    }
    EXPECT_TRUE(op.self_test(7).ok);     // caller buffers only (noted in the detail)
    EXPECT_TRUE(op.self_test(4096).ok);  // both passes
  });
}

TEST(Collectives, SelfTestLargeSizes) {
  WEAVE_REQUIRE_GPUS(2);
  const size_t mb256 = size_t(256) << 20;
  self_test_sizes({CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush}, DType::kBF16, {mb256 + 1});
  self_test_sizes({CollectiveOp::kAllGather, Transport::kLsa, Algorithm::kPush}, DType::kBF16, {mb256 + 1});
  self_test_sizes({CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPull}, DType::kBF16, {mb256 + 1});
  // copy engines + SM stores sharing each block (odd sizes: the SM part ends on a 16-byte boundary)
  self_test_sizes({CollectiveOp::kAllGather, Transport::kCe, Algorithm::kPush}, DType::kBF16,
                  {(size_t(1) << 20) + 3, (size_t(64) << 20) + 1}, 0.3);
  self_test_sizes({CollectiveOp::kAllGather, Transport::kNccl, Algorithm::kNcclDefault}, DType::kBF16, {mb256});
  self_test_sizes({CollectiveOp::kAllReduce, Transport::kLsa, Algorithm::kAuto}, DType::kBF16, {mb256 / 2 + 3});
  self_test_sizes({CollectiveOp::kAllReduce, Transport::kCe, Algorithm::kTwoShot}, DType::kF32, {mb256 / 4 + 1});
  self_test_sizes({CollectiveOp::kReduceScatter, Transport::kLsa, Algorithm::kPush}, DType::kF32, {mb256 / 4 / local_world() + 5});
}


TEST(Collectives, AllReduceIsBitwiseIdenticalOnEveryRankAndSumsInRankOrder) {
  WEAVE_REQUIRE_GPUS(2);
  const int world = local_world();
  const size_t n = (size_t(1) << 20) + 9;
  // Random bf16 inputs with mixed magnitudes, so the rounding of every add matters.
  std::vector<std::vector<uint16_t>> inputs(world, std::vector<uint16_t>(n));
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-8, 8);
  for (auto& v : inputs)
    for (auto& x : v) x = ref::float_to_bf16(std::ldexp(mant(rng), expo(rng)));
  std::vector<uint16_t> reference(n);
  for (size_t i = 0; i < n; ++i) {
    float acc = ref::bf16_to_float(inputs[0][i]);
    for (int s = 1; s < world; ++s) acc += ref::bf16_to_float(inputs[s][i]);
    reference[i] = ref::float_to_bf16(acc);
  }
  for (const Combo& combo : kCombos) {
    if (combo.op != CollectiveOp::kAllReduce) continue;
    std::vector<std::vector<uint16_t>> results(world);
    for_each_rank([&](Communicator& c) {
      Collective op(c, collective_config(combo.op, combo.transport, combo.algorithm, DType::kBF16, n));
      DevBuf in(n * 2), out(n * 2);
      WEAVE_CHECK_CUDA(cudaMemcpy(in.p, inputs[c.rank()].data(), n * 2, cudaMemcpyHostToDevice));
      WEAVE_CHECK_CUDA(cudaMemset(out.p, 0xFF, n * 2));
      op.run(in.p, out.p, n, nullptr);
      WEAVE_CHECK_CUDA(cudaDeviceSynchronize());
      op.check();
      results[c.rank()].resize(n);
      WEAVE_CHECK_CUDA(cudaMemcpy(results[c.rank()].data(), out.p, n * 2, cudaMemcpyDeviceToHost));
    });
    for (int r = 1; r < world; ++r)
      EXPECT_EQ(std::memcmp(results[0].data(), results[r].data(), n * 2), 0)
          << name_of(combo, DType::kBF16) << ": rank " << r << " differs from rank 0";
    if (combo.transport == Transport::kNccl) continue;  // NCCL sums in its own order
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += results[0][i] != reference[i];
    EXPECT_EQ(wrong, 0u) << name_of(combo, DType::kBF16) << ": differs from the rank-order fp32 reference";
  }
}
