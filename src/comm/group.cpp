// comm::Group's shared checks and the NCCL-backed group (weave::Communicator + SymmetricWindow).
#include "comm/group.hpp"

#include <sstream>

#include "common/check.hpp"
#include "weave/communicator.hpp"

namespace weave::comm {

char* OpWindow::peer(int r) const {
  WEAVE_EXPECT_ARG(r >= 0 && r < handle_.world, "window: rank " << r << " not in [0, " << handle_.world << ")");
  WEAVE_EXPECT(handle_.base[r] != nullptr, Status::kUnavailable,
               "rank " << handle_.rank << ": rank " << r << "'s window is not mapped here (not in one NVLink domain)");
  return handle_.base[r];
}

bool OpWindow::contains(const void* p, std::size_t n) const noexcept {
  const auto* c = static_cast<const char*>(p);
  return c >= local() && n <= bytes() && c - local() <= static_cast<std::ptrdiff_t>(bytes() - n);
}

ncclComm_t Group::nccl() const noexcept {
  Communicator* c = communicator();
  return c ? c->nccl() : nullptr;
}

void check_agreement(const std::vector<std::uint64_t>& all, int rank, std::string_view what) {
  bool same = true;
  for (auto h : all) same &= h == all[0];
  if (same) return;
  std::ostringstream os;
  os << "rank " << rank << ": ranks disagree on " << what << " (hash per rank:";
  for (size_t r = 0; r < all.size(); ++r) os << " " << r << "=" << std::hex << all[r] << std::dec;
  os << "); every rank must create the same communicator options, window layouts and ops in the same order";
  throw Error(Status::kMismatch, "", WEAVE_LOCATION, os.str());
}

namespace {
// "1,3": the ranks whose gathered outcome is not 1.
std::string ranks_not_ok(const std::vector<std::uint64_t>& all) {
  std::ostringstream failed;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != 1) failed << (failed.tellp() > 0 ? "," : "") << r;
  return failed.str();
}
}  // namespace

void check_outcomes(const std::vector<std::uint64_t>& all, bool ok, int rank, std::string_view what,
                    const std::string& why) {
  const std::string failed = ranks_not_ok(all);
  if (failed.empty()) return;
  if (!ok) WEAVE_EXPECT(false, Status::kUnavailable, "rank " << rank << ": " << what << " failed: " << why);
  WEAVE_EXPECT(false, Status::kUnavailable,
               "rank " << rank << ": " << what << " failed on rank(s) " << failed
                       << "; this rank released its part and raises too");
}

void Group::agree(std::uint64_t hash, std::string_view what) const {
  check_agreement(all_gather(hash, "the configuration check of " + std::string(what)), rank(), what);
}

std::string Group::failed_ranks(bool ok, std::string_view what) const {
  return ranks_not_ok(all_gather(ok ? 1 : 0, what));
}

void Group::agree_ok(bool ok, std::string_view what, const std::string& why) const {
  check_outcomes(all_gather(ok ? 1 : 0, "the outcome of " + std::string(what)), ok, rank(), what, why);
}

namespace {

class NcclWindow final : public OpWindow {
 public:
  NcclWindow(Communicator& c, WindowLayout layout) : sym_(std::make_unique<SymmetricWindow>(c, layout)) {
    handle_ = sym_->handle();
    layout_ = std::move(layout);
  }
  const SymmetricWindow* symmetric() const noexcept override { return sym_.get(); }

 private:
  std::unique_ptr<SymmetricWindow> sym_;
};

class NcclGroup final : public Group {
 public:
  explicit NcclGroup(Communicator& c) : c_(&c) {}
  int rank() const noexcept override { return c_->rank(); }
  int world_size() const noexcept override { return c_->world_size(); }
  int device() const noexcept override { return c_->device(); }
  double timeout_s() const noexcept override { return c_->timeout_s(); }
  int lsa_team_size() const noexcept override { return c_->lsa_team_size(); }
  Communicator* communicator() const noexcept override { return c_; }
  const void* call_order_key() const noexcept override { return c_; }
  std::string describe() const override {
    return "nccl rank " + std::to_string(rank()) + "/" + std::to_string(world_size()) + " on GPU " +
           std::to_string(device());
  }
  std::vector<std::uint64_t> all_gather(std::uint64_t value, std::string_view what) const override {
    return c_->all_gather(value, what);
  }
  void barrier() const override { c_->barrier(); }
  std::shared_ptr<OpWindow> make_window(WindowLayout layout) override {
    return std::make_shared<NcclWindow>(*c_, std::move(layout));
  }

 private:
  Communicator* c_;
};

}  // namespace

std::unique_ptr<Group> nccl_group(Communicator& comm) { return std::make_unique<NcclGroup>(comm); }

}  // namespace weave::comm
