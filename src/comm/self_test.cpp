// Collective::self_test: moves known per-rank values through the real path of the op (its own
// transport, algorithm and kernels) and checks what arrived from each source rank, so a transport
// that silently moves nothing cannot pass (docs/REFERENCE requirement 1).
//
// Values and the check: comm/self_test_values (pure, CPU-tested with planted faults): every value
// hashes (source, index, seed), so misplaced, missing or untouched data shows. Two passes:
// caller-style buffers (cudaMalloc; staged path) and the op's window buffers (zero-copy; in-place
// for all-gather and all-reduce). Outputs are poisoned (0xFF) first.
#include <sstream>

#include "comm/collective_impl.hpp"
#include "comm/self_test_values.hpp"
#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"

namespace weave {

SelfTestReport Collective::self_test(std::size_t count) {
  Impl& m = *impl_;
  const int w = m.group->world_size(), r = m.group->rank();
  const CollectiveOp op = m.cfg.op;
  if (count == 0) count = std::min<size_t>(m.cfg.max_count, op == CollectiveOp::kAllGather ? 4099 : 2053);
  WEAVE_EXPECT_ARG(count >= 1 && count <= m.cfg.max_count, "self_test: count must be in 1..max_count");
  WEAVE_CHECK_CUDA(cudaSetDevice(m.group->device()));
  const size_t esz = m.esz;
  const comm::SelfTestShape shape{.op = op, .dtype = m.cfg.dtype, .world = w, .rank = r, .count = count,
                                  .seed = m.self_test_seed++};
  const size_t in_bytes = comm::self_test_in_elems(shape) * esz, out_bytes = comm::self_test_out_elems(shape) * esz;
  WEAVE_EXPECT(esz == comm::self_test_elem_bytes(shape), Status::kInternal,
               "self_test: element size " << esz << " does not match the self-test values' "
                                          << comm::self_test_elem_bytes(shape));
  // The negative-control hook sends the previous seed's values from one source: every rank must
  // then report that source's data wrong.
  comm::SelfTestShape sent = shape;
  if (m.self_test_stale_source == r) sent.seed -= 1;
  const std::vector<uint8_t> host_in = comm::self_test_input(sent);

  SelfTestReport report;
  report.wrong_from_rank.assign(w, 0);
  std::ostringstream detail;
  auto verify = [&](const std::vector<uint8_t>& got, const char* pass) -> bool {
    const comm::SelfTestCheck c = comm::self_test_verify(shape, got);
    for (int src = 0; src < w; ++src) report.wrong_from_rank[src] += c.wrong_from_rank[src];
    if (!c.ok() && detail.tellp() == 0)
      detail << "rank " << r << " " << pass << ": first wrong output element " << c.first_wrong << " of "
             << comm::self_test_out_elems(shape);
    return c.ok();
  };

  OwnedStream stream;
  // Every rank finishes poisoning and uploading before any rank starts the pass. weave's own
  // transports would not need this (their credits order a peer's writes after this rank's earlier
  // stream work), but NCCL's symmetric kernels write into a peer's output without waiting for that
  // peer's earlier stream work, so an unsynchronised poison could land after NCCL's data.
  auto ready = [&] {
    comm::sync_stream_bounded(stream.s, m.group->timeout_s(), "self_test: poisoning and uploading the inputs");
    m.group->barrier();
  };
  // Runs the collective on buffers the caller has poisoned and filled, and checks the output.
  auto run_and_verify = [&](const void* in, void* out, const char* pass) -> bool {
    ready();
    run(in, out, count, stream.s);
    comm::sync_stream_bounded(stream.s, m.group->timeout_s(),
                              std::string("self_test: the ") + pass + " pass of " + describe());
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
    OwnedDeviceMemory in(in_bytes), out(out_bytes);
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
  bool ok = report.caller_buffers_ok && report.window_buffers_ok;
  for (auto v : report.wrong_from_rank) ok &= v == 0;
  const std::string failed = m.group->failed_ranks(ok, "the self-test outcome");
  report.ok = failed.empty();
  std::ostringstream os;
  os << describe() << ": " << count << (op == CollectiveOp::kAllGather ? " bytes" : " elements") << " per call, ";
  if (report.ok) os << "every source rank's values arrived intact on every rank";
  else os << "FAILED on rank(s) " << failed << (detail.tellp() ? "; " + detail.str() : std::string());
  if (window_refused) os << " [window pass skipped: the nccl transport refuses window buffers of this size]";
  report.detail = os.str();
  return report;
}

void Collective::require_self_test(std::size_t count) {
  const SelfTestReport rep = self_test(count);
  WEAVE_EXPECT(rep.ok, Status::kInternal, "self_test: " << rep.detail);
}

}  // namespace weave
