# GemmAllGather's GEMM instances (fused-lsa): its epilogue stores every tile to every rank and
# signals chunks (epilogue.cuh). The 128x128 tile of every input mode (bf16 -> bf16 / fp32,
# fp8 -> bf16). Read by src/CMakeLists.txt after src/gemm/instances.cmake.
weave_gemm_epilogue(allgather "::weave::fused::EpilogueAllGather<@OUT@>" "fused/all_gather/epilogue.cuh")
list(APPEND WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128 allgather" "bf16 fp32 128x128 allgather" "ptpc bf16 128x128 allgather"
  "blockscale bf16 128x128 allgather" "blockscale_mn bf16 128x128 allgather" "mxfp8_raw bf16 128x128 allgather"
  "mxfp8_packed bf16 128x128 allgather")
