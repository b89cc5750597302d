// Deterministic test inputs: xoshiro256** seeded through splitmix64 (Blackman & Vigna), so a
// seed gives the same numbers on every platform and standard library.
#include <cmath>
#include <numbers>

#include "common/check.hpp"
#include "weave/reference.hpp"

namespace weave::ref {

namespace {
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

Random::Random(uint64_t seed) {
  uint64_t state = seed;
  for (auto& s : s_) s = splitmix64(state);  // never all zero
}

uint64_t Random::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Random::uniform(float lo, float hi) {
  WEAVE_EXPECT_ARG(std::isfinite(lo) && std::isfinite(hi) && lo <= hi,
                   "arguments 'lo', 'hi': must be finite with lo <= hi, got [" << lo << ", " << hi << "]");
  const double u = static_cast<double>(next() >> 11) * 0x1p-53;  // [0, 1)
  const auto x = static_cast<float>(lo + (static_cast<double>(hi) - lo) * u);
  return x < hi ? x : lo;  // rounding to fp32 can reach hi; keep the interval half-open
}

float Random::normal() {
  // Box-Muller; u1 in (0, 1] keeps log finite.
  const double u1 = static_cast<double>((next() >> 11) + 1) * 0x1p-53;
  const double u2 = static_cast<double>(next() >> 11) * 0x1p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

int Random::integer(int lo, int hi) {
  WEAVE_EXPECT_ARG(lo <= hi, "arguments 'lo', 'hi': must have lo <= hi, got [" << lo << ", " << hi << "]");
  const auto span = static_cast<uint64_t>(static_cast<int64_t>(hi) - lo) + 1;
  // Multiply-shift (Lemire): bias <= span / 2^64, far below anything a test can see.
  const auto offset = static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * span) >> 64);
  return static_cast<int>(lo + static_cast<int64_t>(offset));
}

std::vector<float> random_normal(Random& rng, int64_t count, float stddev) {
  WEAVE_EXPECT_ARG(count >= 0, "argument 'count': must be >= 0, got " << count);
  WEAVE_EXPECT_ARG(std::isfinite(stddev) && stddev >= 0,
                   "argument 'stddev': must be finite and >= 0, got " << stddev);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = rng.normal() * stddev;
  return v;
}

std::vector<float> random_integers(Random& rng, int64_t count, int range) {
  WEAVE_EXPECT_ARG(count >= 0, "argument 'count': must be >= 0, got " << count);
  WEAVE_EXPECT_ARG(range >= 0, "argument 'range': must be >= 0, got " << range);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = static_cast<float>(rng.integer(-range, range));
  return v;
}

}  // namespace weave::ref
