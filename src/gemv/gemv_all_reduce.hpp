// The decode GEMV with an all-reduce epilogue (GemmAllReduce's mode decode-fused; internal): one
// kernel computes this rank's bf16 partial of C [M, N] and all-reduces it over the op's window with
// low-latency (LL) lines, each band's lines leaving as soon as its cluster has reduced them.
//
//   rank r, call e (f = ll_flag(e), P = M x N x 2, slot = e mod 2), CTA of cluster rank c, band b:
//     after its cluster's reduction, for each of its units u (4 columns of one token, rows
//     [b 128 + 4 u, +4) of B): the unit's 4 bf16 partials (exactly what mode decode's GEMV stores)
//       -> line {d0, f, d1, f ^ P} into every peer q's ll[slot][r][token][b][u]
//     then polls ll[slot][q][token][b][u] of this rank's window for every peer q, sums the W
//     partials in fp32 in rank order 0..W-1 (the LL all-reduce's order) and stores bf16 into C;
//     the CTA with the last election ticket stores the epoch (call_protocol.cuh end_call).
// Same roundings, same order, same K split (GemmAllReduce's mode decode runs this kernel's): bitwise
// equal to mode decode (its GEMV, then the LL all-reduce).
// A cluster waits for the same band's cluster of every peer, so the kernel runs only where every
// cluster of every rank sharing the GPU is resident at once (gemv_all_reduce_config: one wave).
// Memory ordering: docs/memory_ordering.md "decode-one-kernel".
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "comm/kernels.hpp"
#include "comm/protocol.hpp"
#include "gemv/gemv.hpp"

namespace weave::detail {

// A band's 128 output columns as LL units of 4 bf16 (8 payload bytes, one line each).
inline constexpr int kGemvLlUnitsPerBand = 32;

// Bytes of one (slot, source) part of the LL region: [kGemvMaxM tokens][bands][32 units] lines,
// independent of M, so every call's lines sit at the same place.
constexpr uint64_t gemv_ll_source_bytes(int64_t n) {
  return static_cast<uint64_t>(kGemvMaxM) * static_cast<uint64_t>((n + 127) / 128) * kGemvLlUnitsPerBand *
         comm::kLLLineBytes;
}
// The whole LL region of a window: [kLLSlots][world] parts.
constexpr uint64_t gemv_ll_region_bytes(int64_t n, int world) {
  return comm::kLLSlots * static_cast<uint64_t>(world) * gemv_ll_source_bytes(n);
}

// The epilogue's kernel parameter (host/device POD).
struct GemvAllReduce {
  comm::Proto p;                 // the op's window, control words (epoch, abort, election), timeout
  uint64_t ll = 0;               // the LL region's offset in every window
  uint64_t source_bytes = 0;     // gemv_ll_source_bytes(n)
  uint32_t slots = comm::kLLSlots;
  uint32_t payload_bytes = 0;    // M x N x 2: in every line's second flag (ranks agreeing on M)
  // Testing hooks (never set in production):
  uint64_t delay_sends_ns = 0;   // a slow rank: its CTAs send this much later
  uint64_t delay_receive_ns = 0; // a slow receiver: its CTAs wait this long between sending and receiving
  int32_t no_wait = 0;           // the negative control: take each peer's line as found, flag unchecked
  int32_t skip_push_rank = -1;   // the landing wait's: this cluster rank pushes no partials (M <= 8)
};

// The launch shape: gemv_config's registers path, its least modelled time among the K splits whose
// clusters are all resident at once beside those of the other ranks sharing this GPU (the device's
// residency of the all-reduce kernel divided by ranks_per_device). Throws Error(kUnavailable)
// naming the shape when no split keeps the grid within one wave.
GemvConfig gemv_all_reduce_config(const GemmProblem& problem, int num_sms, int ranks_per_device);
// Enqueues the kernel (no allocation, graph-capturable): args as gemv_launch's (C: this rank's
// [M, N] bf16 output, N a multiple of 4), ar.payload_bytes = M N 2. PDL only where args.pdl and
// one rank per GPU (ranks sharing a GPU: docs/memory_ordering.md "residency").
void gemv_all_reduce_launch(const GemvArgs& args, const GemvAllReduce& ar, int num_sms, cudaStream_t stream);

}  // namespace weave::detail
