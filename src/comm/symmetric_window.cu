// SymmetricWindow: NCCL symmetric memory, zeroed, with an LSA-barrier device communicator and a
// host table of every rank's window address as mapped on this GPU.
//
// Creation order (each step agreed across ranks before the next, so a failure on one rank makes
// every rank release what it made and raise, instead of leaving peers blocked in a collective):
//   1. layout hash      (kMismatch when ranks differ)
//   2. ncclMemAlloc     (local) + cudaMemset 0 + sync            -> agree_ok
//   3. ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) (collective) -> agree_ok
//   4. ncclDevCommCreate(lsaBarrierCount)               (collective) -> agree_ok
//   5. peer table: ncclGetLsaPointer(win, 0, i) in a one-thread kernel, mapped to world ranks
//   6. barrier (no rank uses the window before every rank has zeroed and registered it)
// Release is the reverse (release()), run by the destructor and by a constructor that throws.
#include <nccl_device.h>

#include <memory>

#include "comm/timeout.hpp"
#include "common/check.hpp"
#include "weave/communicator.hpp"

namespace weave {

namespace {

__global__ void lsa_pointers_kernel(ncclWindow_t win, int lsa_size, char** out) {
  for (int i = 0; i < lsa_size; ++i) out[i] = static_cast<char*>(ncclGetLsaPointer(win, 0, i));
}

std::string what_of(const std::exception& e) { return e.what(); }

}  // namespace

SymmetricWindow::SymmetricWindow(Communicator& comm, WindowLayout layout)
    : comm_(&comm), layout_(std::move(layout)), dev_comm_(std::make_unique<ncclDevComm>()) {
  WEAVE_EXPECT_ARG(!layout_.regions().empty(), "SymmetricWindow: the layout has no regions");
  bytes_ = layout_.total_bytes();
  const int rank = comm.rank(), world = comm.world_size();
  WEAVE_EXPECT_ARG(world <= kMaxWorld, "SymmetricWindow: world size " << world << " exceeds " << kMaxWorld);
  WEAVE_CHECK_CUDA(cudaSetDevice(comm.device()));
  const std::uint64_t sizes[2] = {layout_.hash(), bytes_};
  comm.agree(fnv1a64(sizes, sizeof(sizes)), "the symmetric window layout (" + std::to_string(bytes_) + " bytes)");
  try {
    // 2. allocate and zero (stale flags from a previous owner of this memory would pass waits).
    bool ok = true;
    std::string why;
    try {
      WEAVE_CHECK_NCCL(ncclMemAlloc(&mem_, bytes_));
      // Zeroed on a stream of its own and waited for with the communicator's timeout (a bare
      // device synchronisation would wait on every other stream's work too, without a bound).
      cudaStream_t zero_stream = nullptr;
      WEAVE_CHECK_CUDA(cudaStreamCreateWithFlags(&zero_stream, cudaStreamNonBlocking));
      try {
        WEAVE_CHECK_CUDA(cudaMemsetAsync(mem_, 0, bytes_, zero_stream));
        comm::sync_stream_bounded(zero_stream, comm.timeout_s(),
                                  "SymmetricWindow: zeroing the " + std::to_string(bytes_) + "-byte window");
      } catch (...) {
        cudaStreamDestroy(zero_stream);
        throw;
      }
      WEAVE_CHECK_CUDA(cudaStreamDestroy(zero_stream));
    } catch (const std::exception& e) {
      ok = false;
      why = what_of(e);
    }
    comm.agree_ok(ok, "ncclMemAlloc of the symmetric window (" + std::to_string(bytes_) + " bytes)", why);
    // 3. register (collective).
    try {
      WEAVE_CHECK_NCCL(ncclCommWindowRegister(comm.nccl(), mem_, bytes_, &win_, NCCL_WIN_COLL_SYMMETRIC));
    } catch (const std::exception& e) {
      ok = false;
      why = what_of(e);
      win_ = nullptr;
    }
    comm.agree_ok(ok, "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)", why);
    // 4. device communicator with LSA barriers (for fused kernels that want NCCL's barrier).
    try {
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER  // NCCL >= 2.29 refuses requirements without it
      ncclDevCommRequirements reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#else
      ncclDevCommRequirements reqs{};
#endif
      reqs.lsaBarrierCount = kLsaBarriers;
      WEAVE_CHECK_NCCL(ncclDevCommCreate(comm.nccl(), &reqs, dev_comm_.get()));
      dev_comm_created_ = true;
    } catch (const std::exception& e) {
      ok = false;
      why = what_of(e);
    }
    comm.agree_ok(ok, "ncclDevCommCreate(lsaBarrierCount=" + std::to_string(kLsaBarriers) + ")", why);
    // 5. peer table. Ranks outside this rank's LSA team stay null (ce/lsa refuse to run then).
    handle_.rank = rank;
    handle_.world = world;
    handle_.bytes = bytes_;
    handle_.nccl_window = win_;
    const ncclTeam_t lsa = ncclTeamLsa(comm.nccl());
    char** dev_ptrs = nullptr;
    WEAVE_CHECK_CUDA(cudaMalloc(&dev_ptrs, sizeof(char*) * kMaxWorld));
    std::unique_ptr<char*, void (*)(char**)> holder(dev_ptrs, [](char** p) { cudaFree(p); });
    lsa_pointers_kernel<<<1, 1>>>(win_, lsa.nRanks, dev_ptrs);
    WEAVE_CHECK_LAUNCH();
    char* host_ptrs[kMaxWorld] = {};
    WEAVE_CHECK_CUDA(cudaMemcpy(host_ptrs, dev_ptrs, sizeof(char*) * lsa.nRanks, cudaMemcpyDeviceToHost));
    for (int i = 0; i < lsa.nRanks; ++i) {
      const int world_rank = ncclTeamRankToWorld(comm.nccl(), lsa, i);
      if (world_rank >= 0 && world_rank < world) handle_.base[world_rank] = host_ptrs[i];
    }
    // Local accesses use the allocation's own address (the one callers hold); it maps the same
    // memory as NCCL's flat LSA address for this rank.
    handle_.base[rank] = static_cast<char*>(mem_);
    // 6. nobody touches the window before everyone has zeroed and registered it.
    comm.barrier();
  } catch (...) {
    release();
    throw;
  }
}

void SymmetricWindow::release() noexcept {
  // After a host-side timeout an NCCL kernel may be stuck: synchronizing or deregistering would
  // hang, so the window is left for ncclCommAbort to reclaim.
  if (comm_->broken()) return;
  cudaSetDevice(comm_->device());
  // No kernel may still use the window. Unbounded on purpose: a destructor cannot raise, and every
  // weave kernel's waits are bounded (they time out and exit), so this returns unless a foreign
  // kernel hangs; after a host-side timeout (broken(), above) it is skipped altogether.
  if (mem_) cudaDeviceSynchronize();
  if (dev_comm_created_) ncclDevCommDestroy(comm_->nccl(), dev_comm_.get());
  dev_comm_created_ = false;
  if (win_) ncclCommWindowDeregister(comm_->nccl(), win_);
  win_ = nullptr;
  if (mem_) ncclMemFree(mem_);
  mem_ = nullptr;
}

SymmetricWindow::~SymmetricWindow() { release(); }

char* SymmetricWindow::peer(int r) const {
  WEAVE_EXPECT_ARG(r >= 0 && r < handle_.world, "SymmetricWindow::peer: rank " << r << " not in [0, " << handle_.world << ")");
  WEAVE_EXPECT(handle_.base[r] != nullptr, Status::kUnavailable,
               "rank " << handle_.rank << ": rank " << r << "'s window is not mapped here (not in this rank's NVLink/LSA team)");
  return handle_.base[r];
}

char* SymmetricWindow::region(std::string_view name) const { return local() + layout_.at(name).offset; }

bool SymmetricWindow::contains(const void* p, std::size_t bytes) const noexcept {
  const auto* c = static_cast<const char*>(p);
  return c >= local() && bytes <= bytes_ && c - local() <= static_cast<std::ptrdiff_t>(bytes_ - bytes);
}

}  // namespace weave
