// Thin 1:1 wrappers over programmatic dependent launch (PTX ISA "griddepcontrol"): a kernel
// launched with cudaLaunchAttributeProgrammaticStreamSerialization may start before the previous
// kernel on its stream has finished; it must call griddepcontrol_wait() before touching memory
// that kernel may write. Used by the GEMV and the lsa collective kernels.
#pragma once

namespace weave::ptx {

// griddepcontrol.wait: blocks until the grids this one depends on (programmatic dependent launch)
// have completed and their memory operations are visible; a no-op without such a dependency.
__device__ __forceinline__ void griddepcontrol_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// griddepcontrol.launch_dependents: lets the dependent grid be scheduled once every CTA of this
// grid has issued it (or exited); a no-op without a dependent. It orders nothing: the dependent's
// griddepcontrol.wait still waits for this whole grid to complete.
__device__ __forceinline__ void griddepcontrol_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

}  // namespace weave::ptx
