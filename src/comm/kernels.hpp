// Launchers of the protocol kernels (lsa: one kernel per call; ce: small protocol kernels around
// copy-engine copies). Host-callable; the argument structs are trivially copyable and passed by
// value. Each launcher checks the launch (WEAVE_CHECK_LAUNCH).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "comm/device_error.hpp"
#include "weave/collectives.hpp"
#include "weave/types.hpp"
#include "weave/window_handle.hpp"

namespace weave::comm {

// What every protocol kernel needs besides its data pointers. Trivially copyable.
struct Proto {
  WindowHandle win;
  uint64_t control, credits, flags;
  int max_blocks;
  int flow_control;
  uint64_t timeout_ns;
  DeviceErrorRecord* err;     // mapped host memory
  int ranks_per_device;       // ranks sharing this GPU (1; W in the emulated world): grids share its SMs
};

// Where a call's zero-copy buffers sit in the window (docs/memory_ordering.md "zero-copy-offsets"):
// push, the landing offset in every receiver's window (stride: bytes per rank's block); pull, rank
// 0's block in every sender's window and the stride between blocks. Every rank publishes its key to
// each peer with the call's lag-0 handshake (credit or ready flag) and compares the peer's with its
// own right after it, before any store to that peer: a mismatch is recorded (kMismatch) instead of
// landing where the peer does not expect it. check = 0: the call has no peer-addressed zero-copy
// buffer (fixed staging regions only), so nothing is published or compared.
struct ZeroCopyKey {
  uint64_t offset = 0, stride = 0;
  int check = 0;
};

// One lsa call. Offsets are into every rank's window (symmetric).
struct LsaCall {
  Proto p;
  const char* in = nullptr;  // local input (any device memory)
  char* out = nullptr;       // local output (any device memory)
  size_t count = 0;          // all-gather: bytes per rank; reduce-scatter: output elems; all-reduce: elems
  uint64_t land = 0;         // where pushes land in every rank's window (all-gather / two-shot gather leg)
  int copy_out = 0;          // 1: `out` is not the landing area; copy what landed into it
  int in_place = 0;          // all-gather: in == out + rank*count
  uint64_t src_off = 0, src_stride = 0;  // pull: sender p's chunk at src_off + p * src_stride
  int stage_in = 0;          // pull: copy `in` to src_off + rank * src_stride first
  uint64_t staging = 0, slot_bytes = 0, stride = 0;  // reduction staging (slots of slot_bytes)
  uint32_t slots = 2;
  uint32_t credit_lag = 0;   // credit needed for call e = e - credit_lag
  ZeroCopyKey zc;            // land (push, two-shot) or src_off / src_stride (pull); checked with lag 0 only
  int blocks = 1;
};

// One lsa low-latency (LL) call (ll_kernels.cu): every rank stores its payload for each peer as
// flag-in-data lines into that peer's LL buffer, then polls its own LL buffer and consumes what
// arrived (all-gather: copy out; reduce-scatter / all-reduce: fp32 sum in rank order).
struct LlCall {
  Proto p;
  const char* in = nullptr;  // local input (any device memory, any alignment)
  char* out = nullptr;       // local output
  size_t count = 0;          // as LsaCall
  int in_place = 0;          // all-gather: in == out + rank * count
  uint64_t ll = 0, ll_stride = 0;  // LL buffers: [slots][source][ll_stride] in every rank's window
  uint32_t slots = 2;        // 1 only in the negative control (flow_control = false)
  uint64_t receive_delay_ns = 0;   // testing hook: wait between sending and receiving
  int blocks = 1;
};
void launch_lsa_ll(const LlCall& c, CollectiveOp op, DType dtype, cudaStream_t stream);
// Grid of an LL call moving `payload_bytes` per peer: one 8-byte unit per thread.
int ll_blocks_for(size_t payload_bytes, int max_blocks);

// Flags and credits start at initial_epoch - slot_lag (testing: a slot last written long ago).
void launch_init_op(const Proto& p, uint32_t initial_epoch, cudaStream_t stream, uint32_t slot_lag = 0);
void launch_lsa_all_gather_push(const LsaCall& c, cudaStream_t stream);
void launch_lsa_all_gather_pull(const LsaCall& c, cudaStream_t stream);
void launch_lsa_reduce_scatter(const LsaCall& c, DType dtype, cudaStream_t stream);
void launch_lsa_all_reduce_one_shot(const LsaCall& c, DType dtype, cudaStream_t stream);
void launch_lsa_all_reduce_two_shot(const LsaCall& c, DType dtype, cudaStream_t stream);

// ce protocol: enter (epoch + 1, publish ready, wait credits >= e - lag) and arrive (publish
// phase flag e after the copies, wait every peer's).
// With zc.check (lag 0 only) the peers' zero-copy keys are compared after the credit wait.
void launch_ce_enter(const Proto& p, uint32_t credit_lag, bool use_credits, cudaStream_t stream,
                     const ZeroCopyKey& zc = {});
void launch_ce_arrive(const Proto& p, int phase, cudaStream_t stream, FlagKind kind = FlagKind::kArrival);
// ce pull all-gather, device-triggered: enter (epoch + 1; "block readable" flag to peers; wait
// theirs) then store trigger word kCtrlTrigger + s - 1 = 1 for copy stream s (ce_kernels.cu).
void launch_ce_pull_enter(const Proto& p, cudaStream_t stream, const ZeroCopyKey& zc = {});
// `rows` rows of `row_bytes` from src (pitch src_pitch) to dst (pitch dst_pitch) by SM copies, and
// nothing once the op's abort word is set (a slow peer may still read dst: "peer-abort").
void launch_gated_rows_copy(const Proto& p, char* dst, size_t dst_pitch, const char* src, size_t src_pitch,
                            size_t row_bytes, int64_t rows, int blocks, cudaStream_t stream);
// Testing only: a one-thread kernel that spins `ns` on `stream` (a slow copy stream).
void launch_testing_delay(uint64_t ns, cudaStream_t stream);
// ce push, gated (docs/memory_ordering.md "ce-gate"): for every peer q, bytes[q] bytes from
// src[q] (local) to offset dst_off[q] of q's window, by SM stores, then a system fence; NOTHING
// once the op's abort word is set (a wait of this call or an earlier one failed). Launched on the
// caller's stream after the kernel whose waits grant the writes, so it sees that kernel's verdict.
struct CePut {
  Proto p;
  const char* src[kMaxWorld] = {};
  uint64_t dst_off[kMaxWorld] = {};
  size_t bytes[kMaxWorld] = {};
  int blocks = 1;
};
void launch_ce_put(const CePut& c, cudaStream_t stream);
// Local reduction of the staged slots of the current call (rank order, fp32 accumulation):
// dst[i] = sum_s (s == rank ? own[i] : staging[slot(e)][s][i]) for i in [0, count).
struct ReduceCall {
  Proto p;
  const char* own = nullptr;
  char* dst = nullptr;
  size_t count = 0;
  uint64_t staging = 0, slot_bytes = 0, stride = 0;
  uint32_t slots = 2;
  int blocks = 1;
  uint64_t receive_delay_ns = 0;  // testing hook: wait this long before reducing (comm::CollectiveHooks)
};
void launch_local_reduce(const ReduceCall& c, DType dtype, cudaStream_t stream);
// Stores `bytes` from `src` to offset `dst_off` of every peer's window with SM 16-byte stores, then
// fences at system scope (no flags: the ce arrive kernel that follows publishes them).
// `bytes` from src to dst (both local) with SM stores, skipped once the op aborted.
void launch_gated_local_copy(const Proto& p, char* dst, const char* src, size_t bytes, int blocks, cudaStream_t stream);
void launch_sm_put(const Proto& p, uint64_t dst_off, const char* src, size_t bytes, int blocks, cudaStream_t stream);

// CTAs of `kernel` (with `threads` threads, no dynamic shared memory) that fit on the current
// device at once: SMs x its own occupancy, computed once per kernel. Every kernel whose CTAs wait
// for peers' CTAs is launched with at most this / ranks_per_device CTAs (docs/memory_ordering.md
// "residency").
int co_resident_blocks(const void* kernel, int threads);
// SMs of the current device (cached).
int device_sms();

// Largest grid of the lsa kernels on `device` for `world` ranks (co-resident CTAs of
// kLsaThreads, at most 2 per SM).
int lsa_max_blocks(int device, int world);
inline constexpr int kLsaThreads = 512;
// Grid for a call moving `bytes` per peer: ~32 KB per block, at most max_blocks.
int lsa_blocks_for(size_t bytes, int max_blocks);

}  // namespace weave::comm
