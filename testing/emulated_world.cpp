#include "testing/emulated_world.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "common/cuda_owned.hpp"

namespace weave::bench {

// The W allocations of one window, freed together when the last rank's window is gone: as with
// an NCCL window (whose deregistration is collective), a rank never loses a peer's memory while
// it may still store into it, even when that peer left early (a test's peer that never arrives).
struct WindowSet {
  std::vector<void*> mem;
  ~WindowSet() {
    cudaDeviceSynchronize();  // no kernel of any rank still uses the memory
    for (void* p : mem)
      if (p) cudaFree(p);
  }
};

// A generation-counted rendezvous: every rank deposits a value for round g, the last to arrive
// completes the round; waiters give up after the timeout naming the ranks that did not arrive.
struct EmulatedWorld::Shared {
  int world = 1, device = 0;
  double timeout_s = 10;             // device waits (comm::Group::timeout_s)
  double rendezvous_timeout_s = 10;  // host rendezvous: all_gather, barrier, enqueue_lockstep
  std::mutex mu;
  std::condition_variable cv;
  uint64_t round = 0;  // the round being filled
  int arrived = 0;
  std::vector<uint64_t> values, last_values;
  std::vector<char> present;
  struct PendingSet {
    std::shared_ptr<WindowSet> set;
    int joined = 0;
  };
  std::map<uint64_t, PendingSet> window_sets;  // windows being made, by sequence number
  std::vector<uint64_t> lockstep_calls;  // enqueue_lockstep() calls made, per rank

  // Set by the first rendezvous that timed out: its round can never complete (the rank that gave
  // up is still counted in it), so every later rendezvous fails at once with this cause instead of
  // timing out again with a misleading list of missing ranks.
  std::string broken;

  // comm::Group::enqueue_lockstep: counts this rank's call, then waits until every rank has made
  // as many (bounded; never throws, never breaks the world: past the bound the caller goes on).
  void enqueue_lockstep(int rank) {
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t mine = ++lockstep_calls[rank];
    cv.notify_all();
    cv.wait_for(lock, std::chrono::duration<double>(rendezvous_timeout_s), [&] {
      return !broken.empty() || std::all_of(lockstep_calls.begin(), lockstep_calls.end(),
                                             [&](uint64_t n) { return n >= mine; });
    });
  }

  std::vector<uint64_t> all_gather(int rank, uint64_t value, std::string_view what) {
    std::unique_lock<std::mutex> lock(mu);
    WEAVE_EXPECT(broken.empty(), Status::kTimeout,
                 "emulated rank " << rank << ": " << what << " not attempted: the world is broken (" << broken << ")");
    const uint64_t my_round = round;
    values[rank] = value;
    present[rank] = 1;
    if (++arrived == world) {
      last_values = values;
      arrived = 0;
      std::fill(present.begin(), present.end(), 0);
      ++round;
      cv.notify_all();
      return last_values;
    }
    const bool done = cv.wait_for(lock, std::chrono::duration<double>(rendezvous_timeout_s),
                                  [&] { return round != my_round || !broken.empty(); });
    if (!done || round == my_round) {
      WEAVE_EXPECT(broken.empty(), Status::kTimeout,
                   "emulated rank " << rank << ": " << what << " abandoned: the world is broken (" << broken << ")");
      std::ostringstream missing;
      for (int r = 0; r < world; ++r)
        if (!present[r]) missing << (missing.tellp() > 0 ? "," : "") << r;
      std::ostringstream why;
      why << "rank " << rank << " waited " << rendezvous_timeout_s << " s in " << what << " for rank(s) " << missing.str();
      broken = why.str();
      cv.notify_all();
      WEAVE_EXPECT(false, Status::kTimeout, "emulated rank " << rank << ": waited " << rendezvous_timeout_s << " s in " << what
                                                            << " for rank(s) " << missing.str() << " (emulated world of "
                                                            << world << ")");
    }
    return last_values;
  }
};

namespace {

class EmulatedWindow final : public comm::OpWindow {
 public:
  EmulatedWindow(const WindowHandle& h, WindowLayout layout, std::shared_ptr<WindowSet> set) : set_(std::move(set)) {
    handle_ = h;
    layout_ = std::move(layout);
  }

 private:
  std::shared_ptr<WindowSet> set_;
};

class EmulatedRank final : public comm::Group {
 public:
  EmulatedRank(std::shared_ptr<EmulatedWorld::Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const noexcept override { return rank_; }
  int world_size() const noexcept override { return s_->world; }
  int device() const noexcept override { return s_->device; }
  double timeout_s() const noexcept override { return s_->timeout_s; }
  int lsa_team_size() const noexcept override { return s_->world; }
  int ranks_per_device() const noexcept override { return s_->world; }
  std::string describe() const override {
    return "emulated rank " + std::to_string(rank_) + "/" + std::to_string(s_->world) + " on GPU " +
           std::to_string(s_->device) + " (test harness, not NVLink)";
  }
  std::vector<uint64_t> all_gather(uint64_t value, std::string_view what) const override {
    return s_->all_gather(rank_, value, what);
  }
  void barrier() const override { (void)s_->all_gather(rank_, 0, "a barrier"); }
  void enqueue_lockstep() const override { s_->enqueue_lockstep(rank_); }
  std::shared_ptr<comm::OpWindow> make_window(WindowLayout layout) override {
    const uint64_t sizes[2] = {layout.hash(), layout.total_bytes()};
    agree(fnv1a64(sizes, sizeof(sizes)), "the window layout (" + std::to_string(layout.total_bytes()) + " bytes)");
    const size_t bytes = layout.total_bytes();
    void* mem = nullptr;
    std::string why;
    try {
      WEAVE_CHECK_CUDA(cudaSetDevice(s_->device));
      WEAVE_CHECK_CUDA(cudaMalloc(&mem, bytes));
      const OwnedStream st;  // destroyed on the error path too
      WEAVE_CHECK_CUDA(cudaMemsetAsync(mem, 0, bytes, st.s));
      comm::sync_stream_bounded(st.s, s_->timeout_s, "zeroing an emulated window");
    } catch (const std::exception& e) {
      why = e.what();
    }
    try {
      agree_ok(why.empty(), "allocating an emulated window of " + std::to_string(bytes) + " bytes", why);
    } catch (...) {
      if (mem) cudaFree(mem);
      throw;
    }
    const auto bases = all_gather(reinterpret_cast<uint64_t>(mem), "exchanging emulated window addresses");
    WindowHandle h;
    h.rank = rank_;
    h.world = s_->world;
    h.bytes = bytes;
    for (int r = 0; r < s_->world; ++r) h.base[r] = reinterpret_cast<char*>(bases[r]);
    // Join this window's set (the same make_window call on every rank: the same sequence number).
    std::shared_ptr<WindowSet> set;
    {
      std::lock_guard<std::mutex> lock(s_->mu);
      const uint64_t seq = windows_made_++;
      auto& slot = s_->window_sets[seq];
      if (!slot.set) {
        slot.set = std::make_shared<WindowSet>();
        slot.set->mem.assign(s_->world, nullptr);
      }
      slot.set->mem[rank_] = mem;
      set = slot.set;
      if (++slot.joined == s_->world) s_->window_sets.erase(seq);
    }
    barrier();  // nobody writes a window before every rank zeroed its own
    return std::make_shared<EmulatedWindow>(h, std::move(layout), std::move(set));
  }

 private:
  std::shared_ptr<EmulatedWorld::Shared> s_;
  int rank_;
  uint64_t windows_made_ = 0;
};

}  // namespace

EmulatedWorld::EmulatedWorld(int world, int device, double timeout_s, double rendezvous_timeout_s) : world_(world) {
  WEAVE_EXPECT_ARG(world >= 1 && world <= kMaxWorld, "EmulatedWorld: world must be in 1.." << kMaxWorld << ", got " << world);
  comm::expect_timeout_s(timeout_s, "EmulatedWorld: timeout_s");
  if (rendezvous_timeout_s != 0) comm::expect_timeout_s(rendezvous_timeout_s, "EmulatedWorld: rendezvous_timeout_s");
  shared_ = std::make_shared<Shared>();
  shared_->world = world;
  shared_->device = device;
  shared_->timeout_s = timeout_s;
  shared_->rendezvous_timeout_s = rendezvous_timeout_s != 0 ? rendezvous_timeout_s : timeout_s;
  shared_->values.assign(world, 0);
  shared_->present.assign(world, 0);
  shared_->lockstep_calls.assign(world, 0);
  for (int r = 0; r < world; ++r) ranks_.push_back(std::make_unique<EmulatedRank>(shared_, r));
}

EmulatedWorld::~EmulatedWorld() = default;

int EmulatedWorld::hardware_queues() {
  const char* v = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  const int n = v ? std::atoi(v) : 8;
  return n < 1 ? 8 : (n > 32 ? 32 : n);
}

bool EmulatedWorld::queue_budget_ok(int streams) { return streams <= hardware_queues(); }

std::string EmulatedWorld::copy_engine_unsupported_reason(int world) {
  if (world > 2)
    return "not run in the emulated world at W > 2: the ranks' copy streams share the GPU's hardware queues with peers' "
           "waiting kernels (false dependencies a multi-GPU run does not have)";
  const int streams = world * (world + 1);  // per rank: its own stream and a copy stream per peer
  if (!queue_budget_ok(streams))
    return "not run: " + std::to_string(streams) + " streams > " + std::to_string(hardware_queues()) +
           " hardware queues (CUDA_DEVICE_MAX_CONNECTIONS)";
  return "";
}

comm::Group& EmulatedWorld::rank(int r) const {
  WEAVE_EXPECT_ARG(r >= 0 && r < world_, "EmulatedWorld::rank: " << r << " not in [0, " << world_ << ")");
  return *ranks_[r];
}

void EmulatedWorld::run(const std::function<void(comm::Group&)>& fn) const {
  std::vector<std::exception_ptr> errors(world_);
  std::vector<std::thread> threads;
  for (int i = 0; i < world_; ++i)
    threads.emplace_back([&, i] {
      try {
        WEAVE_CHECK_CUDA(cudaSetDevice(shared_->device));
        fn(*ranks_[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  // One rank's failure usually makes the others time out at their next rendezvous: report every
  // rank's error, the ones that are not such timeouts first (they are the cause).
  std::ostringstream all;
  std::exception_ptr first, first_cause;
  Status cause_status = Status::kTimeout;
  int failed = 0;
  for (int i = 0; i < world_; ++i) {
    if (!errors[i]) continue;
    ++failed;
    if (!first) first = errors[i];
    try {
      std::rethrow_exception(errors[i]);
    } catch (const Error& e) {
      all << " [rank " << i << "] " << e.what();
      if (!first_cause && e.status() != Status::kTimeout) {
        first_cause = errors[i];
        cause_status = e.status();
      }
    } catch (const std::exception& e) {
      all << " [rank " << i << "] " << e.what();
      if (!first_cause) {
        first_cause = errors[i];
        cause_status = Status::kInternal;
      }
    }
  }
  if (failed == 0) return;
  if (failed == 1) std::rethrow_exception(first);
  throw Error(first_cause ? cause_status : Status::kTimeout, "EmulatedWorld::run", WEAVE_LOCATION,
              std::to_string(failed) + " ranks failed:" + all.str());
}

}  // namespace weave::bench
