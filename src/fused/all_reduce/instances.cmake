# GemmAllReduce's GEMM instances (fused): partials to their band owners, own tiles summed and stored
# to every rank (epilogue.cuh), in the band-round tile order the schedule needs. Every bf16-output
# tile the local store has for the mode, so the op runs the tile the planner picks
# (fused/tile_choice.hpp); mxfp8 has only 128x128. Read by src/CMakeLists.txt after
# src/gemm/instances.cmake.
# Not yet: bf16's 128x160 and 64x64 (weave::Gemm's wave tiles; the fused planners take them as soon
# as they are built: 128x160 at qwen3 o_proj m 256, 64x64 at m 64 of N 7168). They compile and the
# epilogue and the op's maps handle them (64-byte strips, batches of 4 chunks), but no GPU has run
# them: configure with (or set the same variable in the environment of scripts/pack_prebuilt.sh or
# scripts/device_build.sh)
#   -DWEAVE_GEMM_EXTRA_INSTANCES="bf16 bf16 128x160 allreduce bandround;bf16 bf16 64x64 allreduce bandround"
# and run EmulatedFusedOp/GemmAllReduce.EveryBuiltTileFusedEqualsSplit and
# EmulatedGemmReduceScatter.EveryBuiltTileFusedEqualsSplit (both force every candidate at N 672)
# before the two specs move into the list below.
weave_gemm_epilogue(allreduce "::weave::fused::EpilogueAllReduce<@OUT@>" "fused/all_reduce/epilogue.cuh")
weave_gemm_scheduler(bandround "::weave::fused::BandRoundScheduler" "fused/all_reduce/epilogue.cuh")
list(APPEND WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128 allreduce bandround" "bf16 bf16 128x256 allreduce bandround"
  "bf16 bf16 256x128 allreduce bandround" "bf16 bf16 128x64 allreduce bandround"
  "bf16 bf16 64x128 allreduce bandround" "bf16 bf16 64x256 allreduce bandround"
  "ptpc bf16 128x128 allreduce bandround" "ptpc bf16 256x128 allreduce bandround"
  "ptpc bf16 128x64 allreduce bandround" "ptpc bf16 64x128 allreduce bandround"
  "ptpc bf16 64x256 allreduce bandround"
  "blockscale bf16 128x128 allreduce bandround" "blockscale bf16 256x128 allreduce bandround"
  "blockscale bf16 128x64 allreduce bandround" "blockscale bf16 64x128 allreduce bandround"
  "blockscale_mn bf16 128x128 allreduce bandround" "blockscale_mn bf16 256x128 allreduce bandround"
  "blockscale_mn bf16 128x64 allreduce bandround" "blockscale_mn bf16 64x128 allreduce bandround"
  "mxfp8_raw bf16 128x128 allreduce bandround"
  "mxfp8_packed bf16 128x128 allreduce bandround")
