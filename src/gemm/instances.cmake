# The GEMM kernel instances: one generated .cu per entry, so builds parallelise, a developer loop
# can build a subset (-DWEAVE_GEMM_KERNELS=<file stems>), and adding a tile, mode or epilogue is
# one line instead of a hand-written file. Each entry is
#   "<scale> <out> <block_m>x<block_n>[c2] [<epilogue> [<scheduler>]]"
#   scale      bf16 (bf16 inputs, no scales) | ptpc | blockscale | blockscale_mn (A scales MN-major,
#              loaded by TMA) | mxfp8_raw | mxfp8_packed (e4m3 inputs)
#   out        bf16 | fp32
#   c2         launched in 2-CTA clusters along M, B multicast across the pair (gemm/kernel.cuh
#              "Clusters"; plain GEMMs only); the name gains _c2
#   epilogue   store (EpilogueStoreLocal, the default), or one a fused operator registers with
#              weave_gemm_epilogue (its own instances.cmake, e.g. src/fused/all_reduce/)
#   scheduler  grouped (GroupedRowsScheduler, the default), or one registered with
#              weave_gemm_scheduler
# The key an instance registers under (gemm/dispatch.hpp) is exactly these fields. This file lists
# the plain GEMM's instances; each fused operator appends its own to WEAVE_GEMM_INSTANCE_SPECS, so
# src/gemm names no fused type.
set(WEAVE_GEMM_INSTANCE_SPECS
  "bf16 bf16 128x128" "bf16 bf16 128x256" "bf16 bf16 256x128"
  "bf16 fp32 128x128" "bf16 fp32 128x256" "bf16 fp32 256x128"
  "ptpc bf16 128x128" "ptpc bf16 256x128" "ptpc fp32 128x128" "ptpc fp32 256x128"
  # 160 columns (bf16): where 128 and 256 quantise the waves badly (the planner's wave rule).
  "bf16 bf16 128x160" "bf16 fp32 128x160"
  # Narrow tiles for small M / N (the planner's wave rule takes them where 128-wide tiles idle SMs).
  "bf16 bf16 128x64" "bf16 fp32 128x64" "ptpc bf16 128x64" "ptpc fp32 128x64"
  # 64-row tiles for small M (the planner offers them at M <= 128; the two consumer warpgroups split
  # the columns: TileShape::kSplitN).
  "bf16 bf16 64x128" "bf16 fp32 64x128" "ptpc bf16 64x128" "ptpc fp32 64x128"
  "bf16 bf16 64x256" "bf16 fp32 64x256" "ptpc bf16 64x256" "ptpc fp32 64x256"
  "bf16 bf16 64x64" "bf16 fp32 64x64"
  "blockscale bf16 128x128" "blockscale bf16 256x128" "blockscale fp32 128x128" "blockscale fp32 256x128"
  "blockscale_mn bf16 128x128" "blockscale_mn bf16 256x128" "blockscale_mn fp32 128x128" "blockscale_mn fp32 256x128"
  # Small-M blockscale (issue 38 item 2): 128x64 doubles the tiles where N / 128 leaves SMs idle,
  # 64x128 stops computing a 128-row tile's empty half at M <= 64 (docs/perf/gemm.md, small M).
  "blockscale bf16 128x64" "blockscale fp32 128x64" "blockscale bf16 64x128" "blockscale fp32 64x128"
  "blockscale_mn bf16 128x64" "blockscale_mn fp32 128x64" "blockscale_mn bf16 64x128" "blockscale_mn fp32 64x128"
  "mxfp8_raw bf16 128x128" "mxfp8_raw fp32 128x128" "mxfp8_packed bf16 128x128" "mxfp8_packed fp32 128x128"
  # 2-CTA clusters with B multicast (issue 41 item 2): fp8 at the large-M tiles, forced with the
  # override 'cluster' until measured (planner_tiles.cpp).
  "ptpc bf16 128x128c2" "ptpc bf16 256x128c2" "blockscale_mn bf16 128x128c2" "blockscale_mn bf16 256x128c2")

# Epilogue and scheduler policies an entry may name: the C++ type (@OUT@ stands for the output
# element type) and the header that defines it ("" for the kernel's own).
macro(weave_gemm_epilogue name type header)
  set(WEAVE_GEMM_EPILOGUE_${name}_TYPE "${type}")
  set(WEAVE_GEMM_EPILOGUE_${name}_HEADER "${header}")
endmacro()
macro(weave_gemm_scheduler name type header)
  set(WEAVE_GEMM_SCHEDULER_${name}_TYPE "${type}")
  set(WEAVE_GEMM_SCHEDULER_${name}_HEADER "${header}")
endmacro()
weave_gemm_epilogue(store "::weave::gemm::EpilogueStoreLocal<@OUT@>" "")
weave_gemm_scheduler(grouped "::weave::gemm::GroupedRowsScheduler" "")

# Writes the instance files into `out_dir` (rewritten only when their text changes) and returns
# their paths in `out_var`.
function(weave_generate_gemm_instances out_dir out_var)
  set(files "")
  foreach(spec ${WEAVE_GEMM_INSTANCE_SPECS})
    string(REPLACE " " ";" f "${spec}")
    list(LENGTH f n)
    list(GET f 0 scale)
    list(GET f 1 out)
    list(GET f 2 tile)
    set(epilogue store)
    set(scheduler grouped)
    if(n GREATER 3)
      list(GET f 3 epilogue)
    endif()
    if(n GREATER 4)
      list(GET f 4 scheduler)
    endif()
    set(cm 1)
    set(csuffix "")
    if(tile MATCHES "c2$")
      set(cm 2)
      set(csuffix "_c2")
      string(REGEX REPLACE "c2$" "" tile "${tile}")
    endif()
    string(REPLACE "x" ";" t "${tile}")
    list(GET t 0 bm)
    list(GET t 1 bn)
    set(layout "::weave::ScaleLayout::kRaw")
    if(scale STREQUAL "bf16")
      set(in InBf16)
      set(bk 64)
      set(policy ScaleNone)
      set(mode kBF16)
      set(stem "bf16")
      set(what "bf16 x bf16")
    elseif(scale STREQUAL "ptpc")
      set(in InE4m3)
      set(bk 128)
      set(policy ScalePerRowCol)
      set(mode kPtpc)
      set(stem "e4m3_ptpc")
      set(what "e4m3 x e4m3, per-row x per-column scales in the epilogue, promoted per 128-wide K block")
    elseif(scale STREQUAL "blockscale")
      set(in InE4m3)
      set(bk 128)
      set(policy "ScaleBlockwise<::weave::gemm::BlockScaleLoad::kKMajor>")
      set(mode kBlockscale)
      set(stem "e4m3_blockscale")
      set(what "e4m3 x e4m3, 1x128 / 128x128 block scales promoted per K block")
    elseif(scale STREQUAL "blockscale_mn")
      set(in InE4m3)
      set(bk 128)
      set(policy "ScaleBlockwise<::weave::gemm::BlockScaleLoad::kMnMajor>")
      set(mode kBlockscale)
      set(layout "::weave::ScaleLayout::kMnMajor")
      set(stem "e4m3_blockscale_mn")
      set(what "e4m3 x e4m3, 1x128 (MN-major, by TMA) / 128x128 block scales promoted per K block")
    elseif(scale STREQUAL "mxfp8_raw" OR scale STREQUAL "mxfp8_packed")
      string(REPLACE "mxfp8_" "" lay "${scale}")
      set(in InE4m3)
      set(bk 128)
      set(mode kMxfp8)
      set(stem "e4m3_mxfp8_${lay}")
      if(lay STREQUAL "raw")
        set(policy "ScaleMx32<::weave::gemm::MxLayout::kRaw>")
      else()
        set(policy "ScaleMx32<::weave::gemm::MxLayout::kPacked>")
        set(layout "::weave::ScaleLayout::kPacked")
      endif()
      set(what "e4m3 x e4m3, mxfp8 (ue8m0 1x32 / 32x32, ${lay} scale layout) promoted per 32-wide K group")
    else()
      message(FATAL_ERROR "weave: GEMM instance '${spec}': unknown scale '${scale}'")
    endif()
    if(out STREQUAL "bf16")
      set(out_type "__nv_bfloat16")
      set(out_dtype "::weave::DType::kBF16")
    elseif(out STREQUAL "fp32")
      set(out_type "float")
      set(out_dtype "::weave::DType::kF32")
    else()
      message(FATAL_ERROR "weave: GEMM instance '${spec}': unknown output '${out}'")
    endif()
    if(NOT DEFINED WEAVE_GEMM_EPILOGUE_${epilogue}_TYPE)
      message(FATAL_ERROR "weave: GEMM instance '${spec}': unknown epilogue '${epilogue}' (register it with weave_gemm_epilogue)")
    endif()
    if(NOT DEFINED WEAVE_GEMM_SCHEDULER_${scheduler}_TYPE)
      message(FATAL_ERROR "weave: GEMM instance '${spec}': unknown scheduler '${scheduler}' (register it with weave_gemm_scheduler)")
    endif()
    string(REPLACE "@OUT@" "${out_type}" epi_type "${WEAVE_GEMM_EPILOGUE_${epilogue}_TYPE}")
    set(sched_type "${WEAVE_GEMM_SCHEDULER_${scheduler}_TYPE}")
    set(epi_include "")
    foreach(header "${WEAVE_GEMM_EPILOGUE_${epilogue}_HEADER}" "${WEAVE_GEMM_SCHEDULER_${scheduler}_HEADER}")
      string(FIND "${epi_include}" "\"${header}\"" seen)
      if(NOT header STREQUAL "" AND seen EQUAL -1)
        string(APPEND epi_include "#include \"${header}\"\n")
      endif()
    endforeach()
    set(name "sm90_gemm_${stem}_${out}_${epilogue}_${bm}x${bn}x${bk}${csuffix}")
    set(text "// Generated from src/gemm/instances.cmake (\"${spec}\"): ${what} -> ${out},\n")
    string(APPEND text "// ${bm}x${bn} tile, ${bk}-wide K stages, epilogue ${epilogue}, scheduler ${scheduler}.\n")
    string(APPEND text "${epi_include}#include \"gemm/kernel.cuh\"\n")
    if(cm EQUAL 1)
      string(APPEND text "WEAVE_GEMM_KERNEL(${name}, ${in}, ${bm}, ${bn}, ${policy}, ${epi_type}, ${sched_type},\n")
    else()
      if(NOT epilogue STREQUAL "store" OR NOT scheduler STREQUAL "grouped")
        message(FATAL_ERROR "weave: GEMM instance '${spec}': clusters are for the plain GEMM (store, grouped) only")
      endif()
      string(APPEND text "WEAVE_GEMM_KERNEL_CLUSTER(${name}, ${in}, ${bm}, ${bn}, ${cm}, ${policy}, ${epi_type}, ${sched_type},\n")
    endif()
    string(APPEND text "                  ::weave::ScaleMode::${mode}, ${layout}, ${out_dtype})\n")
    file(CONFIGURE OUTPUT "${out_dir}/${name}.cu" CONTENT "${text}")
    list(APPEND files "${out_dir}/${name}.cu")
  endforeach()
  set(${out_var} ${files} PARENT_SCOPE)
endfunction()
