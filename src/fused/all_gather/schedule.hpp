// GemmAllGather's chunks (host and device; the CPU tests check exactly what the kernel runs).
// A rank's M rows are m_blocks = ceil(M / block_m) row blocks, grouped into chunks of
// `per` consecutive row blocks (the last possibly shorter, none empty). Every chunk has one tile
// counter on the sender and one arrival flag per source on each receiver. A tile is stored by
// the two consumer warpgroups of its CTA, each counting its half, so a chunk is complete after
// 2 x (its row blocks) x n_blocks counts.
#pragma once
#include <cstdint>

#include "comm/protocol.hpp"

namespace weave::fused {

struct AgChunks {
  int m_blocks = 0, n_blocks = 0;
  int per = 1;     // row blocks per chunk
  int chunks = 0;  // ceil(m_blocks / per) <= kMaxChunks
};

// As many chunks as row blocks, at most kMaxChunks; then normalised so none is empty.
WEAVE_HD AgChunks ag_chunks(int64_t m, int64_t n, int block_m, int block_n) {
  AgChunks c;
  c.m_blocks = static_cast<int>((m + block_m - 1) / block_m);
  c.n_blocks = static_cast<int>((n + block_n - 1) / block_n);
  const int want = c.m_blocks < comm::kMaxChunks ? c.m_blocks : comm::kMaxChunks;
  c.per = want > 0 ? (c.m_blocks + want - 1) / want : 1;
  c.chunks = (c.m_blocks + c.per - 1) / c.per;
  return c;
}

WEAVE_HD int ag_chunk_of(const AgChunks& c, int m_blk) { return m_blk / c.per; }

// Half-tile counts that complete chunk `chunk` (2 consumer warpgroups per tile).
WEAVE_HD uint32_t ag_chunk_units(const AgChunks& c, int chunk) {
  const int first = chunk * c.per;
  const int rows = (first + c.per <= c.m_blocks ? c.per : c.m_blocks - first);
  return static_cast<uint32_t>(2 * rows * c.n_blocks);
}

}  // namespace weave::fused
