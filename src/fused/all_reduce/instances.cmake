# GemmAllReduce's GEMM instances (fused): partials to their band owners, own tiles summed and stored
# to every rank (epilogue.cuh), in the band-round tile order the schedule needs. Every bf16-output
# tile the local store has for the mode whose warpgroup columns split into the combine's batches of
# 64 (not bf16's 128x160 and 64x64), so the op runs the tile the planner picks
# (fused/tile_choice.hpp); mxfp8 has only 128x128. Read by src/CMakeLists.txt after
# src/gemm/instances.cmake.
weave_gemm_epilogue(allreduce "::weave::fused::EpilogueAllReduce<@OUT@>" "fused/all_reduce/epilogue.cuh")
weave_gemm_scheduler(bandround "::weave::fused::BandRoundScheduler" "fused/all_reduce/epilogue.cuh")
list(APPEND WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128 allreduce bandround" "bf16 bf16 128x256 allreduce bandround"
  "bf16 bf16 256x128 allreduce bandround" "bf16 bf16 128x160 allreduce bandround" "bf16 bf16 128x64 allreduce bandround"
  "bf16 bf16 64x128 allreduce bandround" "bf16 bf16 64x256 allreduce bandround" "bf16 bf16 64x64 allreduce bandround"
  "ptpc bf16 128x128 allreduce bandround" "ptpc bf16 256x128 allreduce bandround"
  "ptpc bf16 128x64 allreduce bandround" "ptpc bf16 64x128 allreduce bandround"
  "ptpc bf16 64x256 allreduce bandround"
  "blockscale bf16 128x128 allreduce bandround" "blockscale bf16 256x128 allreduce bandround"
  "blockscale bf16 128x64 allreduce bandround" "blockscale bf16 64x128 allreduce bandround"
  "blockscale_mn bf16 128x128 allreduce bandround" "blockscale_mn bf16 256x128 allreduce bandround"
  "blockscale_mn bf16 128x64 allreduce bandround" "blockscale_mn bf16 64x128 allreduce bandround"
  "mxfp8_raw bf16 128x128 allreduce bandround"
  "mxfp8_packed bf16 128x128 allreduce bandround")
