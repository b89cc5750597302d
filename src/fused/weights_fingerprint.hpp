// A fingerprint of a device matrix's logical contents (rows x cols elements, any leading
// dimension): the order-independent sum over every byte of a hash of (row, byte column, value), so
// it is deterministic however the GPU schedules the work, and equal exactly when the contents
// are (up to 2^-64 collisions). GemmAllGather::self_test(m, b, scale_b) compares the ranks' B
// with it: B must be identical on every rank, and nothing else would notice a rank whose B
// differs (its rows would simply be wrong on every rank).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "weave/tensor.hpp"

namespace weave::fused {

// Enqueues the fingerprint of `t` (a rank-2 device view) into *device_out (overwritten); the shape
// and dtype are mixed in, so a [2, 8] and a [4, 4] view of the same bytes differ.
void enqueue_fingerprint(const TensorView& t, std::uint64_t* device_out, cudaStream_t stream);

}  // namespace weave::fused
