# GemmAllReduce's GEMM instances (fused): partials to their band owners, own tiles summed and stored
# to every rank (epilogue.cuh), in the band-round tile order the schedule needs. The 128x128 tile
# of every input mode, bf16 out. Read by src/CMakeLists.txt after src/gemm/instances.cmake.
weave_gemm_epilogue(allreduce "::weave::fused::EpilogueAllReduce<@OUT@>" "fused/all_reduce/epilogue.cuh")
weave_gemm_scheduler(bandround "::weave::fused::BandRoundScheduler" "fused/all_reduce/epilogue.cuh")
list(APPEND WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128 allreduce bandround" "ptpc bf16 128x128 allreduce bandround"
  "blockscale bf16 128x128 allreduce bandround" "blockscale_mn bf16 128x128 allreduce bandround"
  "mxfp8_raw bf16 128x128 allreduce bandround"
  "mxfp8_packed bf16 128x128 allreduce bandround")
