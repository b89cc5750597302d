// bf16 main loop: fp32 accumulation in the tensor cores over the whole K. One wgmma group per
// stage; one group stays in flight and the stage before it is released.
#pragma once
#include "gemm/mainloop/consumer_ring.cuh"
#include "gemm/mainloop/promote.cuh"
#include "hopper/ptx/wgmma.cuh"

namespace weave::gemm {

template <class Tile>
struct MainloopBf16 {
  static constexpr int kAcc = Tile::Mma::kAcc;

  template <class Ring, class Pipe, class Fault>
  __device__ __forceinline__ static void consume(const Ring& ring, Pipe& ps, float (&acc)[Tile::kSlices][kAcc],
                                                 const MainloopTile& t, const Fault& fault) {
    uint32_t prev_stage = 0;
    for (int kb = t.kb_begin; kb < t.kb_end; ++kb) {
      const uint32_t s = ps.stage;
      ring.acquire(s, ps.phase, fault);
#pragma unroll
      for (int j = 0; j < Tile::kSlices; ++j) fence_operands(acc[j]);
      ptx::wgmma_fence_sync_aligned();
#pragma unroll
      for (int ks = 0; ks < Tile::kKSteps; ++ks)
#pragma unroll
        for (int j = 0; j < Tile::kSlices; ++j)
          Tile::Mma::mma(acc[j], ring.desc_a(s, j, ks), ring.desc_b(s, ks), (kb > t.kb_begin || ks > 0) ? 1u : 0u);
      ptx::wgmma_commit_group_sync_aligned();
#pragma unroll
      for (int j = 0; j < Tile::kSlices; ++j) fence_operands(acc[j]);
      if (fault.drop_full_wait()) {
        ptx::wgmma_wait_group_sync_aligned<0>();
        ring.wait_full(s, ps.phase);
      }
      if (kb > t.kb_begin) {
        ptx::wgmma_wait_group_sync_aligned<1>();
        ring.release_after_reads(prev_stage, fault);
      }
      prev_stage = s;
      ps.advance();
    }
    ptx::wgmma_wait_group_sync_aligned<0>();
#pragma unroll
    for (int j = 0; j < Tile::kSlices; ++j) fence_operands(acc[j]);
    ring.release_after_reads(prev_stage, fault);
  }
};

}  // namespace weave::gemm
