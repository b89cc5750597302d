// The persistent, warp-specialised Hopper GEMM kernel: C = A * B^T, A [M, K], B [N, K].
//
//   warpgroup 0 (producer, 40 registers): warp 0 walks the tiles; lane 0 issues the TMA loads of
//     A and B for each 128-byte K slice into a ring of `kStages` shared-memory stages; with a
//     main-loop scale policy the lanes also bring the stage's scales (cp.async, or TMA for
//     MN-major blockscale A scales, gemm/scale_policy.cuh).
//   warpgroups 1, 2 (consumers, 232 registers): the main-loop policy of the (tile, scale) pair
//     (gemm/mainloop/select.cuh) runs the wgmmas from the ring, then the epilogue policy stores.
//
//   stage s:  full[s]  <- producer arrive.expect_tx + TMA complete_tx (+ the scale policy's
//                         cp.async arrivals: 32, or 1 for MN-major blockscale)
//             empty[s] <- lane 0 of each of the 8 consumer warps, once its wgmmas reading s are done
//
// Programmatic dependent launch (plain GEMMs, kPdlPrologue; MainloopArgs::pdl_flags, 0 without
// the launch attribute): launched with programmatic stream serialization (weave::Gemm::
// set_allow_pdl) the kernel may start while the kernel before it still runs. Producer lane 0
// requests B (weights, which the caller promises that kernel does not write) of the CTA's first
// work item's first K blocks, into the ring (kPdlBIntoRing) or into L2 (kPdlBIntoL2), then the
// producer warp waits (griddepcontrol.wait) before it touches A, the scales or anything else.
// Nothing else reads global memory, and every write (the epilogue's) follows a full barrier that
// needs A: so all of it is ordered after that kernel's completion (docs/memory_ordering.md "pdl").
// The kernel lets its own dependents be scheduled at its start or after its last load.
//
// Clusters (TileShape::kClusterM = 2; plain GEMMs): launched in clusters of two CTAs along M. The
// pair walks vertically adjacent tiles of one column (gemm/persistent_walk.hpp cluster_pair_rows),
// so both read the same B tile: CTA r's producer loads B's rows [r * BN/2, (r + 1) * BN/2) once
// (KernelArgs::tma_b_half) and multicasts them into the same stage of both CTAs, whose full
// barriers each expect A's bytes plus the whole B tile. A stage may be refilled only once both
// CTAs' consumers have read it, so every consumer warp releases it in both CTAs (empty barriers
// count 2 x 8 warps; CTA-scope arrivals: the reads they follow are complete). The CTAs meet in a
// cluster barrier after the barriers' init (before any multicast) and before they exit (no CTA
// leaves while its peer may still arrive on its barriers). A role that gives up a wait sets both
// CTAs' abort words (docs/memory_ordering.md "gemm-cluster").
//
// Work items: tiles x split_k (MainloopArgs); split s of a tile covers its own range of K blocks
// and stores an fp32 partial into rows [s * M, s * M + M) of the epilogue's output (the split-K
// workspace, reduced by gemm/split_k_reduce). split_k = 1 is the plain GEMM.
//
// See docs/gemm.md for the protocol, the register budget and the debug negative control.
#pragma once
#include <cuda_runtime.h>

#include <type_traits>

#include "common/check.hpp"
#include "gemm/dispatch.hpp"
#include "gemm/epilogue_staged.cuh"
#include "gemm/epilogue_store.cuh"
#include "gemm/kernel_args.hpp"
#include "gemm/mainloop/consumer_ring.cuh"
#include "gemm/mainloop/select.cuh"
#include "gemm/persistent_walk.hpp"
#include "gemm/scale_mx32.cuh"
#include "gemm/scale_policy.cuh"
#include "gemm/tile_config.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/pdl_attribute.hpp"
#include "hopper/pipeline.cuh"
#include "hopper/ptx/cluster.cuh"
#include "hopper/ptx/fence.cuh"
#include "hopper/ptx/griddepcontrol.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/misc.cuh"
#include "hopper/ptx/tma.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

inline constexpr uint32_t kProducerRegisters = 40;
inline constexpr uint32_t kConsumerRegisters = 232;

// Whether the consumer role is compiled once, testing the dropped-wait flag at run time, instead of
// once per flag value: the fused all-reduce epilogue (spills as two copies), mxfp8 and K-major
// blockscale on 128-row tiles (measured slower as copies; docs/perf/gemm.md "step 9").
template <class Tile, class Scale, class Epilogue>
constexpr bool single_consumer_role() {
  if constexpr (requires { Epilogue::kSingleConsumerRole; }) {
    if constexpr (Epilogue::kSingleConsumerRole) return true;
  }
  if constexpr (scale_group_k<Scale>() == 32) return true;
  if constexpr (Scale::kWhere == ScaleWhere::kMainloop && requires { Scale::kTmaRows; })
    return !Scale::kTmaRows && Tile::kSlices == 1;
  return false;
}

// Whether an instance loads only the lower half of A for tiles whose upper 64 rows lie past M
// (the producer below): plain GEMMs (EpilogueKind::kStoreLocal) with 128-row, two-warpgroups-by-rows
// tiles. An epilogue that names no kind keeps the full box.
template <class Epilogue>
constexpr bool stores_local_only() {
  if constexpr (requires { Epilogue::kKind; }) return Epilogue::kKind == EpilogueKind::kStoreLocal;
  else return false;
}
template <class Tile, class Epilogue>
inline constexpr bool kHalfBoxA = Tile::kBlockM == 128 && !Tile::kSplitN && stores_local_only<Epilogue>();
// Whether an instance has the PDL prologue (above): plain GEMMs only; a fused epilogue touches
// peers' memory from its first instruction (begin_call) and launches without the attribute.
template <class Epilogue>
inline constexpr bool kPdlPrologue = stores_local_only<Epilogue>();

template <class Tile, class Scale, class Epilogue, class Scheduler>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ KernelArgs<typename Epilogue::Params> args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = SmemLayout<Tile, Scale, static_cast<int>(sizeof(typename Epilogue::OutType))>;
  using Mma = typename Tile::Mma;
  constexpr int kStages = L::kStages;
  constexpr int kAcc = Mma::kAcc;
  constexpr int kCluster = Tile::kClusterM;
  static_assert(kCluster == 1 || (stores_local_only<Epilogue>() && Scheduler::kKind == SchedulerKind::kGroupedRows),
                "2-CTA clusters: plain GEMMs (local store, grouped order) only");

  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t smem_base = ptx::smem_addr(smem);
  const uint32_t abort_word = smem_base + L::kAbortWordOffset;
  const uint32_t full_bar0 = smem_base + L::kBarrierOffset;
  const uint32_t empty_bar0 = full_bar0 + 8 * kStages;
  auto full_bar = [&](uint32_t s) { return full_bar0 + 8 * s; };
  auto empty_bar = [&](uint32_t s) { return empty_bar0 + 8 * s; };
  auto smem_a = [&](uint32_t s) { return smem_base + L::kAOffset + s * Tile::kATileBytes; };
  auto smem_b = [&](uint32_t s) { return smem_base + L::kBOffset + s * Tile::kBTileBytes; };
  auto stage_scales = [&](uint32_t s) { return smem_base + L::kStageScaleOffset + s * L::kStageScaleBytes; };
  // Epilogue scale policies (ptpc): tile t's scales live in buffer t % 2, guarded by its own
  // full/empty pair (docs/memory_ordering.md "tile-scales").
  [[maybe_unused]] auto tile_scale_buf = [&](uint32_t t) {
    return smem_base + L::kTileScaleOffset + (t & 1u) * (L::kTileScaleBytes / 2);
  };
  [[maybe_unused]] auto tile_scale_full = [&](uint32_t t) { return smem_base + L::kTileScaleBarOffset + 8 * (t & 1u); };
  [[maybe_unused]] auto tile_scale_empty = [&](uint32_t t) {
    return smem_base + L::kTileScaleBarOffset + 16 + 8 * (t & 1u);
  };

  const MainloopArgs& a = args.main;
  // A guarded launch that is not needed ends before any barrier exists (uniform per CTA).
  if (a.run_if_flag != nullptr && (*static_cast<const volatile uint32_t*>(a.run_if_flag) == 0) != (a.run_if_flag_clear != 0))
    return;
  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  Scheduler sched(args, Tile::kBlockM, Tile::kBlockN);
  if constexpr (kCluster > 1) sched.pair_rows();
  const int num_tiles = sched.num_tiles();
  const int num_k_blocks = (a.k + Tile::kBlockK - 1) / Tile::kBlockK;
  const int k_blocks_per_split = a.k_blocks_per_split > 0 ? a.k_blocks_per_split : num_k_blocks;
  const int num_items = num_tiles * a.split_k;
  // Work item -> (tile, split, K-block range). Split-major, so each split walks the tiles in the
  // scheduler's L2-friendly order.
  auto item_coords = [&](int item, int& tile, int& split, int& kb_begin, int& kb_end) {
    split = item / num_tiles;
    tile = item - split * num_tiles;
    kb_begin = split * k_blocks_per_split;
    kb_end = min(num_k_blocks, kb_begin + k_blocks_per_split);
  };

  if (threadIdx.x == 0) {
    // The 128B swizzle pattern is a function of the address bits, so tiles must be 1024-aligned.
    if ((smem_base & 1023u) != 0) __trap();
    ptx::prefetch_tensormap(&a.tma_a);
    if constexpr (kCluster > 1) ptx::prefetch_tensormap(&args.tma_b_half);
    else ptx::prefetch_tensormap(&a.tma_b);
    ptx::prefetch_tensormap(&args.epi.tma_c);
    if constexpr (requires { Scale::prefetch_maps(a); }) Scale::prefetch_maps(a);
    for (uint32_t s = 0; s < kStages; ++s) {
      ptx::mbarrier_init_shared_cta(full_bar(s), 1 + Scale::kProducerArrivals);
      // Every consumer warp of every CTA that reads the stage (a cluster's CTAs share its B).
      ptx::mbarrier_init_shared_cta(empty_bar(s), kCluster * Tile::kConsumerThreads / 32);
    }
    if constexpr (L::kTileScaleBarriers > 0) {
      for (uint32_t b = 0; b < 2; ++b) {
        ptx::mbarrier_init_shared_cta(tile_scale_full(b), 32);  // the producer lanes' cp.async arrivals
        ptx::mbarrier_init_shared_cta(tile_scale_empty(b), Tile::kConsumerThreads / 32);
      }
    }
    ptx::st_volatile_shared_u32(abort_word, 0u);
    ptx::fence_mbarrier_init_release_cluster();
    ptx::fence_proxy_async_shared_cta();
    // A fused epilogue's call protocol (epoch, credits): before any role starts waiting.
    if constexpr (Epilogue::kHasCallHooks)
      Epilogue::begin_call(args.epi, reinterpret_cast<uint32_t*>(smem + L::kCallWordsOffset));
  }
  if constexpr (kCluster > 1) {
    // Both CTAs' barriers exist before either multicasts into the other.
    ptx::barrier_cluster_arrive_release();
    ptx::barrier_cluster_wait_acquire();
  } else {
    __syncthreads();
  }
  // The cluster peer's shared memory (kCluster 2): its barriers and abort word at our offsets.
  [[maybe_unused]] uint32_t cta_rank = 0, peer_base = 0;
  if constexpr (kCluster > 1) {
    cta_rank = ptx::cluster_ctarank();
    peer_base = ptx::mapa_shared_cluster(smem_base, cta_rank ^ 1u);
  }
  // A cluster CTA that gives up stops its peer too, and leaves only with it: no CTA exits while its
  // peer may still arrive on its barriers (the exit's cluster barrier counts exited threads).
  [[maybe_unused]] auto stop_peer = [&] {
    if constexpr (kCluster > 1) ptx::st_relaxed_cluster_shared_cluster_u32(peer_base + L::kAbortWordOffset, 1u);
  };
  [[maybe_unused]] auto leave_with_peer = [&] {
    if constexpr (kCluster > 1) {
      ptx::barrier_cluster_arrive_release();
      ptx::barrier_cluster_wait_acquire();
    }
  };
  if constexpr (kPdlPrologue<Epilogue>) {
    if (a.pdl_flags & kPdlTriggerAtStart) ptx::griddepcontrol_launch_dependents();
  }

  if (warpgroup == 0) {
    // ---------------- producer ----------------
    ptx::setmaxnreg_dec_sync_aligned_u32<kProducerRegisters>();
    if (warp == 0) {
      hopper::PipelineState<kStages> ps;
      // Every producer wait (a stage's empty barrier, a tile-scale buffer's) goes through here. On
      // abort nothing of this role is pending but its scale copies (they read global memory and
      // land whatever the consumers do); it lets them land, then leaves.
      auto wait_or_leave = [&](uint32_t bar, uint32_t parity, hopper::WaitSite site, uint32_t which) {
        if (!hopper::mbarrier_wait_or_abort(bar, parity, site, which, a.timeout_record, a.pipeline_timeout_ns,
                                            abort_word)) {
          stop_peer();
          ptx::cp_async_wait_all();
          leave_with_peer();
          ptx::thread_exit();
        }
      };
      // Stage `stage`'s B tile at (kb, n0): the whole box, or (kCluster 2) this CTA's half of its
      // rows, multicast into the same stage of both CTAs.
      auto load_b = [&](uint32_t stage, int kb, int n0, uint32_t full) {
        if constexpr (kCluster > 1) {
          constexpr int kHalfRows = Tile::kBlockN / 2;
          ptx::cp_async_bulk_tensor_2d_global_to_shared_multicast(
              smem_b(stage) + cta_rank * (kHalfRows * 128), &args.tma_b_half, kb * Tile::kBlockK,
              n0 + static_cast<int>(cta_rank) * kHalfRows, full, static_cast<uint16_t>(0x3), ptx::kL2EvictNormal);
        } else {
          ptx::cp_async_bulk_tensor_2d_global_to_shared(smem_b(stage), &a.tma_b, kb * Tile::kBlockK, n0, full,
                                                        ptx::kL2EvictNormal);
        }
      };
      // Bytes that complete stage s's full barrier: A (half a box where the tile's upper 64 rows
      // lie past M), B and the TMA-borne scales.
      auto stage_tx_bytes = [&](bool a_half) {
        return (a_half ? Tile::kATileBytes / 2 : Tile::kATileBytes) + Tile::kBTileBytes +
               scale_stage_tx_bytes<Scale, Tile>();
      };
      // PDL prologue: the first item's first stages get their transaction and B now, before the
      // wait (the first lap's empty barriers pass at once); the loop below then adds only A and
      // the scales to those `b_early` stages.
      int b_early = 0;
      if constexpr (kPdlPrologue<Epilogue>) {
        const uint32_t pdl = a.pdl_flags;
        const int item = persistent_first_item(blockIdx.x);
        if ((pdl & (kPdlBIntoRing | kPdlBIntoL2)) != 0 && item < num_items) {
          int tile, split, kb_begin, kb_end, m_blk, n_blk;
          item_coords(item, tile, split, kb_begin, kb_end);
          sched.coords(tile, m_blk, n_blk);
          if (pdl & kPdlBIntoRing) {
            b_early = max(0, min(kb_end - kb_begin, kStages));
            bool a_half = kHalfBoxA<Tile, Epilogue> && m_blk * Tile::kBlockM + 64 >= a.m;
            if constexpr (kCluster > 1) a_half = a_half && m_blk * Tile::kBlockM < a.m;  // as below
            if (lane == 0) {
              for (int s = 0; s < b_early; ++s) {
                ptx::mbarrier_arrive_expect_tx_release_cta(full_bar(s), stage_tx_bytes(a_half));
                load_b(s, kb_begin + s, n_blk * Tile::kBlockN, full_bar(s));
              }
            }
          } else if (lane == 0) {
            const int blocks = min(kb_end - kb_begin, static_cast<int>(pdl >> 8));
            for (int s = 0; s < blocks; ++s)
              ptx::cp_async_bulk_prefetch_tensor_2d_l2(&a.tma_b, (kb_begin + s) * Tile::kBlockK, n_blk * Tile::kBlockN);
          }
        }
        if (pdl & kPdlWait) ptx::griddepcontrol_wait();
      }
      uint32_t tile_iter = 0;
      for (int item = persistent_first_item(blockIdx.x); item < num_items;
           item = persistent_next_item(item, gridDim.x), ++tile_iter) {
        int tile, split, kb_begin, kb_end, m_blk, n_blk;
        item_coords(item, tile, split, kb_begin, kb_end);
        sched.coords(tile, m_blk, n_blk);
        const int m0 = m_blk * Tile::kBlockM, n0 = n_blk * Tile::kBlockN;
        // A fused op whose A rows land while the kernel runs (AllGatherGemm fused-ce): every row of
        // the tile has landed before its first A or A-scale load; a failed wait aborts the CTA.
        if constexpr (requires { Epilogue::kWaitsForRows; }) {
          if (!Epilogue::wait_rows(args.epi, m0, Tile::kBlockM, lane)) {
            ptx::st_volatile_shared_u32(abort_word, 1u);
            ptx::cp_async_wait_all();
            ptx::thread_exit();
          }
        }
        if constexpr (Scale::kWhere == ScaleWhere::kEpilogue) {
          // The tile's scales, into buffer tile_iter % 2 once both warpgroups' epilogues of tile
          // tile_iter - 2 have read it (first use of each buffer: parity 1 passes at once).
          const uint32_t lap = (tile_iter >> 1) & 1u;
          wait_or_leave(tile_scale_empty(tile_iter), lap ^ 1u, hopper::WaitSite::kProducerScalesEmpty, tile_iter & 1u);
          Scale::template producer_copy_tile<Tile>(a, tile_scale_buf(tile_iter), tile_scale_full(tile_iter), m0, n0,
                                                   lane);
        }
        // A plain GEMM's 128-row tile whose upper 64 rows lie wholly past M (M = 192: the second row
        // block) loads only its lower 64 (tma_a_half): a TMA box half out of bounds made such tiles
        // slower than full ones (docs/perf/gemm.md "Small M"). The upper warpgroup then
        // multiplies stale shared memory into output rows past M, which the store clips; fused
        // epilogues (whose maps may hold rows past M) keep the full box.
        bool a_half = false;
        if constexpr (kHalfBoxA<Tile, Epilogue>) a_half = m0 + 64 >= a.m;
        // A cluster's empty partner tile (m0 >= M) loads the full box, all zeros: tma_a_half is
        // encoded only where M's last row block holds 1-64 rows.
        if constexpr (kCluster > 1) a_half = a_half && m0 < a.m;
        const CUtensorMap* a_map = a_half ? &a.tma_a_half : &a.tma_a;
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          // First lap: parity 1 refers to the phase "before" the barrier's first, already complete.
          wait_or_leave(empty_bar(ps.stage), ps.phase ^ 1u, hopper::WaitSite::kProducerEmpty, ps.stage);
          const uint32_t full = full_bar(ps.stage);
          const bool b_loaded = b_early > 0;  // the PDL prologue requested this stage's B
          if (b_loaded) --b_early;
          if (kb == a.debug_stall_k_block && item == static_cast<int>(blockIdx.x)) {
            ps.advance();  // debug: this stage is never loaded (MainloopArgs::debug_stall_k_block)
            continue;
          }
          if (lane == 0) {
            if (!b_loaded) ptx::mbarrier_arrive_expect_tx_release_cta(full, stage_tx_bytes(a_half));
            ptx::cp_async_bulk_tensor_2d_global_to_shared(smem_a(ps.stage), a_map, kb * Tile::kBlockK, m0, full,
                                                          ptx::kL2EvictNormal);
            if (!b_loaded) load_b(ps.stage, kb, n0, full);
          }
          if constexpr (Scale::kWhere == ScaleWhere::kMainloop)
            Scale::template producer_copy_stage<Tile>(a, stage_scales(ps.stage), full, m0, n_blk, kb, lane);
          ps.advance();
        }
      }
      if constexpr (kPdlPrologue<Epilogue>) {
        if (a.pdl_flags & kPdlTriggerLate) ptx::griddepcontrol_launch_dependents();
      }
      leave_with_peer();
    } else if (warp == 1) {
      // Idle in the plain GEMM; a fused epilogue's end of call (arrival wait, epoch store).
      if constexpr (Epilogue::kHasCallHooks)
        Epilogue::end_call(args.epi, lane, reinterpret_cast<const uint32_t*>(smem + L::kCallWordsOffset));
    }
  } else {
    // ---------------- consumers ----------------
    ptx::setmaxnreg_inc_sync_aligned_u32<kConsumerRegisters>();
    // The debug pipeline faults (MainloopArgs::debug_drop_full_wait, debug_early_release) are
    // tested once, not in the main loops: the role is compiled once clean (NoFault) and once with
    // the faults (AnyFault), and the kernel runs one (docs/perf/gemm.md "step 9");
    // single_consumer_role instances keep the one dropped-wait test they had (DropWaitOnly).
    auto consumer_role = [&](const auto fault) {
      // Read through a shuffle so ptxas knows it is warp-uniform and keeps the wgmma descriptors in
      // the uniform datapath; keep spinning waits out of the code between here and the main loop
      // (either moved the loop's arithmetic to vector registers: docs/perf/gemm.md "step 6").
      const int cwg = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
      const int row_in_wg = (warp % 4) * 16 + lane / 4;  // fragment row of this thread (and +8)
      const int col_in_n8 = (lane % 4) * 2;              // fragment column in each n8 chunk
      hopper::PipelineState<kStages> ps;
      StagedEpilogue<Tile, L, Epilogue> epi;
      const ConsumerRing<Tile, L> ring{smem_base, abort_word, a, cwg, lane, row_in_wg, peer_base};
      // The tile's scales (epilogue scale policies) have landed in buffer t % 2.
      [[maybe_unused]] auto wait_tile_scales = [&](uint32_t t) {
        ring.wait_or_leave(tile_scale_full(t), (t >> 1) & 1u, hopper::WaitSite::kConsumerScalesFull, t & 1u);
      };

      uint32_t tile_iter = 0;
      for (int item = persistent_first_item(blockIdx.x); item < num_items;
           item = persistent_next_item(item, gridDim.x), ++tile_iter) {
        int tile, split, kb_begin, kb_end, m_blk, n_blk;
        item_coords(item, tile, split, kb_begin, kb_end);
        sched.coords(tile, m_blk, n_blk);
        float acc[Tile::kSlices][kAcc];
        MainloopFor<Tile, Scale>::consume(ring, ps, acc, MainloopTile{kb_begin, kb_end, m_blk * Tile::kBlockM, n_blk},
                                          fault);

        // ---------------- epilogue ----------------
        // Scales that are constant along K (ptpc) are applied here, in registers; then the staged
        // store (gemm/epilogue_staged.cuh) writes the tile through shared memory and TMA. Rows past
        // M and columns past N are clipped by the TMA, inside the tile's own plane.
        if constexpr (Scale::kWhere == ScaleWhere::kEpilogue) {
          const uint32_t tile_scales = tile_scale_buf(tile_iter);
          wait_tile_scales(tile_iter);
#pragma unroll
          for (int j = 0; j < Tile::kSlices; ++j) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int row_local = Tile::wg_row0(cwg) + j * 64 + row_in_wg + h * 8;
              const float row_factor = Scale::template row_factor<Tile>(tile_scales, row_local);
#pragma unroll
              for (int i = 0; i < kAcc / 4; ++i) {
                const float2 cf =
                    Scale::template col_factors<Tile>(tile_scales, Tile::wg_col0(cwg) + i * 8 + col_in_n8);
                acc[j][4 * i + 2 * h + 0] = acc[j][4 * i + 2 * h + 0] * row_factor * cf.x;
                acc[j][4 * i + 2 * h + 1] = acc[j][4 * i + 2 * h + 1] * row_factor * cf.y;
              }
            }
          }
          // Every lane of this warp has read the buffer (the loads fed the products above).
          __syncwarp();
          if (lane == 0) ptx::mbarrier_arrive_release_cta(tile_scale_empty(tile_iter));
        }
        epi.store(args.epi, smem_base + L::kEpiOffset, acc, m_blk, n_blk, split);
        // The CTA's last tile: retire its stores before exit. Inside the loop on purpose: any code
        // after the consumer loop made ptxas spill the fp8 main loops (~350 bytes).
        if (persistent_last_item(item, gridDim.x, num_items)) {
          epi.finish(args.epi);
          leave_with_peer();
        }
      }
    };
    if constexpr (single_consumer_role<Tile, Scale, Epilogue>()) {
      consumer_role(DropWaitOnly{a.debug_drop_full_wait != 0});
    } else {
      if (a.debug_drop_full_wait != 0 || a.debug_early_release != 0)
        consumer_role(AnyFault{a.debug_drop_full_wait != 0, a.debug_early_release != 0});
      else
        consumer_role(NoFault{});
    }
  }
#endif
}

// ---- host side of one instance ----
template <class Tile, class Scale, class Epilogue, class Scheduler>
struct KernelInstance {
  using Layout = SmemLayout<Tile, Scale, static_cast<int>(sizeof(typename Epilogue::OutType))>;
  using Args = KernelArgs<typename Epilogue::Params>;
  static constexpr auto kernel = sm90_gemm_kernel<Tile, Scale, Epilogue, Scheduler>;

  static void prepare() {
    WEAVE_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout::kBytes));
  }
  // CTAs of this instance the current device holds at once (clusters resident x cluster size;
  // after prepare()).
  static int resident_ctas() {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(Tile::kClusterM));
    cfg.blockDim = dim3(Tile::kThreads);
    cfg.dynamicSmemBytes = Layout::kBytes;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = Tile::kClusterM;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    WEAVE_CHECK_CUDA(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg));
    return clusters * Tile::kClusterM;
  }
  static void launch(const Args& args, int grid, cudaStream_t stream) {
    if constexpr (Tile::kClusterM > 1) {
      launch_with(nullptr, args, grid, stream);
    } else {
      kernel<<<grid, Tile::kThreads, Layout::kBytes, stream>>>(args);
      WEAVE_CHECK_LAUNCH();
    }
  }
  // One launch through cudaLaunchKernelEx with `attr` (if any) and, for a clustered instance, its
  // cluster dimension (the grid is a whole number of clusters: the planner's rule).
  static void launch_with(const cudaLaunchAttribute* attr, const Args& args, int grid, cudaStream_t stream) {
    cudaLaunchAttribute attrs[2];
    unsigned n = 0;
    if (attr != nullptr) attrs[n++] = *attr;
    if constexpr (Tile::kClusterM > 1) {
      WEAVE_EXPECT(grid % Tile::kClusterM == 0, Status::kInternal,
                   "GEMM instance of " << Tile::kClusterM << "-CTA clusters launched with grid " << grid);
      attrs[n].id = cudaLaunchAttributeClusterDimension;
      attrs[n].val.clusterDim.x = Tile::kClusterM;
      attrs[n].val.clusterDim.y = 1;
      attrs[n].val.clusterDim.z = 1;
      ++n;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(Tile::kThreads);
    cfg.dynamicSmemBytes = Layout::kBytes;
    cfg.stream = stream;
    cfg.attrs = attrs;
    cfg.numAttrs = n;
    WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, args));
  }
  // With programmatic stream serialization (the PDL prologue above; plain GEMMs only).
  // (Never a guarded launch: weave::Gemm runs the mxfp8 bf16 route, whose kernels read run_if_flag
  // first thing, without PDL.)
  static void launch_pdl(const Args& args, int grid, cudaStream_t stream) {
    const cudaLaunchAttribute attr = hopper::programmatic_serialization_attribute();
    launch_with(&attr, args, grid, stream);
  }
  static void launch_noting_start(const Args& args, int grid, cudaStream_t stream, cudaEvent_t started) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeLaunchCompletionEvent;
    attr.val.launchCompletionEvent.event = started;
    attr.val.launchCompletionEvent.flags = 0;
    launch_with(&attr, args, grid, stream);
  }
  // The table entry of this instance (gemm/dispatch.hpp), in the table of its epilogue's Params.
  static GemmKernelEntry<typename Epilogue::Params> entry(const char* name, ScaleMode mode, ScaleLayout layout,
                                                          DType out_dtype) {
    return GemmKernelEntry<typename Epilogue::Params>{
        .name = name,
        .mode = mode,
        .scale_layout = layout,
        .out_dtype = out_dtype,
        .epilogue = Epilogue::kKind,
        .scheduler = Scheduler::kKind,
        .block_m = Tile::kBlockM,
        .block_n = Tile::kBlockN,
        .block_k = Tile::kBlockK,
        .cluster_m = Tile::kClusterM,
        .stages = Layout::kStages,
        .threads = Tile::kThreads,
        .smem_bytes = Layout::kBytes,
        .epi_box_bytes = Layout::kStripRowBytes,
        .early_release_control = !single_consumer_role<Tile, Scale, Epilogue>(),
        .prepare = &prepare,
        .resident_ctas = &resident_ctas,
        .launch = &launch,
        .launch_noting_start = &launch_noting_start,
        .launch_pdl = kPdlPrologue<Epilogue> ? &launch_pdl : nullptr,
    };
  }
};

}  // namespace weave::gemm

// Defines and registers one instance (the generated files of src/gemm/instances.cmake call it).
// NAME must match the file name; EPILOGUE and SCHEDULER are fully qualified (a fused operator's
// policies live in its own namespace); LAYOUT is the mxfp8 scale layout the instance reads (kRaw for every other mode).
#define WEAVE_GEMM_KERNEL(NAME, IN, BM, BN, SCALE, EPILOGUE, SCHEDULER, MODE, LAYOUT, OUT_DTYPE)                  \
  WEAVE_GEMM_KERNEL_CLUSTER(NAME, IN, BM, BN, 1, SCALE, EPILOGUE, SCHEDULER, MODE, LAYOUT, OUT_DTYPE)
// The same with CM CTAs per cluster along M (1 or 2; gemm/kernel.cuh "Clusters").
#define WEAVE_GEMM_KERNEL_CLUSTER(NAME, IN, BM, BN, CM, SCALE, EPILOGUE, SCHEDULER, MODE, LAYOUT, OUT_DTYPE)      \
  namespace {                                                                                                 \
  using NAME##_t = ::weave::gemm::KernelInstance<::weave::gemm::TileShape<::weave::gemm::IN, BM, BN, CM>,     \
                                                 ::weave::gemm::SCALE, EPILOGUE,                              \
                                                 SCHEDULER>;                                                  \
  const bool NAME##_registered =                                                                              \
      ::weave::gemm::register_gemm_kernel(NAME##_t::entry(#NAME, MODE, LAYOUT, OUT_DTYPE));                   \
  }
