#include "comm/stream_mem_ops.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include "comm/group.hpp"
#include "common/check.hpp"
#include "common/driver_api.hpp"

namespace weave::comm {

// Only the 32-bit operations are used. Since CUDA 11.7 (the V2 entry points) they are available
// on every device and platform and have no device attribute; CAN_USE_64_BIT_STREAM_MEM_OPS
// describes cuStreamWaitValue64 / WriteValue64 only, so it is not asked (a device without 64-bit
// operations would have been refused for no reason). What can be missing is a driver too old to
// provide the V2 entry points.
std::string StreamMemOps::unsupported_reason(int device) {
  try {
    auto get = driver_fn<PFN_cuDeviceGetAttribute_v2000>("cuDeviceGetAttribute", 2000);
    int major = 0;
    if (get(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS)
      return "cuda:" + std::to_string(device) + " cannot be queried";
    driver_fn<PFN_cuStreamWaitValue32_v11070>("cuStreamWaitValue32", 11070);
    driver_fn<PFN_cuStreamWriteValue32_v11070>("cuStreamWriteValue32", 11070);
    return "";
  } catch (const Error& e) {
    return "the CUDA driver cannot be asked: " + e.message();
  }
}

StreamMemOps::StreamMemOps(int device) {
  const std::string why = unsupported_reason(device);
  WEAVE_EXPECT(why.empty(), Status::kUnavailable, "device-triggered copies need stream memory operations: " << why);
  wait_ = reinterpret_cast<void*>(driver_fn<PFN_cuStreamWaitValue32_v11070>("cuStreamWaitValue32", 11070));
  write_ = reinterpret_cast<void*>(driver_fn<PFN_cuStreamWriteValue32_v11070>("cuStreamWriteValue32", 11070));
}

std::unique_ptr<StreamMemOps> StreamMemOps::agreed(const Group& g, std::string_view what) {
  const std::string why = unsupported_reason(g.device());
  g.agree_ok(why.empty(), what, why);
  return std::make_unique<StreamMemOps>(g.device());
}

void StreamMemOps::wait_eq(cudaStream_t stream, const uint32_t* word, uint32_t value) const {
  auto fn = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(wait_);
  WEAVE_CHECK_CU(fn(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), value,
                    CU_STREAM_WAIT_VALUE_EQ));
}

void StreamMemOps::write(cudaStream_t stream, uint32_t* word, uint32_t value) const {
  auto fn = reinterpret_cast<PFN_cuStreamWriteValue32_v11070>(write_);
  WEAVE_CHECK_CU(fn(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), value,
                    CU_STREAM_WRITE_VALUE_DEFAULT));
}

void StreamMemOps::triggered_copy(cudaStream_t stream, uint32_t* trigger, void* dst, const void* src,
                                  size_t bytes) const {
  wait_eq(stream, trigger, 1u);
  write(stream, trigger, 0u);
  WEAVE_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace weave::comm
