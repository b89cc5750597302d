// The persistent, warp-specialised Hopper GEMM kernel: C = A * B^T, A [M, K], B [N, K].
//
//   warpgroup 0 (producer, 40 registers): warp 0 walks the tiles; lane 0 issues the TMA loads of
//     A and B for each 128-byte K slice into a ring of `kStages` shared-memory stages; with a
//     main-loop scale policy the lanes also bring the stage's scales (cp.async, or TMA for
//     MN-major blockscale A scales, gemm/scale_policy.cuh).
//   warpgroups 1, 2 (consumers, 232 registers): wgmma from the ring, then the epilogue policy.
//
//   stage s:  full[s]  <- producer arrive.expect_tx + TMA complete_tx (+ the scale policy's
//                         cp.async arrivals: 32, or 1 for MN-major blockscale)
//             empty[s] <- lane 0 of each of the 8 consumer warps, once its wgmmas reading s are done
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
#include "gemm/scale_mx32.cuh"
#include "gemm/scale_policy.cuh"
#include "gemm/tile_config.cuh"
#include "gemm/tile_scheduler.cuh"
#include "hopper/pipeline.cuh"
#include "hopper/ptx/fence.cuh"
#include "hopper/ptx/mbarrier.cuh"
#include "hopper/ptx/misc.cuh"
#include "hopper/ptx/tma.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

inline constexpr uint32_t kProducerRegisters = 40;

// K elements per scale group of a main-loop scale policy; 0 for policies without one.
template <class Scale>
constexpr int scale_group_k() {
  if constexpr (requires { Scale::kGroupK; }) return Scale::kGroupK;
  else return 0;
}
inline constexpr uint32_t kConsumerRegisters = 232;

// Bytes a scale policy adds to each stage's TMA transaction (0 for policies without a TMA part).
template <class Scale, class Tile>
constexpr uint32_t scale_stage_tx_bytes() {
  if constexpr (requires { Scale::template stage_tx_bytes<Tile>(); }) return Scale::template stage_tx_bytes<Tile>();
  else return 0;
}
// Whether 128-row tiles run the two-block-set schedule (see the ptpc branch of the main loop):
// ptpc always; blockscale when its A scales arrive by TMA (with the cp.async gather the schedule
// was measured slower: its consumers waited for data, docs/perf/gemm.md "step 3").
template <class Scale>
constexpr bool two_block_sets() {
  if constexpr (Scale::kWhere == ScaleWhere::kEpilogue) return true;
  else if constexpr (requires { Scale::kTmaRows; }) return Scale::kTmaRows;
  else return false;
}
// Whether the consumer role is compiled once, testing the dropped-wait flag at run time, instead of
// once per flag value (see the consumer role). Measured exceptions to the copy:
//  - epilogues that set kSingleConsumerRole: the fused all-reduce's, because with two copies of
//    its epilogue ptxas spilled 68-972 bytes;
//  - mxfp8 (32-wide scale groups): its native kernels measured 3-11% slower as copies;
//  - blockscale with K-major scales on one-slice (128-row) tiles: without the flag test after the
//    wgmma wait, ptxas hoisted the factor multiplies above the stage's last wgmma, and pinning them
//    back (a false dependency on the block) serialised the wgmmas (C7511) or, where it did not,
//    still measured 1-6% slower (unpinned: 4.5-9.5%).
// Their single role is the step-8 kernel (docs/perf/gemm.md "step 9").
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

template <class Tile, class Scale, class Epilogue, class Scheduler>
__global__ void __launch_bounds__(Tile::kThreads, 1)
    sm90_gemm_kernel(const __grid_constant__ KernelArgs<typename Epilogue::Params> args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using L = SmemLayout<Tile, Scale, static_cast<int>(sizeof(typename Epilogue::OutType))>;
  using Mma = typename Tile::Mma;
  constexpr int kStages = L::kStages;
  constexpr int kAcc = Mma::kAcc;

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
  const Scheduler sched(args, Tile::kBlockM, Tile::kBlockN);
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
    ptx::prefetch_tensormap(&a.tma_b);
    ptx::prefetch_tensormap(&args.epi.tma_c);
    if constexpr (requires { Scale::prefetch_maps(a); }) Scale::prefetch_maps(a);
    for (uint32_t s = 0; s < kStages; ++s) {
      ptx::mbarrier_init_shared_cta(full_bar(s), 1 + Scale::kProducerArrivals);
      ptx::mbarrier_init_shared_cta(empty_bar(s), Tile::kConsumerThreads / 32);
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
  __syncthreads();

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
          ptx::cp_async_wait_all();
          ptx::thread_exit();
        }
      };
      uint32_t tile_iter = 0;
      for (int item = blockIdx.x; item < num_items; item += gridDim.x, ++tile_iter) {
        int tile, split, kb_begin, kb_end, m_blk, n_blk;
        item_coords(item, tile, split, kb_begin, kb_end);
        sched.coords(tile, m_blk, n_blk);
        const int m0 = m_blk * Tile::kBlockM, n0 = n_blk * Tile::kBlockN;
        if constexpr (Scale::kWhere == ScaleWhere::kEpilogue) {
          // The tile's scales, into buffer tile_iter % 2 once both warpgroups' epilogues of tile
          // tile_iter - 2 have read it (first use of each buffer: parity 1 passes at once).
          const uint32_t lap = (tile_iter >> 1) & 1u;
          wait_or_leave(tile_scale_empty(tile_iter), lap ^ 1u, hopper::WaitSite::kProducerScalesEmpty, tile_iter & 1u);
          Scale::template producer_copy_tile<Tile>(a, tile_scale_buf(tile_iter), tile_scale_full(tile_iter), m0, n0,
                                                   lane);
        }
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          // First lap: parity 1 refers to the phase "before" the barrier's first, already complete.
          wait_or_leave(empty_bar(ps.stage), ps.phase ^ 1u, hopper::WaitSite::kProducerEmpty, ps.stage);
          const uint32_t full = full_bar(ps.stage);
          if (kb == a.debug_stall_k_block && item == static_cast<int>(blockIdx.x)) {
            ps.advance();  // debug: this stage is never loaded (MainloopArgs::debug_stall_k_block)
            continue;
          }
          if (lane == 0) {
            ptx::mbarrier_arrive_expect_tx_release_cta(full, Tile::kStageBytes + scale_stage_tx_bytes<Scale, Tile>());
            ptx::cp_async_bulk_tensor_2d_global_to_shared(smem_a(ps.stage), &a.tma_a, kb * Tile::kBlockK, m0, full,
                                                          ptx::kL2EvictNormal);
            ptx::cp_async_bulk_tensor_2d_global_to_shared(smem_b(ps.stage), &a.tma_b, kb * Tile::kBlockK, n0, full,
                                                          ptx::kL2EvictNormal);
          }
          if constexpr (Scale::kWhere == ScaleWhere::kMainloop)
            Scale::template producer_copy_stage<Tile>(a, stage_scales(ps.stage), full, m0, n_blk, kb, lane);
          ps.advance();
        }
      }
    } else if (warp == 1) {
      // Idle in the plain GEMM; a fused epilogue's end of call (arrival wait, epoch store).
      if constexpr (Epilogue::kHasCallHooks)
        Epilogue::end_call(args.epi, lane, reinterpret_cast<const uint32_t*>(smem + L::kCallWordsOffset));
    }
  } else {
    // ---------------- consumers ----------------
    ptx::setmaxnreg_inc_sync_aligned_u32<kConsumerRegisters>();
    // The dropped-wait negative control (MainloopArgs::debug_drop_full_wait) is tested once, not in
    // the main loops: the role is compiled twice, with the flag a constant in each copy (a
    // std::bool_constant argument), and the kernel runs one. Tested at run time inside the loops,
    // the flag cost a constant load and two uniform branches a stage, 2.5-5% of the fp8 kernels'
    // time (docs/perf/gemm.md "step 9"). Where single_consumer_role says so, one copy tests the flag
    // at run time (`drop_wait_arg` a bool), as before.
    auto consumer_role = [&](auto drop_wait_arg) {
      const bool drop_wait = drop_wait_arg;
      // Consumer warpgroup 0..1, read through a shuffle so ptxas knows it is warp-uniform: the wgmma
      // descriptors derived from it then stay in the uniform datapath instead of being built in
      // vector registers and moved over (R2UR) before every wgmma (ptpc 128x128: 4 instructions
      // between a stage's wgmmas instead of 6-9; docs/perf/gemm.md "step 6"). Keep the code between
      // here and the main loop free of spinning waits: one (an mbarrier wait with its bounded spin)
      // made ptxas move the loop's stage arithmetic out of the uniform datapath, 8% more
      // instructions and ptpc 20% slower.
      const int cwg = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
      const int ctid = static_cast<int>(threadIdx.x) - 128;  // consumer thread 0..255
      const int row_in_wg = (warp % 4) * 16 + lane / 4;      // fragment row of this thread (and +8)
      const int col_in_n8 = (lane % 4) * 2;                  // fragment column in each n8 chunk
      hopper::PipelineState<kStages> ps;
      StagedEpilogue<Tile, L, Epilogue> epi;

      auto release = [&](uint32_t s) {
        if (lane == 0) ptx::mbarrier_arrive_release_cta(empty_bar(s));
      };
      // Every consumer wait (a stage, the tile's scales) goes through here. A consumer that gives up
      // (or sees the abort word) first retires what may still touch its registers or shared memory -
      // its wgmma groups and the reads of its TMA stores; `cp.async.wait_all` is a no-op today (every
      // scale copy is the producer's) - then leaves; C is then incomplete and the host raises the
      // recorded timeout (weave::Gemm::check, the next run()).
      auto wait_or_leave = [&](uint32_t bar, uint32_t parity, hopper::WaitSite site, uint32_t which) {
        if (!hopper::mbarrier_wait_or_abort(bar, parity, site, which, a.timeout_record, a.pipeline_timeout_ns,
                                            abort_word)) {
          ptx::wgmma_wait_group_sync_aligned<0>();
          ptx::cp_async_wait_all();
          ptx::cp_async_bulk_wait_group_read<0>();
          ptx::thread_exit();
        }
      };
      auto wait_full = [&](uint32_t s, uint32_t phase) {
        wait_or_leave(full_bar(s), phase, hopper::WaitSite::kConsumerFull, s);
      };
      // The tile's scales (epilogue scale policies) have landed in buffer t % 2.
      [[maybe_unused]] auto wait_tile_scales = [&](uint32_t t) {
        wait_or_leave(tile_scale_full(t), (t >> 1) & 1u, hopper::WaitSite::kConsumerScalesFull, t & 1u);
      };
      // The K step's 32 bytes are added to the descriptor's start-address field (address >> 4),
      // which cannot carry out of its 14 bits inside the 227 KB of shared memory: one descriptor
      // per stage and slice instead of one per wgmma.
      auto desc_a = [&](uint32_t s, int slice, int ks) {
        const int row0 = Tile::wg_row0(cwg) + slice * 64;
        return ptx::wgmma_desc_k_major_sw128(smem_a(s) + row0 * 128) + static_cast<uint64_t>(2 * ks);
      };
      // B rows are 128 bytes (one swizzle row of K), so a warpgroup's first column starts at row
      // wg_col0 of the tile: 64 rows = 8 KB, a whole number of 1 KB swizzle atoms.
      auto desc_b = [&](uint32_t s, int ks) {
        return ptx::wgmma_desc_k_major_sw128(smem_b(s) + Tile::wg_col0(cwg) * 128) + static_cast<uint64_t>(2 * ks);
      };

      uint32_t tile_iter = 0;
      for (int item = blockIdx.x; item < num_items; item += gridDim.x, ++tile_iter) {
        int tile, split, kb_begin, kb_end, m_blk, n_blk;
        item_coords(item, tile, split, kb_begin, kb_end);
        sched.coords(tile, m_blk, n_blk);
        [[maybe_unused]] const int m0 = m_blk * Tile::kBlockM;

        float acc[Tile::kSlices][kAcc];
        if constexpr (Tile::Input::kBytes == 2) {
          // bf16: fp32 accumulation in the tensor cores over the whole K. One wgmma group per stage;
          // keep one group in flight and release the stage before it.
          uint32_t prev_stage = 0;
          for (int kb = kb_begin; kb < kb_end; ++kb) {
            const uint32_t s = ps.stage;
            if (!drop_wait) wait_full(s, ps.phase);
#pragma unroll
            for (int j = 0; j < Tile::kSlices; ++j)
#pragma unroll
              for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[j][i]);
            ptx::wgmma_fence_sync_aligned();
#pragma unroll
            for (int ks = 0; ks < Tile::kKSteps; ++ks)
#pragma unroll
              for (int j = 0; j < Tile::kSlices; ++j)
                Mma::mma(acc[j], desc_a(s, j, ks), desc_b(s, ks), (kb > kb_begin || ks > 0) ? 1u : 0u);
            ptx::wgmma_commit_group_sync_aligned();
#pragma unroll
            for (int j = 0; j < Tile::kSlices; ++j)
#pragma unroll
              for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[j][i]);
            if (drop_wait) {
              ptx::wgmma_wait_group_sync_aligned<0>();
              wait_full(s, ps.phase);
            }
            if (kb > kb_begin) {
              ptx::wgmma_wait_group_sync_aligned<1>();
              release(prev_stage);
            }
            prev_stage = s;
            ps.advance();
          }
          ptx::wgmma_wait_group_sync_aligned<0>();
#pragma unroll
          for (int j = 0; j < Tile::kSlices; ++j)
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(acc[j][i]);
          release(prev_stage);
        } else if constexpr (scale_group_k<Scale>() == 32) {
          // mxfp8 (ScaleMx32): each 32-wide K group (one wgmma k32) goes into a fresh accumulator
          // set and is promoted into acc with its two ue8m0 scales. Two sets alternate so the
          // tensor cores run one group while the FMAs promote the one before; per stage s:
          //
          //   wait full[s]; issue g0 -> set0
          //   issue g1 -> set1; wait_group 1; promote g0 (set0)
          //   issue g2 -> set0; wait_group 1; promote g1 (set1)
          //   issue g3 -> set1; wait_group 1; promote g2 (set0)
          //   wait_group 0; release s; promote g3 (set1)
          //
          // Three of four promotions run under a wgmma of this warpgroup; the fourth under the other
          // warpgroup's. No wgmma is in flight across the loop's back edge and every wgmma is issued
          // on a straight path: carrying an in-flight set over the back edge (issuing the next
          // stage's g0 before promoting g3) made the compiler copy in-flight accumulators at the
          // loop header, and ptxas serialised every wgmma (C7514) or injected waits (C7517).
          static_assert(Tile::kSlices == 1 && kAcc == 64, "mxfp8 tiles: one m64n128 slice per consumer warpgroup");
          float set0[kAcc], set1[kAcc];
#pragma unroll
          for (int i = 0; i < kAcc; ++i) acc[0][i] = set0[i] = set1[i] = 0.0f;
          const int groups = a.k / 32;
          const int row_local = Tile::wg_row0(cwg) + row_in_wg;
          const uint32_t mis = Scale::template row_misalignment<Tile>(a, m0 + row_local, n_blk);
          auto issue = [&](float(&set)[kAcc], uint32_t s, int ks) {
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(set[i]);
            ptx::wgmma_fence_sync_aligned();
            Mma::mma(set, desc_a(s, 0, ks), desc_b(s, ks), 0u);
            ptx::wgmma_commit_group_sync_aligned();
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(set[i]);
          };
          auto landed = [&](float(&set)[kAcc]) {
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(set[i]);
          };
          for (int kb = kb_begin; kb < kb_end; ++kb) {
            const uint32_t s = ps.stage;
            if (!drop_wait) wait_full(s, ps.phase);
            issue(set0, s, 0);
            if (drop_wait) wait_full(s, ps.phase);
            const MxStageWords w =
                Scale::template load_words<Tile>(stage_scales(s), row_local, mis, groups - 4 * kb);
            issue(set1, s, 1);
            ptx::wgmma_wait_group_sync_aligned<1>();
            landed(set0);
            Scale::promote(acc[0], set0, w, 0);
            issue(set0, s, 2);
            ptx::wgmma_wait_group_sync_aligned<1>();
            landed(set1);
            Scale::promote(acc[0], set1, w, 1);
            issue(set1, s, 3);
            ptx::wgmma_wait_group_sync_aligned<1>();
            landed(set0);
            Scale::promote(acc[0], set0, w, 2);
            ptx::wgmma_wait_group_sync_aligned<0>();
            landed(set1);
            release(s);  // every group reading stage s is complete; its scales are in w
            Scale::promote(acc[0], set1, w, 3);
            ps.advance();
          }
        } else if constexpr (Tile::kSlices == 1 && two_block_sets<Scale>()) {
          // fp8 ptpc and TMA-scaled blockscale, one m64 slice per consumer warpgroup (128-row
          // tiles; blockscale multiplies each block by its scales as it adds it): promotion once per
          // 128-wide K block as below, but into two block accumulators, so the warpgroup keeps one
          // stage's wgmmas in flight while it promotes the stage before. Per stage s:
          //
          //   wait full[s]; issue 4 wgmma -> blk[s % 2]; commit
          //   wait_group 1 (the previous stage's group is done); release it; acc += blk[(s - 1) % 2]
          //
          // Why (docs/perf/gemm.md "step 3"): a warpgroup that waited for its own group before
          // promoting left the tensor cores one warp's dependent wgmma chain per SM sub-partition
          // while it promoted; 128x128 ptpc ran 1.2x slower than 256x128. Registers: acc + two sets
          // = 3 x kAcc (192 at 128x128). The loop is unrolled by two so each set keeps its registers:
          // set A is in flight across the back edge, never copied (the mxfp8 notes say what a copied
          // in-flight set costs). Blockscale with K-major scales keeps the path below: measured,
          // this schedule made its 128x128 tile 3-10% slower (its consumers waited for the scale
          // gathers, not for the tensor cores, and a stage is held until the next one has landed).
          // Blockscale's scales sa[r], sa[r + 8], sb are read from the stage's slot right after its
          // wgmmas are issued and carried beside the set, so the stage can be released before the
          // add; they are multiplied into the row factors only when the set is promoted, a stage
          // later. Multiplied where they are read, ptxas put the two FMULs in front of the stage's
          // last wgmma, where the warp waited for the shared loads (under the tensor cores' shared-
          // memory traffic) before it could issue it: the top stall of 128x128 at 2048x1024x5120
          // (docs/perf/gemm.md "step 10").
          constexpr bool kScaled = Scale::kWhere == ScaleWhere::kMainloop;
#pragma unroll
          for (int i = 0; i < kAcc; ++i) acc[0][i] = 0.0f;
          float blk_a[kAcc], blk_b[kAcc];
          // sa[r], sa[r + 8], sb of the stage each set holds (blockscale; unused for ptpc).
          float scl_a[3] = {1.0f, 1.0f, 1.0f}, scl_b[3] = {1.0f, 1.0f, 1.0f};
          const int row_local = Tile::wg_row0(cwg) + row_in_wg;
          auto issue_stage = [&](float(&blk)[kAcc], float(&scl)[3], uint32_t s, uint32_t phase) {
            if (!drop_wait) wait_full(s, phase);
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(blk[i]);
            ptx::wgmma_fence_sync_aligned();
#pragma unroll
            for (int ks = 0; ks < Tile::kKSteps; ++ks) Mma::mma(blk, desc_a(s, 0, ks), desc_b(s, ks), ks > 0 ? 1u : 0u);
            ptx::wgmma_commit_group_sync_aligned();
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(blk[i]);
            if (drop_wait) wait_full(s, phase);
            if constexpr (kScaled) {
              const uint32_t slot = stage_scales(s);
              scl[0] = Scale::row_scale(slot, row_local);
              scl[1] = Scale::row_scale(slot, row_local + 8);
              scl[2] = Scale::template col_scale<Tile>(slot);
            }
          };
          // After the wait for `blk`'s group: release its stage, add it into the sums.
          auto promote_stage = [&](float(&blk)[kAcc], const float(&scl)[3], uint32_t s) {
#pragma unroll
            for (int i = 0; i < kAcc; ++i) ptx::fence_operand(blk[i]);
            release(s);
            if constexpr (kScaled) {
              const float fac[2] = {scl[0] * scl[2], scl[1] * scl[2]};
              // Fragment rows: elements 4i, 4i+1 belong to row r, 4i+2, 4i+3 to row r + 8.
#pragma unroll
              for (int i = 0; i < kAcc / 4; ++i) {
                acc[0][4 * i + 0] = fmaf(blk[4 * i + 0], fac[0], acc[0][4 * i + 0]);
                acc[0][4 * i + 1] = fmaf(blk[4 * i + 1], fac[0], acc[0][4 * i + 1]);
                acc[0][4 * i + 2] = fmaf(blk[4 * i + 2], fac[1], acc[0][4 * i + 2]);
                acc[0][4 * i + 3] = fmaf(blk[4 * i + 3], fac[1], acc[0][4 * i + 3]);
              }
            } else {
#pragma unroll
              for (int i = 0; i < kAcc; ++i) acc[0][i] += blk[i];
            }
          };
          // One half of the unrolled loop: `in_flight` holds the last issued stage. Unless the K
          // range has ended, issue the next stage into `next`, then promote `in_flight` once its
          // group is done; at the end, promote it after the last group. False: the range ended.
          // Both halves name fixed sets (A then B, B then A), so no set is ever copied.
          auto half_step = [&](float(&in_flight)[kAcc], const float(&in_flight_scl)[3], uint32_t in_flight_stage,
                               float(&next)[kAcc], float(&next_scl)[3], uint32_t& next_stage, bool range_ended) {
            if (range_ended) {
              ptx::wgmma_wait_group_sync_aligned<0>();
              promote_stage(in_flight, in_flight_scl, in_flight_stage);
              return false;
            }
            next_stage = ps.stage;
            issue_stage(next, next_scl, next_stage, ps.phase);
            ps.advance();
            ptx::wgmma_wait_group_sync_aligned<1>();
            promote_stage(in_flight, in_flight_scl, in_flight_stage);
            return true;
          };
          uint32_t stage_a = ps.stage, stage_b = 0;
          issue_stage(blk_a, scl_a, stage_a, ps.phase);
          ps.advance();
          for (int kb = kb_begin;; kb += 2) {
            if (!half_step(blk_a, scl_a, stage_a, blk_b, scl_b, stage_b, kb + 1 >= kb_end)) break;
            if (!half_step(blk_b, scl_b, stage_b, blk_a, scl_a, stage_a, kb + 2 >= kb_end)) break;
          }
        } else {
          // fp8 blockscale (K-major scales: every tile; MN-major: 256-row tiles) and ptpc 256-row
          // tiles (two slices per warpgroup leave no registers for a second block set): promotion
          // once per 128-wide K block. Hopper's fp8 wgmma
          // accumulates with reduced precision, so an accumulator carried over all of K loses
          // accuracy with K (docs/gemm.md): each m64 slice's four k32 wgmmas of a stage go into one
          // fresh set `blk`, which is then added into the fp32 sums, times the block's scales for
          // blockscale (ptpc applies its per-row/col scales in the epilogue). Per stage s:
          //
          //   wait full[s]
          //   per slice j: issue 4 wgmma -> blk; (j = 0: read the block's scales); wait_group 0;
          //                (last slice: release s); acc[j] += blk * scale
          //
          // This warpgroup waits for its own wgmmas and then promotes; meanwhile the other consumer
          // warpgroup's wgmmas keep the tensor cores busy (the two run half a stage apart). One set
          // of kAcc registers beside the sums: 128x128 and 256x128 fit 232 registers. Promoting every
          // 128 K is cuBLASLt's interval for its default (non-fast-accumulation) fp8.
#pragma unroll
          for (int j = 0; j < Tile::kSlices; ++j)
#pragma unroll
            for (int i = 0; i < kAcc; ++i) acc[j][i] = 0.0f;
          float blk[kAcc];
          for (int kb = kb_begin; kb < kb_end; ++kb) {
            const uint32_t s = ps.stage;
            if (!drop_wait) wait_full(s, ps.phase);
            // The block's scales are read once the first slice's wgmmas are issued, and multiplied
            // after its wait: read before them, ptxas put the multiplies between the slice's first
            // and second wgmma, where the in-order warp waited for the loads before issuing the
            // rest (1-2.5% of MN-major 256x128's time; docs/perf/gemm.md "step 8").
            [[maybe_unused]] float sa[Tile::kSlices][2];
            [[maybe_unused]] float sb = 1.0f;
#pragma unroll
            for (int j = 0; j < Tile::kSlices; ++j) {
#pragma unroll
              for (int i = 0; i < kAcc; ++i) ptx::fence_operand(blk[i]);
              ptx::wgmma_fence_sync_aligned();
#pragma unroll
              for (int ks = 0; ks < Tile::kKSteps; ++ks)
                Mma::mma(blk, desc_a(s, j, ks), desc_b(s, ks), ks > 0 ? 1u : 0u);
              ptx::wgmma_commit_group_sync_aligned();
              if constexpr (Scale::kWhere == ScaleWhere::kMainloop) {
                if (j == 0) {
                  const uint32_t slot = stage_scales(s);
                  sb = Scale::template col_scale<Tile>(slot);
#pragma unroll
                  for (int jj = 0; jj < Tile::kSlices; ++jj) {
                    const int r = Tile::wg_row0(cwg) + jj * 64 + row_in_wg;
                    sa[jj][0] = Scale::row_scale(slot, r);
                    sa[jj][1] = Scale::row_scale(slot, r + 8);
                  }
                }
              }
              ptx::wgmma_wait_group_sync_aligned<0>();
#pragma unroll
              for (int i = 0; i < kAcc; ++i) ptx::fence_operand(blk[i]);
              if (j == Tile::kSlices - 1) {
                if (drop_wait) wait_full(s, ps.phase);
                release(s);  // scales were read above, all wgmmas on stage s are complete
              }
              // Fragment rows: elements 4i, 4i+1 belong to row r, 4i+2, 4i+3 to row r + 8.
              if constexpr (Scale::kWhere == ScaleWhere::kMainloop) {
                const float f0 = sa[j][0] * sb, f1 = sa[j][1] * sb;
#pragma unroll
                for (int i = 0; i < kAcc / 4; ++i) {
                  acc[j][4 * i + 0] = fmaf(blk[4 * i + 0], f0, acc[j][4 * i + 0]);
                  acc[j][4 * i + 1] = fmaf(blk[4 * i + 1], f0, acc[j][4 * i + 1]);
                  acc[j][4 * i + 2] = fmaf(blk[4 * i + 2], f1, acc[j][4 * i + 2]);
                  acc[j][4 * i + 3] = fmaf(blk[4 * i + 3], f1, acc[j][4 * i + 3]);
                }
              } else {
#pragma unroll
                for (int i = 0; i < kAcc; ++i) acc[j][i] += blk[i];
              }
            }
            ps.advance();
          }
        }

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
        if (item + static_cast<int>(gridDim.x) >= num_items) epi.finish(args.epi);
      }
    };
    if constexpr (single_consumer_role<Tile, Scale, Epilogue>()) {
      consumer_role(a.debug_drop_full_wait != 0);
    } else {
      if (a.debug_drop_full_wait != 0)
        consumer_role(std::true_type{});
      else
        consumer_role(std::false_type{});
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
  static void launch(const Args& args, int grid, cudaStream_t stream) {
    kernel<<<grid, Tile::kThreads, Layout::kBytes, stream>>>(args);
    WEAVE_CHECK_LAUNCH();
  }
  static void launch_noting_start(const Args& args, int grid, cudaStream_t stream, cudaEvent_t started) {
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeLaunchCompletionEvent;
    attr.val.launchCompletionEvent.event = started;
    attr.val.launchCompletionEvent.flags = 0;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(Tile::kThreads);
    cfg.dynamicSmemBytes = Layout::kBytes;
    cfg.stream = stream;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    WEAVE_CHECK_CUDA(cudaLaunchKernelEx(&cfg, kernel, args));
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
        .stages = Layout::kStages,
        .threads = Tile::kThreads,
        .smem_bytes = Layout::kBytes,
        .epi_box_bytes = Layout::kStripRowBytes,
        .prepare = &prepare,
        .launch = &launch,
        .launch_noting_start = &launch_noting_start,
    };
  }
};

}  // namespace weave::gemm

// Defines and registers one instance (the generated files of src/gemm/instances.cmake call it).
// NAME must match the file name; EPILOGUE and SCHEDULER are fully qualified (a fused operator's
// policies live in its own namespace); LAYOUT is the mxfp8 scale layout the instance reads (kRaw for every other mode).
#define WEAVE_GEMM_KERNEL(NAME, IN, BM, BN, SCALE, EPILOGUE, SCHEDULER, MODE, LAYOUT, OUT_DTYPE)                  \
  namespace {                                                                                                 \
  using NAME##_t = ::weave::gemm::KernelInstance<::weave::gemm::TileShape<::weave::gemm::IN, BM, BN>,         \
                                                 ::weave::gemm::SCALE, EPILOGUE,                              \
                                                 SCHEDULER>;                                                  \
  const bool NAME##_registered =                                                                              \
      ::weave::gemm::register_gemm_kernel(NAME##_t::entry(#NAME, MODE, LAYOUT, OUT_DTYPE));                   \
  }
