#include "comm_support.hpp"

#include <cstring>

#include <mutex>

#include "hopper/ptx/misc.cuh"
#include "testing/comm_values.hpp"
#include "weave/quant.hpp"

namespace weave::test {

namespace {

struct CommEnv : ::testing::Environment {
  std::vector<std::unique_ptr<Communicator>> comms, short_timeout;
  std::mutex mutex;
  void TearDown() override {
    short_timeout.clear();
    comms.clear();
  }
};
CommEnv* env() {
  static CommEnv* e = static_cast<CommEnv*>(::testing::AddGlobalTestEnvironment(new CommEnv));
  return e;
}
[[maybe_unused]] const bool registered = env() != nullptr;

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = weave::ptx::globaltimer_ns();
  while (weave::ptx::globaltimer_ns() - start < ns) {
  }
}

// One rank per visible Hopper GPU, up to 8.
std::vector<int> local_devices() {
  std::vector<int> devices;
  for (int d = 0; d < std::min(hopper_gpu_count(), 8); ++d) devices.push_back(d);
  return devices;
}

}  // namespace

const std::vector<std::unique_ptr<Communicator>>& local_comms() {
  CommEnv* e = env();
  std::lock_guard<std::mutex> lock(e->mutex);
  if (e->comms.empty()) e->comms = Communicator::create_local(local_devices());
  return e->comms;
}

int local_world() { return static_cast<int>(local_comms().size()); }

void for_each_rank(const std::function<void(Communicator&)>& fn) { run_per_rank(local_comms(), fn); }

void for_each_rank_short_timeout(const std::function<void(Communicator&)>& fn) {
  CommEnv* e = env();
  {
    std::lock_guard<std::mutex> lock(e->mutex);
    if (e->short_timeout.empty()) {
      CommOptions o;
      o.timeout_s = kShortTimeoutS;
      e->short_timeout = Communicator::create_local(local_devices(), o);
    }
  }
  run_per_rank(e->short_timeout, fn);
}

void spin_delay(uint64_t ns, cudaStream_t stream) { spin_kernel<<<1, 1, 0, stream>>>(ns); }

DevBuf::DevBuf(size_t n) : bytes(n) {
  if (cudaMalloc(&p, n == 0 ? 1 : n) != cudaSuccess) throw std::bad_alloc();
}
DevBuf::~DevBuf() { cudaFree(p); }

StreamHolder::StreamHolder() { cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); }
StreamHolder::~StreamHolder() { cudaStreamDestroy(s); }

// Hashed values (testing/comm_values.hpp says why not a linear form).
uint8_t byte_value(int src, size_t i, uint32_t call) { return bench::comm_test_byte(src, i, call); }
float small_value(int src, size_t i, uint32_t call) { return bench::comm_test_int(src, i, call); }

CollectiveConfig collective_config(CollectiveOp op, Transport t, Algorithm a, DType d, size_t max_count) {
  CollectiveConfig c;
  c.op = op;
  c.transport = t;
  c.algorithm = a;
  c.dtype = d;
  c.max_count = max_count;
  return c;
}

CallSizes call_sizes(CollectiveOp op, DType d, int world, size_t count) {
  CallSizes s;
  s.esz = op == CollectiveOp::kAllGather ? 1 : dtype_bytes(d);
  s.in_elems = op == CollectiveOp::kReduceScatter ? world * count : count;
  s.out_elems = op == CollectiveOp::kAllGather ? world * count : count;
  return s;
}

void encode_input(std::vector<uint8_t>& dst, CollectiveOp op, DType d, int rank, size_t elems, uint32_t variant) {
  const size_t esz = op == CollectiveOp::kAllGather ? 1 : dtype_bytes(d);
  dst.resize(elems * esz);
  for (size_t j = 0; j < elems; ++j) {
    if (op == CollectiveOp::kAllGather) {
      dst[j] = byte_value(rank, j, variant);
      continue;
    }
    const float f = small_value(rank, j, variant);
    if (d == DType::kF32) std::memcpy(&dst[j * 4], &f, 4);
    else {
      const uint16_t b = ref::float_to_bf16(f);  // exact: small integers
      std::memcpy(&dst[j * 2], &b, 2);
    }
  }
}

std::vector<uint8_t> expected_output(CollectiveOp op, DType d, int rank, int world, size_t count, uint32_t variant) {
  const CallSizes sz = call_sizes(op, d, world, count);
  std::vector<uint8_t> out(sz.out_bytes());
  for (size_t i = 0; i < sz.out_elems; ++i) {
    if (op == CollectiveOp::kAllGather) {
      out[i] = byte_value(static_cast<int>(i / count), i % count, variant);
      continue;
    }
    const size_t gi = op == CollectiveOp::kReduceScatter ? rank * count + i : i;
    float sum = 0;
    for (int q = 0; q < world; ++q) sum += small_value(q, gi, variant);  // exact: small integers
    if (d == DType::kF32) std::memcpy(&out[i * 4], &sum, 4);
    else {
      const uint16_t b = ref::float_to_bf16(sum);
      std::memcpy(&out[i * 2], &b, 2);
    }
  }
  return out;
}

}  // namespace weave::test
