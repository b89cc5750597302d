// Named regions of a symmetric window: which byte range holds which op's data slots, flags and
// credits. Several ops and shapes share one window by adding their regions under distinct names;
// the allocator guarantees no two regions overlap. Every rank must build the identical layout
// (same names, kinds, sizes, order): SymmetricWindow checks hash() across ranks at creation and
// every rank raises Error(kMismatch) when one differs. Host-only; a plain value type.
//
// Window layout convention (docs/comm.md, "window layout"): offsets grow in the order regions
// are added; each region starts on its alignment (default 256 bytes, data regions 4096) so 16-byte
// vector accesses and the NCCL window granularity are never split; total_bytes() is rounded up to
// NCCL_WIN_REQUIRED_ALIGNMENT (4096).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "weave/export.hpp"

namespace weave WEAVE_API {

enum class RegionKind : uint8_t {
  kData,     // payload slots peers write into or read from
  kFlags,    // arrival / ready flags (u32 epochs) written by peers, waited on locally
  kCredits,  // per-peer credits (u32 call epochs) written by peers, waited on locally
  kControl,  // local-only state (epoch counter, abort flag); never written by peers
};

std::string_view to_string(RegionKind kind) noexcept;

struct Region {
  std::string name;
  RegionKind kind = RegionKind::kData;
  std::size_t offset = 0;  // bytes from the window base, identical on every rank
  std::size_t bytes = 0;
  std::size_t end() const { return offset + bytes; }
};

class WindowLayout {
 public:
  static constexpr std::size_t kWindowAlign = 4096;  // NCCL_WIN_REQUIRED_ALIGNMENT

  // Appends a region. Throws Error(kInvalidArgument) naming the rule when `name` is empty or
  // already used, `bytes` is 0, or `align` is not a power of two >= 16.
  const Region& add(std::string name, RegionKind kind, std::size_t bytes, std::size_t align = 0);

  const Region* find(std::string_view name) const noexcept;
  // Like find, but throws Error(kInvalidArgument) listing the regions that do exist.
  const Region& at(std::string_view name) const;

  const std::vector<Region>& regions() const noexcept { return regions_; }
  std::size_t used_bytes() const noexcept { return cursor_; }
  std::size_t total_bytes() const noexcept;  // used_bytes rounded up to kWindowAlign (>= 4096)
  // FNV-1a over (name, kind, offset, bytes) of every region, in order.
  std::uint64_t hash() const noexcept;
  std::string describe() const;  // one line per region

 private:
  std::vector<Region> regions_;
  std::size_t cursor_ = 0;
};

// FNV-1a 64-bit, the hash used for every cross-rank configuration check.
std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t seed = 0xcbf29ce484222325ull) noexcept;

}  // namespace weave
