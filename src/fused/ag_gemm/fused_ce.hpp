// AllGatherGemm fused-ce: the chunks of the gathered rows and the parameters of its GEMM kernel
// (host and device; the CPU tests check exactly what the kernel and the copy streams use).
// docs/memory_ordering.md "agm-fused-ce".
//
// Rank q's m rows sit at rows [q m, (q + 1) m) of the gathered A (agm.a) and its scales (agm.sa).
// Each peer's rows are pulled in `chunks` chunks of `chunk_rows` rows (the last possibly shorter,
// none empty); chunk c of source q has landed once this rank's landed word [q][c] is 1.
#pragma once
#include <cuda.h>

#include <cstdint>

#include "comm/kernels.hpp"
#include "comm/protocol.hpp"

namespace weave::fused {

// The op's chunks per peer: each ends with its landed word, a stream write whose memory barrier
// took about 3.5 us on an idle H100 (16 one-MB chunks: 101-105 us against 48 without the words);
// more chunks let the GEMM start on a peer's rows sooner. 1..16 measured in the emulated world,
// with no clear winner between eager calls and graphs (docs/perf/fused.md "AllGatherGemm fused-ce").
inline constexpr int kAgmPullChunks = 4;

struct AgmChunks {
  int64_t m = 0;           // rows per rank
  int32_t chunk_rows = 1;  // rows per chunk
  int32_t chunks = 0;      // ceil(m / chunk_rows) <= comm::kMaxChunks
};

// Chunks of whole tiles' rows (a multiple of block_m), at most max_chunks (<= comm::kMaxChunks)
// of them: the first chunk lands after chunk_rows rows' copy, small enough to hide under the own
// rows' tiles; each chunk costs a landed word, a stream write with a memory barrier (several us).
WEAVE_HD AgmChunks agm_chunks(int64_t m, int block_m, int max_chunks = comm::kMaxChunks) {
  AgmChunks c;
  c.m = m;
  const int64_t blocks = (m + block_m - 1) / block_m;
  const int64_t per = (blocks + max_chunks - 1) / max_chunks;
  c.chunk_rows = static_cast<int32_t>(per * block_m);
  c.chunks = static_cast<int32_t>((m + c.chunk_rows - 1) / c.chunk_rows);
  return c;
}


// agm.landed's words: world x kMaxChunks.
WEAVE_HD int agm_landed_words(int world) { return world * comm::kMaxChunks; }

// The landed word of (source, chunk) among `world` x kMaxChunks words.
WEAVE_HD int agm_landed_index(int source, int chunk) { return source * comm::kMaxChunks + chunk; }

// The epilogue parameters of the fused-ce GEMM kernel (fused/ag_gemm/epilogue.cuh): a plain
// local store, and the landed words its producer waits on before loading a peer's rows.
struct AgmRowsParams {
  CUtensorMap tma_c;              // the output [world m, N] (agm.out or the caller's `out`)
  comm::Proto p;                  // the op's protocol words: the error record a failed wait fills, the abort word
  const uint32_t* landed = nullptr;  // this rank's landed words, world x kMaxChunks (local)
  AgmChunks chunks;
  int32_t first_block = 0;        // the tile order starts at the row block of this rank's first row
  int32_t skip_landed_wait = 0;   // negative control: load peers' rows without waiting for them
};

}  // namespace weave::fused
