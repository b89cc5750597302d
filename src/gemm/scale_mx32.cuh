// ScaleMx32<Layout>: mxfp8 scales applied in the main loop, one ue8m0 byte per 1x32 block of A
// ([M, K/32]) and per 32x32 block of B ([ceil(N/32), K/32]). Hopper has no MX instruction, so each
// 32-wide K group (one wgmma k32 for e4m3) is accumulated by the tensor cores into a fresh
// accumulator and promoted into the fp32 total:
//
//   total[r, c] = fma(group[r, c], 2^(ea[r, g] - 127) * 2^(eb[c / 32, g] - 127), total[r, c])
//
// Both powers of two are built from the exponent bits (exact); their fp32 product is exact while
// 2^(ea + eb - 254) lies in [2^-149, 2^127] (below it flushes to 0, above it is Inf); a 0xFF byte
// is NaN and makes every output it touches NaN (OCP MX).
//
// Staging (per pipeline stage = 128 K = 4 groups, guarded by the stage's full barrier): the
// producer warp cp.asyncs the stage's scale bytes into the stage's slot, then each lane arms the
// full barrier with cp.async.mbarrier.arrive.noinc, exactly like ScaleBlockwise. Slot layout:
//   packed  A: one uint32 word per tile row (bytes = K groups 4kb..4kb+3, low byte first) [BM],
//           then B: one word per 32-row block of the tile [BN/32]. The words are read straight
//           from pack_mxfp8_scales' [ceil(K/128), rows] order (one 4-byte copy per row).
//   raw     the same words, but a row's 4 bytes start at any byte offset (K/32 need not be a
//           multiple of 4), so each row gets the two aligned words that cover them (8 bytes) and the
//           consumer funnel-shifts the word out by the row's byte misalignment (row * ld mod 4; the
//           host requires a 4-byte aligned base). Each copy reads only up to the row's last needed
//           byte (cp.async src-size), never past the tensor's end.
// Consumers read the same 4-group word in both layouts, so raw and packed are bitwise identical.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm/kernel_args.hpp"
#include "common/ue8m0.cuh"
#include "gemm/mx_raw_copy.hpp"
#include "gemm/scale_policy.cuh"
#include "hopper/ptx/ld_st.cuh"
#include "hopper/ptx/mbarrier.cuh"

namespace weave::gemm {

enum class MxLayout { kRaw, kPacked };

// The scale words one consumer thread needs for one stage: its two accumulator-fragment rows of
// A (r, r + 8) and the tile's four 32-row blocks of B. Byte g of a word is K group 4 * kb + g.
struct MxStageWords {
  uint32_t a0, a1;
  uint32_t b[4];
};

template <MxLayout Layout>
struct ScaleMx32 {
  static constexpr ScaleWhere kWhere = ScaleWhere::kMainloop;
  static constexpr int kGroupK = 32;                 // K elements per scale group (one wgmma k32)
  static constexpr uint32_t kProducerArrivals = 32;  // one cp.async arrival per producer lane
  static constexpr int kRowBytes = Layout == MxLayout::kRaw ? 8 : 4;

  template <class Tile>
  static constexpr int stage_bytes() {
    return ((Tile::kBlockM + Tile::kBlockN / 32) * kRowBytes + 15) / 16 * 16;
  }
  template <class Tile>
  static constexpr int tile_bytes() { return 0; }

  // ---- producer (warp 0 of the producer warpgroup, 40 registers: rolled loops) ----

  // Raw: copies the `need` bytes at base + off (base 4-byte aligned, off any) as the two aligned
  // words covering them into dst[0..8); only bytes up to the last needed one are read
  // (raw_copy_extent, CPU-tested), the rest is zero-filled. need = 0 reads nothing.
  __device__ __forceinline__ static void copy_raw_row(uint32_t dst, const uint8_t* base, int64_t off, uint32_t need) {
    const RawCopyExtent e = raw_copy_extent(off, need);
    const uint8_t* w0 = base + e.word_off;
    ptx::cp_async_ca_shared_global_4(dst, w0, e.n0);
    ptx::cp_async_ca_shared_global_4(dst + 4, e.n1 ? w0 + 4 : w0, e.n1);
  }

  template <class Tile>
  __device__ __forceinline__ static void producer_copy_stage(const MainloopArgs& a, uint32_t slot, uint32_t full_bar,
                                                             int m0, int n_blk, int kb, int lane) {
    static_assert(Tile::kBlockN == 128, "mxfp8 tiles hold four 32-row B scale blocks");
    constexpr int kBBlocks = Tile::kBlockN / 32;
    const int b_rows = (a.n + 31) / 32;
    const int nb = n_blk * kBBlocks + lane;
    if constexpr (Layout == MxLayout::kRaw) {
      const uint32_t need = static_cast<uint32_t>(min(4, a.k / 32 - 4 * kb));
      const uint8_t* base_a = static_cast<const uint8_t*>(a.scale_a);
#pragma unroll 1
      for (int i = lane; i < Tile::kBlockM; i += 32) {
        const bool in = m0 + i < a.m;
        copy_raw_row(slot + 8 * i, base_a, in ? static_cast<int64_t>(m0 + i) * a.scale_a_ld + 4 * kb : 0,
                     in ? need : 0u);
      }
      if (lane < kBBlocks) {
        const bool in = nb < b_rows;
        copy_raw_row(slot + 8 * Tile::kBlockM + 8 * lane, static_cast<const uint8_t*>(a.scale_b),
                     in ? static_cast<int64_t>(nb) * a.scale_b_ld + 4 * kb : 0, in ? need : 0u);
      }
    } else {
      const uint32_t* base_a = static_cast<const uint32_t*>(a.scale_a);
      const uint32_t* row = base_a + static_cast<int64_t>(kb) * a.scale_a_ld + m0;
#pragma unroll 1
      for (int i = lane; i < Tile::kBlockM; i += 32) {
        const bool in = m0 + i < a.m;
        ptx::cp_async_ca_shared_global_4(slot + 4 * i, in ? row + i : base_a, in ? 4 : 0);
      }
      if (lane < kBBlocks) {
        const uint32_t* base_b = static_cast<const uint32_t*>(a.scale_b);
        const bool in = nb < b_rows;
        ptx::cp_async_ca_shared_global_4(slot + 4 * Tile::kBlockM + 4 * lane,
                                         in ? base_b + static_cast<int64_t>(kb) * a.scale_b_ld + nb : base_b,
                                         in ? 4 : 0);
      }
    }
    ptx::cp_async_mbarrier_arrive_noinc_shared_cta(full_bar);
  }

  // ---- consumers ----

  // Raw only: the byte misalignment (0..3) of each of the thread's six scale rows, 2 bits each
  // (A rows r, r + 8, then B blocks 0..3), fixed for a tile: row * ld mod 4 (the host requires
  // 4-byte aligned scale tensors, so this is the address's misalignment). 0 for packed.
  template <class Tile>
  __device__ __forceinline__ static uint32_t row_misalignment(const MainloopArgs& a, int row, int n_blk) {
    if constexpr (Layout == MxLayout::kPacked) {
      return 0;
    } else {
      auto mis = [](int64_t r, int64_t ld) { return static_cast<uint32_t>((r * ld) & 3); };
      uint32_t m = mis(row, a.scale_a_ld) | mis(row + 8, a.scale_a_ld) << 2;
#pragma unroll
      for (int c = 0; c < 4; ++c) m |= mis(n_blk * 4 + c, a.scale_b_ld) << (4 + 2 * c);
      return m;
    }
  }

  // The thread's words of the stage whose slot is `slot`; row_local is the fragment row r in the
  // tile; groups_left = K/32 - 4 * kb. Bytes of groups past K (the last stage of a K that is not a
  // multiple of 128: zero-filled raw bytes, or pack_mxfp8_scales' filler) are replaced by 127
  // (scale 1.0): their wgmma partials are exact zeros (TMA zero-fill), so the promotion adds
  // nothing, whatever the tensor holds there, and no branch sits between the wgmmas.
  template <class Tile>
  __device__ __forceinline__ static MxStageWords load_words(uint32_t slot, int row_local, uint32_t mis,
                                                            int groups_left) {
    MxStageWords w = load_words_raw<Tile>(slot, row_local, mis);
    // Branch-free (a branch here would sit between in-flight wgmmas): keep = the valid bytes.
    const uint32_t keep = static_cast<uint32_t>((uint64_t{1} << (8 * min(groups_left, 4))) - 1u);
    const uint32_t fill = 0x7F7F7F7Fu & ~keep;
    w.a0 = (w.a0 & keep) | fill;
    w.a1 = (w.a1 & keep) | fill;
#pragma unroll
    for (int c = 0; c < 4; ++c) w.b[c] = (w.b[c] & keep) | fill;
    return w;
  }

  template <class Tile>
  __device__ __forceinline__ static MxStageWords load_words_raw(uint32_t slot, int row_local, uint32_t mis) {
    MxStageWords w;
    if constexpr (Layout == MxLayout::kPacked) {
      w.a0 = ptx::ld_shared_u32(slot + 4 * row_local);
      w.a1 = ptx::ld_shared_u32(slot + 4 * (row_local + 8));
      const uint4 b = ptx::ld_shared_v4_u32(slot + 4 * Tile::kBlockM);
      w.b[0] = b.x, w.b[1] = b.y, w.b[2] = b.z, w.b[3] = b.w;
    } else {
      auto word = [&](uint32_t addr, int field) {
        const uint2 v = ptx::ld_shared_v2_u32(addr);
        return __funnelshift_r(v.x, v.y, 8u * ((mis >> (2 * field)) & 3u));
      };
      w.a0 = word(slot + 8 * row_local, 0);
      w.a1 = word(slot + 8 * (row_local + 8), 1);
#pragma unroll
      for (int c = 0; c < 4; ++c) w.b[c] = word(slot + 8 * Tile::kBlockM + 8 * c, 2 + c);
    }
    return w;
  }

  // total += group * scale for K group g (0..3) of the stage, over one m64n128 accumulator
  // fragment: element 4i + {0,1} is row r, 4i + {2,3} row r + 8, columns 8i + .. (block i / 4).
  template <int kAcc>
  __device__ __forceinline__ static void promote(float (&total)[kAcc], const float (&group)[kAcc],
                                                 const MxStageWords& w, int g) {
    static_assert(kAcc == 64, "promotion is written for m64n128 fragments");
    const uint32_t sh = 8u * static_cast<uint32_t>(g);
    const float fa0 = ue8m0_to_f32((w.a0 >> sh) & 0xFFu);
    const float fa1 = ue8m0_to_f32((w.a1 >> sh) & 0xFFu);
    float s0[4], s1[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float fb = ue8m0_to_f32((w.b[c] >> sh) & 0xFFu);
      s0[c] = fa0 * fb;
      s1[c] = fa1 * fb;
    }
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i) {
      const int c = i / 4;
      total[4 * i + 0] = __fmaf_rn(group[4 * i + 0], s0[c], total[4 * i + 0]);
      total[4 * i + 1] = __fmaf_rn(group[4 * i + 1], s0[c], total[4 * i + 1]);
      total[4 * i + 2] = __fmaf_rn(group[4 * i + 2], s1[c], total[4 * i + 2]);
      total[4 * i + 3] = __fmaf_rn(group[4 * i + 3], s1[c], total[4 * i + 3]);
    }
  }
};

}  // namespace weave::gemm
