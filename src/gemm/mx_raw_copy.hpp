// Which bytes the mxfp8 raw-scale staging reads (ScaleMx32<kRaw>::copy_raw_row), as a pure
// function so the CPU tests can prove it never reads past a row's last needed byte (and so never
// past the scale tensor's end). A row's 4-group chunk starts at byte offset `off` from the
// (4-byte aligned) tensor base and holds `need` (0..4) bytes; cp.async copies aligned 4-byte words,
// so the chunk is covered by the words at word_off and word_off + 4, of which only the first n0
// and n1 bytes are read (the rest of each destination word is zero-filled).
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define WEAVE_MX_HD __host__ __device__
#else
#define WEAVE_MX_HD
#endif

namespace weave::gemm {

struct RawCopyExtent {
  int64_t word_off = 0;  // offset of the first aligned word (multiple of 4, <= off)
  uint32_t n0 = 0, n1 = 0;  // bytes read from the first and the second word
};

WEAVE_MX_HD inline RawCopyExtent raw_copy_extent(int64_t off, uint32_t need) {
  RawCopyExtent e;
  e.word_off = off & ~int64_t{3};
  const uint32_t span = need == 0 ? 0u : static_cast<uint32_t>(off & 3) + need;  // bytes of the 8 read
  e.n0 = span < 4u ? span : 4u;
  e.n1 = span > 4u ? span - 4u : 0u;
  return e;
}

}  // namespace weave::gemm

#undef WEAVE_MX_HD
