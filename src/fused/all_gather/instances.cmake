# GemmAllGather's GEMM instances (fused-lsa): its epilogue stores every tile to every rank and
# signals chunks (epilogue.cuh). Every tile the local store has for the mode, so the op runs the
# tile the planner picks (fused/tile_choice.hpp): bf16 -> bf16 / fp32, fp8 -> bf16; mxfp8 has
# only 128x128. Read by src/CMakeLists.txt after src/gemm/instances.cmake.
weave_gemm_epilogue(allgather "::weave::fused::EpilogueAllGather<@OUT@>" "fused/all_gather/epilogue.cuh")
list(APPEND WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128 allgather" "bf16 bf16 128x256 allgather" "bf16 bf16 256x128 allgather"
  "bf16 bf16 128x160 allgather" "bf16 bf16 128x64 allgather" "bf16 bf16 64x128 allgather"
  "bf16 bf16 64x256 allgather" "bf16 bf16 64x64 allgather"
  "bf16 fp32 128x128 allgather" "bf16 fp32 128x256 allgather" "bf16 fp32 256x128 allgather"
  "bf16 fp32 128x160 allgather" "bf16 fp32 128x64 allgather" "bf16 fp32 64x128 allgather"
  "bf16 fp32 64x256 allgather" "bf16 fp32 64x64 allgather"
  "ptpc bf16 128x128 allgather" "ptpc bf16 256x128 allgather" "ptpc bf16 128x64 allgather"
  "ptpc bf16 64x128 allgather" "ptpc bf16 64x256 allgather"
  "blockscale bf16 128x128 allgather" "blockscale bf16 256x128 allgather" "blockscale bf16 128x64 allgather"
  "blockscale bf16 64x128 allgather"
  "blockscale_mn bf16 128x128 allgather" "blockscale_mn bf16 256x128 allgather"
  "blockscale_mn bf16 128x64 allgather" "blockscale_mn bf16 64x128 allgather"
  "mxfp8_raw bf16 128x128 allgather" "mxfp8_packed bf16 128x128 allgather")
