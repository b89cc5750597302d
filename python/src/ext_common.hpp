// What the extension's binding files share (python/src): the Python-owned Communicator, stream
// handles, argument errors.
#pragma once
#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <string>

#include "weave/communicator.hpp"
#include "weave/error.hpp"

namespace weave_py {

[[noreturn]] inline void throw_arg(const std::string& message) {
  throw weave::Error(weave::Status::kInvalidArgument, "", "", message);
}

inline cudaStream_t as_stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

// A Communicator owned by Python. Ops keep it alive (keep_alive in their constructor).
struct PyCommunicator {
  std::unique_ptr<weave::Communicator> comm;
  weave::Communicator& get() const {
    if (!comm) throw weave::Error(weave::Status::kInvalidArgument, "", "", "Communicator: already closed");
    return *comm;
  }
};

// Element types, modes, transports, algorithms, TensorView (types_ext.cpp).
void bind_types(nanobind::module_& m);
// weave::Gemm, its plans and the mxfp8 scale packing (gemm_ext.cpp).
void bind_gemm(nanobind::module_& m);
// Communicators, collectives, NCCL versions (comm_ext.cpp).
void bind_comm(nanobind::module_& m);
// GPUs, transports, DLPack descriptions (device_ext.cpp).
void bind_device(nanobind::module_& m);
// weave::GemmAllGather, weave::GemmAllReduce, weave::GemmReduceScatter and weave::AllGatherGemm
// (fused_ext.cpp).
void bind_fused(nanobind::module_& m);
// weave::create_sharing_window (shared_ext.cpp).
void bind_shared(nanobind::module_& m);
// The model preset table (presets_ext.cpp).
void bind_presets(nanobind::module_& m);

}  // namespace weave_py
