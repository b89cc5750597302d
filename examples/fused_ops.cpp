// weave's four fused operators over every visible Hopper GPU from ONE process, one host thread per
// GPU: GEMM + all-reduce (the row-parallel linear layer), GEMM + reduce-scatter (the same layer
// under sequence parallelism), all-gather + GEMM (the column-parallel layer under sequence
// parallelism: the activations gathered into the GEMM) and GEMM + all-gather (each rank's rows
// gathered to every rank).
//
//   comms = Communicator::create_local(devices)   one ncclCommInitAll for all ranks
//   GemmAllReduce op(comm, config)                 collective: every rank constructs it, in the same order
//   op.run(m, a, b, scales, stream)                enqueues only (graph-capturable); op.output(m) views the result
//
// Values are chosen so every output element is exact in bf16 (K = 256, W <= 8):
//   all-reduce      A_r = 1, B_r = r + 1       -> every element K (1 + ... + W)
//   reduce-scatter  the same                   -> rank r's m / W rows, every element K (1 + ... + W)
//   all-gather      A_r = r + 1, B = 1         -> rows of source s: K (s + 1)
//   gather + GEMM   the same                   -> the same rows (the activations move, not the output)
// Each op also runs its self_test() (known values through the real path, every element checked).
// Without a Hopper GPU the example prints what weave would run for each op at TP 2 (pure CPU),
// says why the GPU part is skipped, and exits 77. Exit 1: a wrong element or a failed self-test;
// 2: bad arguments or an error.
//   ./fused_ops [m]      (rows: all ranks' for the reductions, per rank for the gathers;
//                         a multiple of the GPU count; default 4096)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "weave/weave.hpp"

namespace {

constexpr std::int64_t kN = 2048, kK = 256;

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

uint16_t bf16_of_small_int(int v) {  // exact for |v| < 256
  const float f = static_cast<float>(v);
  uint32_t u = 0;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

float float_of_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f = 0;
  std::memcpy(&f, &u, 4);
  return f;
}

// A [rows, cols] bf16 matrix of one value on this rank's GPU (freed with the object).
struct Filled {
  void* p = nullptr;
  weave::TensorView view;
  Filled(std::int64_t rows, std::int64_t cols, int value, int device) {
    std::vector<uint16_t> h(static_cast<size_t>(rows * cols), bf16_of_small_int(value));
    check_cuda(cudaMalloc(&p, h.size() * 2), "cudaMalloc");
    check_cuda(cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
    view = weave::TensorView::matrix(p, weave::DType::kBF16, rows, cols, device);
  }
  ~Filled() { cudaFree(p); }
  Filled(const Filled&) = delete;
  Filled& operator=(const Filled&) = delete;
};

// One call of `op` on a fresh stream, then its output (bf16) on the host.
template <class Op>
std::vector<uint16_t> run_once(Op& op, std::int64_t m, const Filled& a, const Filled& b) {
  cudaStream_t stream = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  op.run(m, a.view, b.view, {}, stream);
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaStreamDestroy(stream);
  op.check();  // raises a timeout a device-side wait recorded (rank, peer, flag, expected, seen)
  const weave::TensorView out = op.output(m);  // a view into the op's window, valid until its next run()
  std::vector<uint16_t> host(static_cast<size_t>(out.rows() * out.cols()));
  check_cuda(cudaMemcpy(host.data(), out.data, host.size() * 2, cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

// Wrong elements of `got` ([rows, kN]) against want(row).
long long count_wrong(const std::vector<uint16_t>& got, const std::function<float(std::int64_t)>& want) {
  long long wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += float_of_bf16(got[i]) != want(static_cast<std::int64_t>(i) / kN);
  return wrong;
}

// Per op: self-test outcome and wrong elements of the known-value call, on this rank.
struct Outcome {
  bool self_test = false;
  long long wrong = 0;
};

template <class Op, class Config>
Outcome run_op(weave::Communicator& comm, const Config& cfg, std::int64_t m, int a_value, int b_value,
               const std::function<float(std::int64_t)>& want) {
  Op op(comm, cfg);
  if (comm.rank() == 0) std::printf("  %s\n", op.describe().c_str());
  Outcome o;
  const weave::SelfTestReport rep = op.self_test();
  o.self_test = rep.ok;
  if (!rep.ok) std::printf("  rank %d: %s\n", comm.rank(), rep.detail.c_str());
  const Filled a(m, kK, a_value, comm.device()), b(kN, kK, b_value, comm.device());
  o.wrong = count_wrong(run_once(op, m, a, b), want);
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  std::int64_t m = 4096;
  if (argc > 1) {
    char* end = nullptr;
    const long long v = std::strtoll(argv[1], &end, 10);
    if (argc != 2 || *end != '\0' || v < 1 || v > (1 << 16)) {
      std::fprintf(stderr, "usage: %s [m]: rows, an integer 1 .. 65536 (default 4096)\n", argv[0]);
      return 2;
    }
    m = v;
  }
  std::vector<int> devices;
  for (const weave::DeviceInfo& d : weave::list_devices())
    if (d.is_hopper()) devices.push_back(d.ordinal);
  const int world = devices.empty() ? 2 : static_cast<int>(devices.size());
  if (m % world != 0) {
    std::fprintf(stderr, "m = %lld must be a multiple of the world (%d GPUs): reduce-scatter splits its rows\n",
                 static_cast<long long>(m), world);
    return 2;
  }

  weave::GemmAllReduceConfig ar;
  ar.n = kN;
  ar.k = kK;
  ar.m_max = m;
  weave::GemmReduceScatterConfig rs;
  rs.n = kN;
  rs.k = kK;
  rs.m_max = m;
  weave::GemmAllGatherConfig ag;
  ag.n = kN;
  ag.k = kK;
  ag.m_max = m;
  weave::AllGatherGemmConfig agm;
  agm.n = kN;
  agm.k = kK;
  agm.m_max = m;
  for (const std::string& bad : {weave::GemmAllReduce::validate(ar, world), weave::GemmReduceScatter::validate(rs, world),
                                 weave::GemmAllGather::validate(ag, world), weave::AllGatherGemm::validate(agm, world)})
    if (!bad.empty()) {
      std::fprintf(stderr, "config: %s\n", bad.c_str());
      return 2;
    }
  // CPU part: what auto would run for one call of m rows on `world` NVLink-connected GPUs.
  std::printf("GEMM [m %lld, N %lld, K_r %lld] over %d GPUs, what auto runs:\n", static_cast<long long>(m),
              static_cast<long long>(kN), static_cast<long long>(kK), world);
  const weave::GemmAllReducePlan p_ar = weave::gemm_all_reduce_plan(ar, world, m);
  const weave::GemmReduceScatterPlan p_rs = weave::gemm_reduce_scatter_plan(rs, world, m);
  const weave::GemmAllGatherPlan p_ag = weave::gemm_all_gather_plan(ag, world, m);
  const weave::AllGatherGemmPlan p_agm = weave::all_gather_gemm_plan(agm, world, m);
  std::printf("  + all-reduce:     %s (%s)\n", std::string(weave::to_string(p_ar.mode)).c_str(), p_ar.reason.c_str());
  std::printf("  + reduce-scatter: %s (%s)\n", std::string(weave::to_string(p_rs.mode)).c_str(), p_rs.reason.c_str());
  std::printf("  + all-gather:     %s (%s)\n", std::string(weave::to_string(p_ag.mode)).c_str(), p_ag.reason.c_str());
  std::printf("  gather + GEMM:    %s (%s)\n", std::string(weave::to_string(p_agm.mode)).c_str(), p_agm.reason.c_str());
  if (devices.empty()) {
    const std::string why = weave::no_gpu_reason();
    std::printf("GPU part skipped: needs a Hopper GPU%s%s\n", why.empty() ? "" : ": ", why.c_str());
    return 77;
  }

  auto comms = weave::Communicator::create_local(devices);
  const float sum_ranks = static_cast<float>(kK * world * (world + 1) / 2);
  constexpr int kOps = 4;
  std::vector<Outcome> outcomes(kOps * comms.size());
  weave::run_per_rank(comms, [&](weave::Communicator& comm) {  // this thread's GPU is current
    const int r = comm.rank();
    Outcome* mine = &outcomes[kOps * static_cast<size_t>(r)];
    mine[0] = run_op<weave::GemmAllReduce>(comm, ar, m, 1, r + 1, [&](std::int64_t) { return sum_ranks; });
    mine[1] = run_op<weave::GemmReduceScatter>(comm, rs, m, 1, r + 1, [&](std::int64_t) { return sum_ranks; });
    // The gather's rows of source s (m per source) hold K (s + 1); B is the same on every rank.
    auto gathered = [&](std::int64_t row) { return static_cast<float>(kK * (row / m + 1)); };
    mine[2] = run_op<weave::GemmAllGather>(comm, ag, m, r + 1, 1, gathered);
    // The same rows, computed after the activations were gathered.
    mine[3] = run_op<weave::AllGatherGemm>(comm, agm, m, r + 1, 1, gathered);
  });
  const char* names[] = {"GEMM + all-reduce", "GEMM + reduce-scatter", "GEMM + all-gather", "all-gather + GEMM"};
  long long failures = 0;
  for (size_t r = 0; r < comms.size(); ++r)
    for (int i = 0; i < kOps; ++i) {
      const Outcome& o = outcomes[kOps * r + static_cast<size_t>(i)];
      std::printf("rank %zu, %s: self-test %s, %lld wrong elements\n", r, names[i],
                  o.self_test ? "passed" : "FAILED", o.wrong);
      failures += o.wrong + (o.self_test ? 0 : 1);
    }
  return failures == 0 ? 0 : 1;
} catch (const weave::Error& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}
