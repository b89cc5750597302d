# AllGatherGemm fused-ce's GEMM instances: a local store whose producer waits for the peers' rows
# to land (epilogue.cuh), tiles in the rotated order (own rows first). Every local tile with bf16
# output of the modes whose scales need no pre-pass (bf16, ptpc, blockscale with K-major A scales),
# so the kernel runs the planner's tile (fused/tile_choice.hpp). Read by src/CMakeLists.txt after
# src/gemm/instances.cmake.
weave_gemm_epilogue(agmrows "::weave::fused::EpilogueAgmRows<@OUT@>" "fused/ag_gemm/epilogue.cuh")
weave_gemm_scheduler(agmrotated "::weave::fused::AgmRotatedScheduler" "fused/ag_gemm/epilogue.cuh")
list(APPEND WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128 agmrows agmrotated" "bf16 bf16 128x256 agmrows agmrotated" "bf16 bf16 256x128 agmrows agmrotated"
  "bf16 bf16 128x160 agmrows agmrotated" "bf16 bf16 128x64 agmrows agmrotated" "bf16 bf16 64x128 agmrows agmrotated"
  "bf16 bf16 64x256 agmrows agmrotated" "bf16 bf16 64x64 agmrows agmrotated"
  "ptpc bf16 128x128 agmrows agmrotated" "ptpc bf16 256x128 agmrows agmrotated" "ptpc bf16 128x64 agmrows agmrotated"
  "ptpc bf16 64x128 agmrows agmrotated" "ptpc bf16 64x256 agmrows agmrotated"
  "blockscale bf16 128x128 agmrows agmrotated" "blockscale bf16 256x128 agmrows agmrotated"
  "blockscale bf16 128x64 agmrows agmrotated" "blockscale bf16 64x128 agmrows agmrotated")
