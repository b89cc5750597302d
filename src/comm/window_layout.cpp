#include "weave/window_layout.hpp"

#include <sstream>

#include "common/check.hpp"

namespace weave {

std::string_view to_string(RegionKind kind) noexcept {
  switch (kind) {
    case RegionKind::kData: return "data";
    case RegionKind::kFlags: return "flags";
    case RegionKind::kCredits: return "credits";
    case RegionKind::kControl: return "control";
  }
  return "?";
}

std::uint64_t fnv1a64(const void* data, std::size_t bytes, std::uint64_t seed) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = seed;
  for (std::size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

const Region& WindowLayout::add(std::string name, RegionKind kind, std::size_t bytes, std::size_t align) {
  if (align == 0) align = kind == RegionKind::kData ? 4096 : 256;
  WEAVE_EXPECT_ARG(!name.empty(), "window region: name must not be empty");
  WEAVE_EXPECT_ARG(find(name) == nullptr,
                   "window region '" << name << "': name already used (each region needs its own name)");
  WEAVE_EXPECT_ARG(bytes > 0, "window region '" << name << "': bytes must be >= 1");
  WEAVE_EXPECT_ARG(align >= 16 && (align & (align - 1)) == 0,
                   "window region '" << name << "': align must be a power of two >= 16, got " << align);
  const std::size_t offset = (cursor_ + align - 1) / align * align;
  WEAVE_EXPECT_ARG(offset + bytes > offset, "window region '" << name << "': size overflows");
  regions_.push_back(Region{std::move(name), kind, offset, bytes});
  cursor_ = offset + bytes;
  return regions_.back();
}

const Region* WindowLayout::find(std::string_view name) const noexcept {
  for (const auto& r : regions_)
    if (r.name == name) return &r;
  return nullptr;
}

const Region& WindowLayout::at(std::string_view name) const {
  if (const Region* r = find(name)) return *r;
  std::ostringstream names;
  for (const auto& r : regions_) names << (names.tellp() > 0 ? ", " : "") << r.name;
  WEAVE_EXPECT_ARG(false, "window region '" << name << "' does not exist (regions: "
                                            << (regions_.empty() ? "none" : names.str()) << ")");
  return regions_.front();  // unreachable
}

std::size_t WindowLayout::total_bytes() const noexcept {
  const std::size_t used = cursor_ == 0 ? 1 : cursor_;
  return (used + kWindowAlign - 1) / kWindowAlign * kWindowAlign;
}

std::uint64_t WindowLayout::hash() const noexcept {
  std::uint64_t h = fnv1a64("weave.window.v1", 15);
  for (const auto& r : regions_) {
    h = fnv1a64(r.name.data(), r.name.size(), h);
    const std::uint64_t fields[3] = {static_cast<std::uint64_t>(r.kind), r.offset, r.bytes};
    h = fnv1a64(fields, sizeof(fields), h);
  }
  return h;
}

std::string WindowLayout::describe() const {
  std::ostringstream os;
  for (const auto& r : regions_)
    os << r.name << " (" << to_string(r.kind) << ") [" << r.offset << ", " << r.end() << ")\n";
  os << "total " << total_bytes() << " bytes";
  return os.str();
}

}  // namespace weave
