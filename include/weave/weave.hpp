// Everything public in one include: errors, element types and tensor views, GPUs, quantisation
// references, the local GEMM, communicators, symmetric windows and collectives. Host-only C++20;
// needs cuda_runtime.h and nccl.h on the include path (the weave::weave CMake target brings both).
#pragma once

#include "weave/collectives.hpp"
#include "weave/communicator.hpp"
#include "weave/device.hpp"
#include "weave/error.hpp"
#include "weave/fused_plan.hpp"
#include "weave/gemm.hpp"
#include "weave/all_gather_gemm.hpp"
#include "weave/gemm_all_gather.hpp"
#include "weave/gemm_all_reduce.hpp"
#include "weave/gemm_reduce_scatter.hpp"
#include "weave/layer_presets.hpp"
#include "weave/presets.hpp"
#include "weave/quant.hpp"
#include "weave/quantize.hpp"
#include "weave/reference.hpp"
#include "weave/shared_window.hpp"
#include "weave/tensor.hpp"
#include "weave/transport.hpp"
#include "weave/types.hpp"
#include "weave/version.hpp"
#include "weave/window_handle.hpp"
#include "weave/window_layout.hpp"
