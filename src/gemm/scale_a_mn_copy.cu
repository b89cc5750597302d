// Blockscale A scales, row-major -> MN-major (gemm/scale_a_mn_copy.hpp).
#include "gemm/scale_a_mn_copy.hpp"

#include "common/check.hpp"
#include "weave/quant.hpp"

namespace weave::gemm {
namespace {

constexpr int kTile = 32;     // rows x K blocks per CTA
constexpr int kRowsStep = 8;  // blockDim.y

// A 32 x 32 tile through shared memory: each warp reads one row's K blocks (contiguous) and writes
// one K block's 32 rows (contiguous, 128 bytes), so both sides are coalesced. The +1 column keeps
// the transposed reads free of bank conflicts.
__global__ void __launch_bounds__(kTile * kRowsStep) scale_a_mn_copy_kernel(const ScaleAMnCopy op) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t row0 = int64_t{blockIdx.x} * kTile;
  const int tx = static_cast<int>(threadIdx.x);
  // K-block tiles beyond the grid's y extent (65535) are strided over.
  for (int64_t kb0 = int64_t{blockIdx.y} * kTile; kb0 < op.k_blocks; kb0 += int64_t{gridDim.y} * kTile) {
    for (int r = static_cast<int>(threadIdx.y); r < kTile; r += kRowsStep) {
      const int64_t row = row0 + r, kb = kb0 + tx;
      if (row < op.m && kb < op.k_blocks) tile[r][tx] = op.src[row * op.src_ld + kb];
    }
    __syncthreads();
    for (int c = static_cast<int>(threadIdx.y); c < kTile; c += kRowsStep) {
      const int64_t kb = kb0 + c, row = row0 + tx;
      if (row < op.m && kb < op.k_blocks) op.dst[kb * op.dst_ld + row] = tile[tx][c];
    }
    __syncthreads();  // the tile is refilled by the next K-block tile
  }
}

}  // namespace

int64_t scale_a_mn_copy_bytes(int64_t m, int64_t k_blocks) {
  return k_blocks * ref::mn_major_scale_ld(m) * static_cast<int64_t>(sizeof(float));
}

void scale_a_mn_copy(const ScaleAMnCopy& op, cudaStream_t stream) {
  const int64_t kb_tiles = (op.k_blocks + kTile - 1) / kTile;
  const dim3 grid(static_cast<unsigned>((op.m + kTile - 1) / kTile), static_cast<unsigned>(kb_tiles < 65535 ? kb_tiles : 65535));
  scale_a_mn_copy_kernel<<<grid, dim3(kTile, kRowsStep), 0, stream>>>(op);
  WEAVE_CHECK_CUDA(cudaGetLastError());
}

}  // namespace weave::gemm
