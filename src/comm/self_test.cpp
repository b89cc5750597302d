// Collective::self_test: moves known per-rank values through the real path of the op (its own
// transport, algorithm and kernels) and checks what arrived from each source rank, so a transport
// that silently moves nothing cannot pass (docs/REFERENCE requirement 1).
//
// Values (exact in every dtype, so results compare bitwise):
//   all-gather: a hashed byte per (source, index, seed)        -> checked per source
//   fp32      : source s contributes v_s * 8^s, v_s in 1..7     -> the sum's octal digit s is v_s
//   bf16      : small integers in -3..3 (sums exact in bf16)    -> checked as a sum
// Two passes: caller-style buffers (cudaMalloc; staged path) and the op's window buffers
// (zero-copy; in-place for all-gather and all-reduce). Outputs are poisoned (0xFF) first.
#include <cstring>
#include <sstream>

#include "comm/collective_impl.hpp"
#include "common/check.hpp"
#include "weave/quant.hpp"

namespace weave {

namespace {

uint8_t ag_byte(int src, size_t i, uint64_t seed) {
  uint32_t x = static_cast<uint32_t>(src) * 0x9E3779B1u ^ static_cast<uint32_t>(i) * 0x85EBCA77u ^
               static_cast<uint32_t>(i >> 32) ^ static_cast<uint32_t>(seed) * 0xC2B2AE3Du;
  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return static_cast<uint8_t>(x >> 24);
}

int digit(int src, size_t i, uint64_t seed) { return 1 + static_cast<int>((i * 7 + static_cast<size_t>(src) * 3 + seed) % 7); }
float fp32_value(int src, size_t i, uint64_t seed) { return static_cast<float>(digit(src, i, seed) << (3 * src)); }
float bf16_value(int src, size_t i, uint64_t seed) {
  return static_cast<float>(static_cast<int>((i * 5 + static_cast<size_t>(src) * 3 + seed) % 7) - 3);
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(size_t n) { WEAVE_CHECK_CUDA(cudaMalloc(&p, n == 0 ? 1 : n)); }
  ~DeviceBuffer() { cudaFree(p); }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};

}  // namespace

SelfTestReport Collective::self_test(std::size_t count) {
  Impl& m = *impl_;
  const int w = m.comm->world_size(), r = m.comm->rank();
  const CollectiveOp op = m.cfg.op;
  if (count == 0) count = std::min<size_t>(m.cfg.max_count, op == CollectiveOp::kAllGather ? 4099 : 2053);
  WEAVE_EXPECT_ARG(count >= 1 && count <= m.cfg.max_count, "self_test: count must be in 1..max_count");
  WEAVE_CHECK_CUDA(cudaSetDevice(m.comm->device()));
  const size_t esz = m.esz;
  const uint64_t seed = m.self_test_seed++;
  const size_t in_elems = op == CollectiveOp::kReduceScatter ? w * count : count;
  const size_t out_elems = op == CollectiveOp::kAllGather ? w * count : count;
  const size_t in_bytes = in_elems * esz, out_bytes = out_elems * esz;
  // The global element index of input element j of source s (reduce-scatter inputs hold every
  // rank's block; element j of block q is output element j - q*count of rank q).
  auto value = [&](int src, size_t j) -> float {
    return m.cfg.dtype == DType::kF32 ? fp32_value(src, j, seed) : bf16_value(src, j, seed);
  };
  std::vector<uint8_t> host_in(in_bytes);
  for (size_t j = 0; j < in_elems; ++j) {
    if (op == CollectiveOp::kAllGather) host_in[j] = ag_byte(r, j, seed);
    else if (m.cfg.dtype == DType::kF32) {
      const float f = value(r, j);
      std::memcpy(&host_in[j * 4], &f, 4);
    } else {
      const uint16_t b = ref::float_to_bf16(value(r, j));
      std::memcpy(&host_in[j * 2], &b, 2);
    }
  }

  SelfTestReport report;
  report.wrong_from_rank.assign(w, 0);
  std::ostringstream detail;
  auto verify = [&](const std::vector<uint8_t>& got, const char* pass) -> bool {
    int64_t first_bad = -1;
    for (size_t i = 0; i < out_elems; ++i) {
      if (op == CollectiveOp::kAllGather) {
        const int src = static_cast<int>(i / count);
        if (got[i] != ag_byte(src, i % count, seed)) {
          ++report.wrong_from_rank[src];
          if (first_bad < 0) first_bad = static_cast<int64_t>(i);
        }
        continue;
      }
      const size_t g = op == CollectiveOp::kReduceScatter ? r * count + i : i;  // index into inputs
      if (m.cfg.dtype == DType::kF32) {
        float f;
        std::memcpy(&f, &got[i * 4], 4);
        const double d = f;
        const bool integral = d >= 0 && d < 16777216.0 && d == static_cast<double>(static_cast<int64_t>(d));
        const int64_t v = integral ? static_cast<int64_t>(d) : -1;
        for (int s = 0; s < w; ++s)
          if (v < 0 || ((v >> (3 * s)) & 7) != digit(s, g, seed)) {
            ++report.wrong_from_rank[s];
            if (first_bad < 0) first_bad = static_cast<int64_t>(i);
          }
        if (v >= 0 && (v >> (3 * w)) != 0 && first_bad < 0) first_bad = static_cast<int64_t>(i);
      } else {
        uint16_t b;
        std::memcpy(&b, &got[i * 2], 2);
        float want = 0;
        for (int s = 0; s < w; ++s) want += value(s, g);
        if (ref::bf16_to_float(b) != want) {
          for (int s = 0; s < w; ++s) ++report.wrong_from_rank[s];  // a sum: no per-source attribution
          if (first_bad < 0) first_bad = static_cast<int64_t>(i);
        }
      }
    }
    if (first_bad >= 0 && detail.tellp() == 0)
      detail << "rank " << r << " " << pass << ": first wrong output element " << first_bad << " of " << out_elems;
    return first_bad < 0;
  };

  Stream stream;
  // Every rank finishes poisoning and uploading before any rank starts the pass. weave's own
  // transports would not need this (their credits order a peer's writes after this rank's earlier
  // stream work), but NCCL's symmetric kernels write into a peer's output without waiting for that
  // peer's earlier stream work, so an unsynchronised poison could land after NCCL's data.
  auto ready = [&] {
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream.s));
    m.comm->barrier();
  };
  // Runs the collective on buffers the caller has poisoned and filled, and checks the output.
  auto run_and_verify = [&](const void* in, void* out, const char* pass) -> bool {
    ready();
    run(in, out, count, stream.s);
    WEAVE_CHECK_CUDA(cudaStreamSynchronize(stream.s));  // device waits are bounded: this returns
    m.check();
    std::vector<uint8_t> got(out_bytes);
    WEAVE_CHECK_CUDA(cudaMemcpy(got.data(), out, out_bytes, cudaMemcpyDeviceToHost));
    return verify(got, pass);
  };
  auto upload_input = [&](void* dst) {
    WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst, host_in.data(), in_bytes, cudaMemcpyHostToDevice, stream.s));
  };
  auto run_pass = [&](const void* in, void* out, const char* pass) -> bool {
    WEAVE_CHECK_CUDA(cudaMemsetAsync(out, 0xFF, out_bytes, stream.s));
    upload_input(const_cast<void*>(in));
    return run_and_verify(in, out, pass);
  };
  {
    DeviceBuffer in(in_bytes), out(out_bytes);
    report.caller_buffers_ok = run_pass(in.p, out.p, "caller buffers");
  }
  const bool window_refused = op == CollectiveOp::kAllGather
                                  ? m.nccl_symmetric_defect(static_cast<char*>(window_output()) + r * count * esz,
                                                            window_output(), count)
                                  : m.nccl_symmetric_defect(window_input(), window_output(), count);
  if (window_refused) {
    report.window_buffers_ok = true;  // run() refuses this call on window buffers (kUnsupported)
    // (noted in the report's detail below)
  } else {
    char* wout = static_cast<char*>(window_output());
    switch (op) {
      case CollectiveOp::kAllGather: {
        // In-place: my block of the window output is the input; poison the rest only.
        char* mine = wout + r * count * esz;
        WEAVE_CHECK_CUDA(cudaMemsetAsync(wout, 0xFF, out_bytes, stream.s));
        upload_input(mine);
        report.window_buffers_ok = run_and_verify(mine, wout, "window buffers, in-place");
        break;
      }
      case CollectiveOp::kReduceScatter: report.window_buffers_ok = run_pass(window_input(), wout, "window buffers"); break;
      case CollectiveOp::kAllReduce: {
        // In-place in the window (the output starts as this rank's input, so it cannot be poisoned;
        // the fp32 digits still show every missing source).
        upload_input(wout);
        report.window_buffers_ok = run_and_verify(wout, wout, "window buffers, in-place");
        break;
      }
    }
  }
  bool ok = true;
  for (auto v : report.wrong_from_rank) ok &= v == 0;
  const auto all = m.comm->all_gather(ok ? 1 : 0, "the self-test outcome");
  report.ok = true;
  std::ostringstream failed;
  for (int s = 0; s < w; ++s)
    if (all[s] != 1) {
      report.ok = false;
      failed << (failed.tellp() > 0 ? "," : "") << s;
    }
  std::ostringstream os;
  os << describe() << ": " << count << (op == CollectiveOp::kAllGather ? " bytes" : " elements") << " per call, ";
  if (report.ok) os << "every source rank's values arrived intact on every rank";
  else os << "FAILED on rank(s) " << failed.str() << (detail.tellp() ? "; " + detail.str() : std::string());
  if (window_refused) os << " [window pass skipped: the nccl transport refuses window buffers of this size]";
  report.detail = os.str();
  return report;
}

void Collective::require_self_test(std::size_t count) {
  const SelfTestReport rep = self_test(count);
  WEAVE_EXPECT(rep.ok, Status::kInternal, "self_test: " << rep.detail);
}

}  // namespace weave
