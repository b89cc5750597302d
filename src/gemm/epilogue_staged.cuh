// The staged epilogue: each consumer warpgroup converts its finished accumulators, writes them
// into shared-memory staging strips, and one elected thread TMA-stores each strip. The stores are
// asynchronous: the warpgroup goes straight on to the next tile's main loop while they drain, and
// waits for a strip only before it writes that strip's buffer again.
//
//   strip    = 64 rows (one m64 wgmma slice) x 128 bytes of columns (64 bf16 or 32 fp32), stored
//              with the 128B swizzle (16-byte chunk c of row r at chunk c ^ (r % 8)), which makes
//              the fragment writes conflict-free and is what the TMA box of `tma_c` expects; or,
//              where a warpgroup's columns are no whole number of 128-byte rows (bf16 output of
//              a 160-wide tile: 320 bytes; of a 64x64 tile's 32-column warpgroup: 64), 64 rows x
//              64 bytes with the 64B swizzle (chunk c of row r at c ^ ((r / 2) % 4): the 8 rows of
//              one stmatrix matrix still hit 8 distinct 16-byte bank groups).
//              SmemLayout::kStripRowBytes says which (gemm/kernel_args.hpp).
//   per warpgroup and tile: kStrips = slices x (its columns x out bytes / strip row bytes)
//              strips, through kBufs buffers (SmemLayout::kStripsPerWg and kEpiBufsPerWg, which
//              chooses 1 or 2 or more).
//
// Per strip q of a warpgroup (docs/memory_ordering.md "tile-stage"):
//   q == 0:      leader: retire the previous tile (wait_group.read 0, or with a stored hook
//                wait_group 0 + fence.proxy.async.global + tile_stored), then before_store;
//                bar.sync(warpgroup); then (a combine hook) every thread may rewrite acc;
//                a multi-destination policy's destinations are read after the strip's bar.sync,
//                so after every wait of the combine
//   q >= kBufs:  leader: wait_group.read<kBufs-1> (strip q - kBufs has left buffer q % kBufs);
//                bar.sync(warpgroup)
//   all:         write the strip (stmatrix for bf16, st.shared.v2 for fp32);
//                fence.proxy.async.shared::cta (generic writes -> the TMA's async-proxy reads);
//                bar.sync(warpgroup)
//   leader:      TMA store of the strip, commit_group
// then the leader calls tile_issued. finish() at kernel exit retires the last tile, so no CTA
// leaves while a store still reads its shared memory.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "hopper/ptx/fence.cuh"
#include "hopper/ptx/ld_st.cuh"
#include "hopper/ptx/tma.cuh"

namespace weave::gemm {

// Named barrier ids of the epilogue: kEpiBarrierBase + consumer warpgroup (0 is __syncthreads;
// id 1 is unused since the ptpc tile scales moved to mbarriers, gemm/kernel.cuh).
inline constexpr uint32_t kEpiBarrierBase = 2;

// Optional policy hook (default off, so policies that predate it need not name it):
// combine<Tile>(p, words, acc, m_blk, n_blk, cwg), called by every thread of a consumer warpgroup
// before its tile is staged, may rewrite the warpgroup's accumulators (GemmAllReduce adds its
// peers' partials there); Tile (gemm/tile_config.cuh) says which rows and columns they hold.
template <class Epilogue>
constexpr bool has_combine_hook() {
  if constexpr (requires { Epilogue::kHasCombineHook; }) return Epilogue::kHasCombineHook;
  else return false;
}

// Optional policy flag (default off): every map the policy's stores use is built with the
// instance's strip width, so tiles with 64-byte strips may use it.
template <class Epilogue>
constexpr bool has_strip_width_maps() {
  if constexpr (requires { Epilogue::kStripWidthMaps; }) return Epilogue::kStripWidthMaps;
  else return false;
}

template <class Tile, class Layout, class Epilogue>
struct StagedEpilogue {
  using Out = typename Epilogue::OutType;
  using Params = typename Epilogue::Params;
  static constexpr int kOutBytes = static_cast<int>(sizeof(Out));
  static constexpr int kRowBytes = Layout::kStripRowBytes;                   // 128 or 64
  static constexpr int kColStrips = Tile::kWgCols * kOutBytes / kRowBytes;  // per warpgroup and m64 slice
  static constexpr int kStripCols = kRowBytes / kOutBytes;
  static constexpr int kStrips = Layout::kStripsPerWg;
  static constexpr int kStripBytes = Layout::kStripBytes;
  static constexpr int kBufs = Layout::kEpiBufsPerWg;
  static constexpr int kAcc = Tile::Mma::kAcc;
  static_assert(kBufs >= 1 && kBufs <= kStrips, "epilogue staging: 1 .. kStrips buffers per warpgroup");
  static_assert(kRowBytes == 128 || kRowBytes == 64, "staging strips are 128- or 64-byte rows (gemm/kernel_args.hpp)");
  static_assert(Tile::kWgCols * kOutBytes % kRowBytes == 0, "a warpgroup's columns must fill whole strips");
  // A fused operator builds its peer and staging maps with 128-byte boxes (make_epilogue_map's
  // default) unless its policy says it builds them with the instance's strip width
  // (GemmKernelEntry::epi_box_bytes): kStripWidthMaps.
  static_assert(kRowBytes == 128 || has_strip_width_maps<Epilogue>() ||
                    !(Epilogue::kMultiDestination || Epilogue::kHasStoredHook),
                "this fused epilogue needs 128-byte staging strips");

  // Only the hook's bookkeeping lives across the main loop (the fp8 kernels run at the register
  // limit there); everything else is recomputed from threadIdx in store(). Without a stored hook
  // these are never read and the compiler drops them.
  int last_m_blk = -1, last_n_blk = 0, last_split = 0;  // the tile whose stores may be in flight

  __device__ __forceinline__ static int cwg() { return static_cast<int>(threadIdx.x) / 128 - 1; }
  __device__ __forceinline__ static bool leader() { return threadIdx.x % 128 == 0; }
  // Constant ids: a computed barrier id makes ptxas reserve all 16 barriers and costs registers.
  __device__ __forceinline__ static void bar() {
    if (cwg() == 0) ptx::bar_sync(kEpiBarrierBase, 128);
    else ptx::bar_sync(kEpiBarrierBase + 1, 128);
  }

  // Leader only: every earlier store of this warpgroup has read its buffer (and, with a stored
  // hook, has landed; the hook then publishes the previous tile).
  __device__ __forceinline__ void retire_previous(const Params& p) {
    if constexpr (Epilogue::kHasStoredHook) {
      ptx::cp_async_bulk_wait_group<0>();
      if (last_m_blk >= 0) {
        ptx::fence_proxy_async_global();
        if constexpr (Epilogue::kHasCallHooks) {
          extern __shared__ __align__(1024) uint8_t staged_smem[];  // the kernel's dynamic shared memory
          Epilogue::tile_stored(p, last_m_blk, last_n_blk, last_split, cwg(),
                                reinterpret_cast<uint32_t*>(staged_smem + Layout::kCallWordsOffset));
        } else {
          Epilogue::tile_stored(p, last_m_blk, last_n_blk, last_split, cwg());
        }
      }
    } else {
      ptx::cp_async_bulk_wait_group_read<0>();
    }
  }

  // Byte offset in a strip of 16-byte chunk `chunk` of row `row`, swizzled as the TMA box expects.
  __device__ __forceinline__ static uint32_t strip_offset(int row, int chunk) {
    if constexpr (kRowBytes == 128) return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
    else return static_cast<uint32_t>(row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4));
  }

  // Writes strip (slice j, column strip cs) of acc into the buffer at `buf`.
  __device__ __forceinline__ static void write_strip(const float (&acc)[kAcc], int cs, uint32_t buf) {
    const int warp = static_cast<int>(threadIdx.x % 128) / 32, lane = static_cast<int>(threadIdx.x % 32);
    if constexpr (kOutBytes == 2) {
      // stmatrix x4 over n8 chunks (i, i+1): matrices {rows 0-7, 8-15} x {chunk i, i+1} of this
      // warp's 16-row band; lane l addresses row l % 8 of matrix l / 8. An n8 chunk is 16 bytes.
      constexpr int kChunks = kRowBytes / 16;
      const int mat = lane / 8;
      const int row = warp * 16 + (mat & 1) * 8 + (lane & 7);
#pragma unroll
      for (int c2 = 0; c2 < kChunks / 2; ++c2) {
        const int i = cs * kChunks + 2 * c2;
        auto pack = [&](float lo, float hi) {
          const __nv_bfloat162 h = __float22bfloat162_rn(make_float2(lo, hi));
          return *reinterpret_cast<const uint32_t*>(&h);
        };
        const uint32_t r0 = pack(acc[4 * i + 0], acc[4 * i + 1]);
        const uint32_t r1 = pack(acc[4 * i + 2], acc[4 * i + 3]);
        const uint32_t r2 = pack(acc[4 * i + 4], acc[4 * i + 5]);
        const uint32_t r3 = pack(acc[4 * i + 6], acc[4 * i + 7]);
        const int chunk = 2 * c2 + (mat >> 1);
        ptx::stmatrix_sync_aligned_m8n8_x4_shared_b16(buf + strip_offset(row, chunk), r0, r1, r2, r3);
      }
    } else {
      // fp32: each n8 chunk is 32 bytes of a row; lane l writes columns 2(l%4), +1 (8 bytes).
      constexpr int kChunks = kRowBytes / 32;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int i = cs * kChunks + c;
        const int chunk = 2 * c + ((lane & 3) >> 1);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = warp * 16 + lane / 4 + h * 8;
          ptx::st_shared_v2_f32(buf + strip_offset(row, chunk) + ((lane & 1) << 3), acc[4 * i + 2 * h],
                                acc[4 * i + 2 * h + 1]);
        }
      }
    }
  }

  // Stores this warpgroup's rows of tile (m_blk, n_blk) of plane `split` through the staging
  // buffers at `staging` (SmemLayout::kEpiOffset). acc holds final values (scales applied).
  __device__ __forceinline__ void store(const Params& p, uint32_t staging, float (&acc)[Tile::kSlices][kAcc],
                                        int m_blk, int n_blk, int split) {
    const int cw = cwg();
    const bool lead = leader();
    const uint32_t buf0 = staging + static_cast<uint32_t>(cw * kBufs * kStripBytes);
    const int row0 = m_blk * Tile::kBlockM + Tile::wg_row0(cw);
    const int col0 = n_blk * Tile::kBlockN + Tile::wg_col0(cw);
    [[maybe_unused]] int destinations = 1;  // leader only: maps every strip goes to
#pragma unroll
    for (int q = 0; q < kStrips; ++q) {
      const int j = q / kColStrips, cs = q % kColStrips;
      const uint32_t buf = buf0 + static_cast<uint32_t>((q % kBufs) * kStripBytes);
      if (q == 0) {
        if (lead) {
          retire_previous(p);
          if constexpr (Epilogue::kHasBeforeHook) Epilogue::before_store(p, m_blk, n_blk, split, cw);
        }
        bar();
        if constexpr (has_combine_hook<Epilogue>()) {
          // After the previous tile was retired (and, with a stored hook, published): a combine
          // that waits for peers must never hold back a publication a peer waits for.
          extern __shared__ __align__(1024) uint8_t staged_smem[];  // the kernel's dynamic shared memory
          Epilogue::template combine<Tile>(p, reinterpret_cast<const uint32_t*>(staged_smem + Layout::kCallWordsOffset),
                                           acc, m_blk, n_blk, cw);
        }
      } else if (q >= kBufs) {
        if (lead) ptx::cp_async_bulk_wait_group_read<kBufs - 1>();
        bar();
      }
      write_strip(acc[j], cs, buf);
      ptx::fence_proxy_async_shared_cta();
      bar();
      if (lead) {
        if constexpr (Epilogue::kMultiDestination) {
          // Decided at strip 0, after the combine: a combine wait that timed out has claimed the
          // op's abort word, and the bar.sync above orders that store before this read, so a tile
          // summed with stale partials never leaves this rank (docs/memory_ordering.md "ar-fused").
          if (q == 0) destinations = Epilogue::destinations(p, m_blk);
          // One bulk group per strip holds its stores to every destination: the buffer is free
          // (wait_group.read) once all of them have read it.
          for (int d = 0; d < destinations; ++d)
            ptx::cp_async_bulk_tensor_3d_shared_to_global(
                Epilogue::destination_map(p, m_blk, d), col0 + cs * kStripCols,
                Epilogue::destination_row(p, m_blk, d, row0 + j * kEpilogueBoxRows), split, buf);
        } else {
          ptx::cp_async_bulk_tensor_3d_shared_to_global(&p.tma_c, col0 + cs * kStripCols, row0 + j * kEpilogueBoxRows,
                                                        split, buf);
        }
        ptx::cp_async_bulk_commit_group();
      }
    }
    if (lead) {
      if constexpr (Epilogue::kHasIssuedHook) Epilogue::tile_issued(p, m_blk, n_blk, split, cw);
    }
    last_m_blk = m_blk;
    last_n_blk = n_blk;
    last_split = split;
  }

  // At kernel exit: no store may still read this CTA's shared memory; the stored hook runs for
  // the last tile.
  __device__ __forceinline__ void finish(const Params& p) {
    if (leader()) retire_previous(p);
  }
};

}  // namespace weave::gemm
