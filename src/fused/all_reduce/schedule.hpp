// GemmAllReduce's fused schedule (host and device; the CPU tests check exactly what the kernel runs).
//
// Rows are owned in bands: band d = row blocks [d * band, min((d + 1) * band, m_blocks)) with
// band = ceil(m_blocks / world) (trailing bands may be short or empty). Each band is cut into
// chunks of `per` consecutive row blocks (the last shorter, none empty); a chunk is all N tiles of
// its rows. Rank r walks rounds k = 0 .. max_chunks:
//
//   round k = chunk k of band r+1, r+2, ..., r+w-1 (mod w; where it exists), then chunk k-1 of
//             band r (its own)
//
// A remote chunk's tiles are stored as bf16 partials into the owner's staging slot [r]; the own
// chunk k-1 comes one round after every peer produced its partials of that chunk (in their round
// k-1), so its tiles normally find them landed: the epilogue adds them in rank order and stores the
// final tile to this rank's output and to every peer's. Step s of each round sends to (r + s) mod w:
// a permutation across ranks, so no rank is the target of every sender at once.
//
// The order is a table of segments (one per chunk, in walk order) passed to the kernel by value;
// inside a segment the walk goes down the chunk's rows first, then along N (grouped rows).
#pragma once
#include <cstdint>

#include "comm/protocol.hpp"

namespace weave::fused {

inline constexpr int kArMaxWorld = comm::kMaxWorldCounters;
inline constexpr int kArMaxSegments = (comm::kMaxChunks + 1) * kArMaxWorld;

struct ArSchedule {
  int world = 1, rank = 0;
  int m_blocks = 0, n_blocks = 0;
  int band = 0;        // row blocks per band (the last bands shorter or empty)
  int per = 1;         // row blocks per chunk
  int max_chunks = 0;  // chunks of the largest band (band 0)
  int segments = 0;
  // Segment i of this rank's walk: rows_before[i] = row blocks of all earlier segments (so its
  // first tile is rows_before[i] * n_blocks), first_m_blk[i] = its first row block.
  // rows_before[segments] = m_blocks.
  uint16_t rows_before[kArMaxSegments + 1] = {};
  uint16_t first_m_blk[kArMaxSegments] = {};
};

WEAVE_HD int ar_band_begin(const ArSchedule& s, int d) {
  const int b = d * s.band;
  return b < s.m_blocks ? b : s.m_blocks;
}
WEAVE_HD int ar_band_end(const ArSchedule& s, int d) {
  const int b = (d + 1) * s.band;
  return b < s.m_blocks ? b : s.m_blocks;
}
WEAVE_HD int ar_band_of(const ArSchedule& s, int m_blk) { return m_blk / s.band; }
WEAVE_HD int ar_chunks_of(const ArSchedule& s, int d) {
  const int rows = ar_band_end(s, d) - ar_band_begin(s, d);
  return (rows + s.per - 1) / s.per;
}
WEAVE_HD int ar_chunk_of(const ArSchedule& s, int m_blk) { return (m_blk - ar_band_begin(s, ar_band_of(s, m_blk))) / s.per; }
WEAVE_HD int ar_chunk_rows(const ArSchedule& s, int d, int c) {
  const int first = ar_band_begin(s, d) + c * s.per;
  const int end = ar_band_end(s, d);
  return first + s.per <= end ? s.per : end - first;
}
// The rows [first, first + rows) of chunk c of band d, of m rows in blocks of block_m (the last
// chunk of the last band ends at m).
struct ArChunkRows {
  int64_t first = 0, rows = 0;
};
WEAVE_HD ArChunkRows ar_chunk_row_range(const ArSchedule& s, int d, int c, int block_m, int64_t m) {
  ArChunkRows r;
  const int64_t blk0 = ar_band_begin(s, d) + int64_t(c) * s.per;
  r.first = blk0 * block_m;
  const int64_t end = (blk0 + ar_chunk_rows(s, d, c)) * block_m;
  r.rows = (end < m ? end : m) - r.first;
  return r;
}
// Half-tile counts that complete chunk c of band d (two consumer warpgroups store each tile).
WEAVE_HD uint32_t ar_chunk_units(const ArSchedule& s, int d, int c) {
  return static_cast<uint32_t>(2 * ar_chunk_rows(s, d, c) * s.n_blocks);
}

// The schedule of rank `rank` for m rows: `chunks` requested per band (clamped to 1 .. kMaxChunks
// and to the band's row blocks; then normalised so no chunk is empty).
inline ArSchedule ar_schedule(int64_t m, int64_t n, int block_m, int block_n, int world, int rank, int chunks) {
  ArSchedule s;
  s.world = world;
  s.rank = rank;
  s.m_blocks = static_cast<int>((m + block_m - 1) / block_m);
  s.n_blocks = static_cast<int>((n + block_n - 1) / block_n);
  s.band = (s.m_blocks + world - 1) / world;
  int want = chunks < 1 ? 1 : chunks;
  if (want > comm::kMaxChunks) want = comm::kMaxChunks;
  if (want > s.band) want = s.band;
  s.per = want > 0 ? (s.band + want - 1) / want : 1;
  s.max_chunks = ar_chunks_of(s, 0);
  int seg = 0, rows = 0;
  auto add = [&](int d, int c) {
    if (c < 0 || c >= ar_chunks_of(s, d)) return;
    s.rows_before[seg] = static_cast<uint16_t>(rows);
    s.first_m_blk[seg] = static_cast<uint16_t>(ar_band_begin(s, d) + c * s.per);
    rows += ar_chunk_rows(s, d, c);
    ++seg;
  };
  for (int k = 0; k <= s.max_chunks; ++k) {
    for (int st = 1; st < world; ++st) add(comm::peer_at(rank, st, world), k);
    add(rank, k - 1);
  }
  s.segments = seg;
  s.rows_before[seg] = static_cast<uint16_t>(rows);
  return s;
}

// Tile `tile` (0 .. m_blocks * n_blocks - 1) of this rank's walk -> (row block, column block).
WEAVE_HD void ar_tile_coords(const ArSchedule& s, int tile, int& m_blk, int& n_blk) {
  const int row_slot = tile / s.n_blocks;  // segment boundaries are multiples of n_blocks tiles
  int lo = 0, hi = s.segments - 1;          // the last segment with rows_before <= row_slot
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (s.rows_before[mid] <= row_slot) lo = mid;
    else hi = mid - 1;
  }
  const int rows = s.rows_before[lo + 1] - s.rows_before[lo];
  const int in_seg = tile - s.rows_before[lo] * s.n_blocks;
  m_blk = s.first_m_blk[lo] + in_seg % rows;
  n_blk = in_seg / rows;
}

}  // namespace weave::fused
