#include "fused/weights_fingerprint.hpp"

#include "common/check.hpp"
#include "common/hash.hpp"
#include "weave/types.hpp"

namespace weave::fused {

namespace {

// One block per row (grid-strided): lanes stride the row's bytes (coalesced), each adds the hash
// of (row, column, byte); the block's sums meet in one 64-bit atomic add (addition mod 2^64 is
// commutative, so the result does not depend on the order).
__global__ void fingerprint_kernel(const uint8_t* p, int64_t rows, int64_t row_bytes, int64_t ld_bytes,
                                   unsigned long long* out) {
  uint64_t h = 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint8_t* row = p + r * ld_bytes;
    for (int64_t c = threadIdx.x; c < row_bytes; c += blockDim.x)
      h += mix64((static_cast<uint64_t>(r) << 32 ^ static_cast<uint64_t>(c)) * 0x9E3779B97F4A7C15ull ^ row[c]);
  }
  for (int off = 16; off > 0; off /= 2) h += __shfl_xor_sync(0xffffffffu, h, off);
  if (threadIdx.x % 32 == 0 && h != 0) atomicAdd(out, static_cast<unsigned long long>(h));
}

__global__ void seed_kernel(unsigned long long* out, uint64_t seed) { *out = seed; }

}  // namespace

void enqueue_fingerprint(const TensorView& t, std::uint64_t* device_out, cudaStream_t stream) {
  WEAVE_EXPECT_ARG(t.rank == 2 && t.device >= 0, "fingerprint: a rank-2 device view is needed (got " << t.describe() << ")");
  const int64_t esz = static_cast<int64_t>(dtype_bytes(t.dtype));
  const int64_t rows = t.rows(), row_bytes = t.cols() * esz, ld_bytes = t.ld() * esz;
  // The shape and dtype start the sum, so views of the same bytes with other shapes differ.
  const uint64_t seed = (static_cast<uint64_t>(rows) * 0x100000001B3ull) ^ (static_cast<uint64_t>(t.cols()) << 20) ^
                        static_cast<uint64_t>(t.dtype);
  auto* out = reinterpret_cast<unsigned long long*>(device_out);
  seed_kernel<<<1, 1, 0, stream>>>(out, seed);
  if (rows > 0 && row_bytes > 0)
    fingerprint_kernel<<<static_cast<unsigned>(rows < 4096 ? rows : 4096), 256, 0, stream>>>(
        static_cast<const uint8_t*>(t.data), rows, row_bytes, ld_bytes, out);
  WEAVE_CHECK_LAUNCH();
}

}  // namespace weave::fused
