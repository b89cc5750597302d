# Finds every dependency and fails at configure time naming what is missing and how to get it.
# Note: nothing links libcuda directly. CI machines have no driver, and a binary that needs
# libcuda.so.1 at load time could not even list its tests there. Driver entry points are fetched
# at run time through cudaGetDriverEntryPointByVersion (src/common/driver_api.hpp).

find_package(CUDAToolkit 13.0 REQUIRED)
if(NOT TARGET CUDA::cublasLt)
  message(FATAL_ERROR "weave: cuBLASLt not found in the CUDA toolkit at ${CUDAToolkit_LIBRARY_DIR}. "
                      "Install the full CUDA 13 toolkit (it ships libcublasLt).")
endif()

# --- NCCL >= 2.28 (toolkit folder, NCCL_ROOT, or system) ---
# To build against the NCCL torch loads: NCCL_ROOT=<site-packages>/nvidia/nccl (its wheel holds
# include/ and lib/libnccl.so.2). The run-time check (src/comm/nccl_version.cpp) wants that release.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
# A build folder reused with another NCCL_ROOT (pip's build-py) searches again, not the cached pair.
# Without NCCL_ROOT, -DNCCL_INCLUDE_DIR / -DNCCL_LIBRARY given on the command line are kept.
set(_nccl_root_now "${NCCL_ROOT};$ENV{NCCL_ROOT}")
if(NOT DEFINED WEAVE_NCCL_ROOT_SEARCHED)
  set(WEAVE_NCCL_ROOT_SEARCHED ";")  # a first configure, or a folder from before this check
endif()
if(NOT "${_nccl_root_now}" STREQUAL "${WEAVE_NCCL_ROOT_SEARCHED}")
  unset(NCCL_INCLUDE_DIR CACHE)
  unset(NCCL_LIBRARY CACHE)
endif()
set(WEAVE_NCCL_ROOT_SEARCHED "${_nccl_root_now}" CACHE INTERNAL "NCCL_ROOT of the last NCCL search")
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
# NAMES_PER_DIR: the first hint folder wins, so a wheel's lib/libnccl.so.2 (no libnccl.so there)
# beats the toolkit's libnccl.so, and headers and library come from the same NCCL.
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
  message(FATAL_ERROR "weave: NCCL >= 2.28 not found (header: '${NCCL_INCLUDE_DIR}', library: "
                      "'${NCCL_LIBRARY}'). Install libnccl-dev 2.28, use a CUDA 13 toolkit that ships "
                      "it, or pass -DNCCL_ROOT=<folder with include/nccl.h and lib/libnccl.so>.")
endif()
file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*" "\\1" NCCL_VERSION_MAJOR "${_nccl_ver}")
string(REGEX REPLACE ".*NCCL_MINOR ([0-9]+).*" "\\1" NCCL_VERSION_MINOR "${_nccl_ver}")
string(REGEX REPLACE ".*NCCL_PATCH ([0-9]+).*" "\\1" NCCL_VERSION_PATCH "${_nccl_ver}")
set(NCCL_VERSION "${NCCL_VERSION_MAJOR}.${NCCL_VERSION_MINOR}.${NCCL_VERSION_PATCH}")
if(NCCL_VERSION VERSION_LESS 2.28)
  message(FATAL_ERROR "weave: NCCL ${NCCL_VERSION} at ${NCCL_INCLUDE_DIR} is too old; the device API "
                      "and symmetric windows need NCCL >= 2.28. Point -DNCCL_ROOT at a 2.28 install.")
endif()
if(NOT EXISTS ${NCCL_INCLUDE_DIR}/nccl_device.h)
  message(FATAL_ERROR "weave: ${NCCL_INCLUDE_DIR} lacks nccl_device.h (the NCCL device API).")
endif()
math(EXPR NCCL_VERSION_CODE "${NCCL_VERSION_MAJOR} * 10000 + ${NCCL_VERSION_MINOR} * 100 + ${NCCL_VERSION_PATCH}")
add_library(weave_nccl INTERFACE)
target_include_directories(weave_nccl SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
target_link_libraries(weave_nccl INTERFACE ${NCCL_LIBRARY})
# The nccl.h every file includes must be this one: a CUDA toolkit that ships its own nccl.h (its
# include folder comes with CUDA::cudart, also -isystem) would otherwise win when it comes first
# on the command line, and weave would compile against that release while linking this one. So
# the NCCL folder goes before every other include folder of every target, and
# src/common/nccl_header_check.hpp stops the build if a file still saw another nccl.h.
include_directories(BEFORE SYSTEM ${NCCL_INCLUDE_DIR})
target_compile_definitions(weave_nccl INTERFACE WEAVE_NCCL_HEADER_VERSION_CODE=${NCCL_VERSION_CODE})
message(STATUS "weave: NCCL ${NCCL_VERSION} (${NCCL_LIBRARY})")

# --- header-only CLI libraries: CLI11 (arguments), nlohmann_json (JSON); the tools only ---
if(WEAVE_DEPS_DIR)
  list(PREPEND CMAKE_PREFIX_PATH ${WEAVE_DEPS_DIR})
endif()
if(WEAVE_BUILD_TOOLS)
  find_package(CLI11 CONFIG QUIET)
  if(NOT TARGET CLI11::CLI11)
    find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp HINTS ${WEAVE_DEPS_DIR}/include)
    if(NOT CLI11_INCLUDE_DIR)
      message(FATAL_ERROR "weave: CLI11 not found. Install it (Debian/Ubuntu: apt-get install libcli11-dev; "
                          "PyPI has none) or pass -DWEAVE_DEPS_DIR=<folder with include/CLI>.")
    endif()
    add_library(CLI11::CLI11 INTERFACE IMPORTED)
    target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
  endif()
  find_package(nlohmann_json CONFIG QUIET)
  if(NOT TARGET nlohmann_json::nlohmann_json)
    find_path(NLOHMANN_INCLUDE_DIR nlohmann/json.hpp HINTS ${WEAVE_DEPS_DIR}/include)
    if(NOT NLOHMANN_INCLUDE_DIR)
      message(FATAL_ERROR "weave: nlohmann_json not found. Install it (apt-get install nlohmann-json3-dev) "
                          "or pass -DWEAVE_DEPS_DIR=<folder with include/nlohmann>.")
    endif()
    add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
    target_include_directories(nlohmann_json::nlohmann_json INTERFACE ${NLOHMANN_INCLUDE_DIR})
  endif()
endif()

# --- GoogleTest ---
if(WEAVE_BUILD_TESTS)
  find_package(GTest CONFIG QUIET)
  if(NOT TARGET GTest::gtest_main)
    set(_gtest_src "")
    foreach(_cand ${WEAVE_DEPS_DIR}/googletest /usr/src/googletest)
      if(EXISTS ${_cand}/CMakeLists.txt)
        set(_gtest_src ${_cand})
        break()
      endif()
    endforeach()
    if(NOT _gtest_src)
      message(FATAL_ERROR "weave: GoogleTest not found. Install it (apt-get install libgtest-dev "
                          "googletest), pass -DWEAVE_DEPS_DIR=<folder with googletest/>, or "
                          "-DWEAVE_BUILD_TESTS=OFF.")
    endif()
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
    add_subdirectory(${_gtest_src} ${CMAKE_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
  include(GoogleTest)
endif()
