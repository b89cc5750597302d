// weave::Communicator: creation (wrap / adopt / one process many GPUs / one process per GPU), the
// cross-rank agreement checks every collective setup step runs first, and bounded host waits.
#include "weave/communicator.hpp"

#include <nccl_device.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "common/check.hpp"
#include "common/env.hpp"
#include "common/log.hpp"
#include "comm/group.hpp"
#include "comm/nccl_version.hpp"
#include "comm/timeout.hpp"
#include "weave/device.hpp"

namespace weave {

namespace {

struct DeviceGuard {
  int saved = -1;
  explicit DeviceGuard(int device) {
    WEAVE_CHECK_CUDA(cudaGetDevice(&saved));
    WEAVE_CHECK_CUDA(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (saved >= 0) cudaSetDevice(saved);
  }
};

}  // namespace

Communicator::Communicator(ncclComm_t comm, bool owned, const CommOptions& options)
    : comm_(comm), owned_(owned), timeout_s_(comm::resolve_timeout(options.timeout_s)), tag_(options.tag) {
  WEAVE_EXPECT_ARG(comm != nullptr, "Communicator: ncclComm_t must not be null");
  try {
    comm::require_matching_nccl();  // wrap/adopt; create* checked it before initialising NCCL
  } catch (...) {
    if (owned) ncclCommDestroy(comm);  // adopt took ownership; nothing else was set up yet
    throw;
  }
  try {
    WEAVE_CHECK_NCCL(ncclCommUserRank(comm_, &rank_));
    WEAVE_CHECK_NCCL(ncclCommCount(comm_, &world_));
    WEAVE_CHECK_NCCL(ncclCommCuDevice(comm_, &device_));
    WEAVE_CHECK_CUDA(cudaSetDevice(device_));
    lsa_size_ = ncclTeamLsa(comm_).nRanks;
    WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    WEAVE_CHECK_CUDA(cudaMalloc(&scratch_, 16 * static_cast<size_t>(world_)));
    // Every rank must agree on the options (tag) and the library build before anything else.
    std::string id = std::string("weave.comm.v1|") + WEAVE_NCCL_BUILD_VERSION + "|" +
                     std::to_string(WEAVE_ENABLE_CE) + std::to_string(WEAVE_ENABLE_LSA) +
                     std::to_string(WEAVE_ENABLE_NCCL_TRANSPORT) + "|" + tag_;
    agree(fnv1a64(id.data(), id.size()), "communicator options (tag, weave build)");
  } catch (...) {
    release();
    throw;
  }
}

// A broken communicator may have a collective stuck on the GPU: an owned one is aborted (never
// destroyed) before its scratch is freed; a caller-owned one keeps its scratch (freeing it would
// wait for the stuck kernel), and the caller must abort it.
void Communicator::release() noexcept {
  cudaSetDevice(device_);
  if (owned_ && comm_) {
    if (broken_) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  comm_ = nullptr;
  if (!broken_ || owned_) {
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  scratch_ = nullptr;
  stream_ = nullptr;
}

Communicator::~Communicator() { release(); }

std::unique_ptr<Communicator> Communicator::wrap(ncclComm_t comm, const CommOptions& options) {
  return std::unique_ptr<Communicator>(new Communicator(comm, false, options));
}

std::unique_ptr<Communicator> Communicator::adopt(ncclComm_t comm, const CommOptions& options) {
  return std::unique_ptr<Communicator>(new Communicator(comm, true, options));
}

std::vector<std::unique_ptr<Communicator>> Communicator::create_local(const std::vector<int>& devices,
                                                                      const CommOptions& options) {
  WEAVE_EXPECT_ARG(!devices.empty(), "create_local: devices must not be empty");
  comm::require_matching_nccl();
  for (int d : devices) require_hopper(d);  // else NCCL reports a missing GPU as "unhandled cuda error"
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  WEAVE_CHECK_NCCL(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<Communicator>> out(devices.size());
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < devices.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        cudaSetDevice(devices[i]);
        out[i] = adopt(comms[i], options);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);  // the adopted comms are released by the constructors
  return out;
}

std::unique_ptr<Communicator> Communicator::create(const ncclUniqueId& id, int rank, int world, int device,
                                                   const CommOptions& options) {
  WEAVE_EXPECT_ARG(world >= 1, "create: world must be >= 1, got " << world);
  WEAVE_EXPECT_ARG(rank >= 0 && rank < world, "create: rank must be in [0, " << world << "), got " << rank);
  comm::require_matching_nccl();
  require_hopper(device);
  WEAVE_CHECK_CUDA(cudaSetDevice(device));
  ncclComm_t comm = nullptr;
  WEAVE_CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));
  return adopt(comm, options);
}

ncclUniqueId Communicator::new_unique_id() {
  ncclUniqueId id;
  WEAVE_CHECK_NCCL(ncclGetUniqueId(&id));
  return id;
}

void Communicator::wait_stream(const char* what) const {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(20);
  while (true) {
    cudaError_t st = cudaStreamQuery(stream_);
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) WEAVE_CHECK_CUDA(st);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s_) {
      broken_ = true;
      WEAVE_EXPECT(false, Status::kTimeout,
                   "rank " << rank_ << " of " << world_ << ": waited " << waited << " s for " << what
                           << "; a peer rank did not join (it failed before this collective step, or the "
                              "ranks call collective setup in a different order). The communicator is "
                              "now unusable (timeout from WEAVE_COMM_TIMEOUT_S / CommOptions::timeout_s)");
    }
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(2)) pause *= 2;
  }
}

std::vector<std::uint64_t> Communicator::all_gather(std::uint64_t value, std::string_view what) const {
  WEAVE_EXPECT(!broken_, Status::kUnavailable,
               "rank " << rank_ << ": communicator is broken by an earlier timeout; create a new one");
  DeviceGuard guard(device_);
  auto* slots = static_cast<std::uint64_t*>(scratch_);
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(slots + rank_, &value, sizeof(value), cudaMemcpyHostToDevice, stream_));
  WEAVE_CHECK_NCCL(ncclAllGather(slots + rank_, slots, sizeof(value), ncclUint8, comm_, stream_));
  wait_stream(std::string(what).c_str());
  std::vector<std::uint64_t> all(static_cast<size_t>(world_));
  WEAVE_CHECK_CUDA(cudaMemcpy(all.data(), slots, all.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost));
  return all;
}

void Communicator::agree(std::uint64_t hash, std::string_view what) const {
  comm::check_agreement(all_gather(hash, "the configuration check of " + std::string(what)), rank_, what);
}

void Communicator::agree_ok(bool ok, std::string_view what, const std::string& why) const {
  comm::check_outcomes(all_gather(ok ? 1 : 0, "the outcome of " + std::string(what)), ok, rank_, what, why);
}

void Communicator::barrier() const {
  WEAVE_EXPECT(!broken_, Status::kUnavailable,
               "rank " << rank_ << ": communicator is broken by an earlier timeout; create a new one");
  DeviceGuard guard(device_);
  auto* word = static_cast<float*>(scratch_);
  WEAVE_CHECK_NCCL(ncclAllReduce(word, word, 1, ncclFloat32, ncclSum, comm_, stream_));
  wait_stream("a barrier");
}

std::vector<TransportAvailability> Communicator::transports() const {
  auto out = transport_availability({device_});
  for (auto& a : out) {
    if (!a.available || a.transport == Transport::kNccl) continue;
    if (lsa_size_ != world_) {
      a.available = false;
      a.reason = "ranks not all in one NVLink domain: NCCL's load/store (LSA) team of rank " +
                 std::to_string(rank_) + " has " + std::to_string(lsa_size_) + " of " +
                 std::to_string(world_) + " ranks";
    }
  }
  return out;
}

void Communicator::require(Transport t) const {
  for (const auto& a : transports())
    if (a.transport == t)
      WEAVE_EXPECT(a.available, Status::kUnavailable,
                   "rank " << rank_ << ": transport '" << to_string(t) << "' requested but unavailable: " << a.reason);
}

void run_per_rank(const std::vector<std::unique_ptr<Communicator>>& comms,
                  const std::function<void(Communicator&)>& fn) {
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < comms.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        WEAVE_CHECK_CUDA(cudaSetDevice(comms[i]->device()));
        fn(*comms[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

ncclUniqueId unique_id_via_file(const std::string& path, int rank, double timeout_s) {
  WEAVE_EXPECT_ARG(!path.empty(), "unique_id_via_file: path must not be empty");
  comm::expect_timeout_s(timeout_s, "unique_id_via_file: timeout_s");
  ncclUniqueId id;
  if (rank == 0) {
    id = Communicator::new_unique_id();
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      WEAVE_EXPECT(f.good(), Status::kUnavailable, "unique_id_via_file: cannot write '" << tmp << "'");
      f.write(id.internal, sizeof(id.internal));
      WEAVE_EXPECT(f.good(), Status::kUnavailable, "unique_id_via_file: short write to '" << tmp << "'");
    }
    WEAVE_EXPECT(std::rename(tmp.c_str(), path.c_str()) == 0, Status::kUnavailable,
                 "unique_id_via_file: cannot rename '" << tmp << "' to '" << path << "'");
    return id;
  }
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    std::ifstream f(path, std::ios::binary);
    if (f.good()) {
      f.read(id.internal, sizeof(id.internal));
      if (f.gcount() == static_cast<std::streamsize>(sizeof(id.internal))) return id;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    WEAVE_EXPECT(waited <= timeout_s, Status::kTimeout,
                 "rank " << rank << ": waited " << waited << " s for rank 0 to write the NCCL unique id to '"
                         << path << "'");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace weave
