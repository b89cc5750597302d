# weave as a package a C++ project consumes: the usage requirements weave::weave carries, the
# ABI version of libweave.so, install rules, and the CMake package (weaveConfig.cmake) for the
# install prefix and for the build tree, and a pkg-config file. The CMake ways in share one target:
#
#   find_package(weave 0.1 REQUIRED)           # from an install prefix (CMAKE_PREFIX_PATH) or a
#   target_link_libraries(app PRIVATE weave::weave)   # build tree (weave_DIR=<build>)
#
#   add_subdirectory(weave)                    # weave's sources inside the consumer's tree
#   target_link_libraries(app PRIVATE weave::weave)
#
# What weave::weave gives a consumer: the public headers (host-only C++20), CUDA::cudart_static
# and the CUDA include directory (the headers use cudaStream_t), and weave::nccl (the headers
# include nccl.h; callers create communicators through NCCL). The installed package finds CUDA
# through find_dependency(CUDAToolkit) and NCCL through cmake/weaveConfig.cmake.in (NCCL_ROOT,
# then where this build found it, then the toolkit and the system). Relocatable: every installed
# path is relative to the prefix, except that of NCCL, which the consumer's machine decides.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

option(WEAVE_INSTALL "Generate install rules and the CMake package (find_package(weave))" ON)

# One version: project(VERSION) and include/weave/version.hpp must agree.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/weave/version.hpp _weave_version_lines
     REGEX "^#define WEAVE_VERSION_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3"
       _weave_header_version "${_weave_version_lines}")
if(NOT _weave_header_version VERSION_EQUAL PROJECT_VERSION)
  message(FATAL_ERROR "weave: project(VERSION ${PROJECT_VERSION}) in CMakeLists.txt and "
                      "include/weave/version.hpp (${_weave_header_version}) disagree; change both.")
endif()

# --- the library as consumers see it ---
add_library(weave::weave ALIAS weave)
# 0.x: a minor release may break the ABI, so the soname carries major.minor (libweave.so.0.1);
# the file is libweave.so.<version>. Not in the Python wheel's build (pyproject.toml: the extension
# on, the C++ install off): a wheel is a zip, which stores the soname chain's two symlinks as two
# more full copies of the library; there the one file is libweave.so, found beside the extension.
if(WEAVE_INSTALL OR NOT WEAVE_BUILD_PYTHON)
  set_target_properties(weave PROPERTIES VERSION ${PROJECT_VERSION}
                                         SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
endif()
target_compile_features(weave INTERFACE cxx_std_20)

# The NCCL usage requirement, as an imported target: the exported package then names it
# (weave::nccl) instead of this machine's paths, and weaveConfig.cmake defines it again from the
# consumer's own NCCL search.
if(NOT TARGET weave::nccl)
  add_library(weave::nccl INTERFACE IMPORTED GLOBAL)
  set_target_properties(weave::nccl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
                                               INTERFACE_LINK_LIBRARIES "${NCCL_LIBRARY}")
endif()
target_link_libraries(weave INTERFACE weave::nccl)

if(NOT WEAVE_INSTALL)
  return()
endif()

set(WEAVE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/weave CACHE STRING
    "Where the CMake package files go, relative to the install prefix")

# Installed binaries find libweave next to them (relocatable) and NCCL where this build linked it
# (outside the system folders only; LD_LIBRARY_PATH / ld.so.conf still apply first).
set_target_properties(weave PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
set(_weave_installed weave)
if(TARGET weave_cli)  # WEAVE_BUILD_TOOLS
  set_target_properties(weave_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}"
                                             INSTALL_RPATH_USE_LINK_PATH ON EXPORT_NAME cli)
  list(APPEND _weave_installed weave_cli)
endif()

install(TARGETS ${_weave_installed} EXPORT weaveTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weave DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT weaveTargets NAMESPACE weave:: DESTINATION ${WEAVE_INSTALL_CMAKEDIR}
        FILE weaveTargets.cmake)

# The config file needs, from this build: the CUDA toolkit version and where NCCL was found
# (hints only; a consumer's NCCL_ROOT wins).
set(WEAVE_CUDA_VERSION_MIN "${CUDAToolkit_VERSION_MAJOR}.0")
set(WEAVE_NCCL_VERSION_MIN "2.28")
set(WEAVE_NCCL_BUILD_VERSION "${NCCL_VERSION}")
get_filename_component(WEAVE_NCCL_HINT_INCLUDE "${NCCL_INCLUDE_DIR}" ABSOLUTE)
get_filename_component(WEAVE_NCCL_HINT_LIBDIR "${NCCL_LIBRARY}" DIRECTORY)
set(WEAVE_CUDA_HINT_ROOT "${CUDAToolkit_LIBRARY_ROOT}")

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/weaveConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/weaveConfig.cmake
                              INSTALL_DESTINATION ${WEAVE_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weaveConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/weaveConfig.cmake ${PROJECT_BINARY_DIR}/weaveConfigVersion.cmake
        DESTINATION ${WEAVE_INSTALL_CMAKEDIR})

# pkg-config, for builds without CMake.
file(RELATIVE_PATH WEAVE_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" WEAVE_PC_TO_PREFIX "${WEAVE_PC_TO_PREFIX}")
list(GET CUDAToolkit_INCLUDE_DIRS 0 _weave_cuda_include)
set(_weave_pc_includes ${_weave_cuda_include} ${WEAVE_NCCL_HINT_INCLUDE})
set(_weave_pc_libdirs ${WEAVE_NCCL_HINT_LIBDIR} ${CUDAToolkit_LIBRARY_DIR})
list(REMOVE_DUPLICATES _weave_pc_includes)
list(REMOVE_DUPLICATES _weave_pc_libdirs)
# Each library folder also goes into the program's run path: without it the program the README's
# recipe builds would not find libweave.so (nor NCCL outside the loader's default folders) at start.
set(_weave_pc_rpaths ${_weave_pc_libdirs})
list(TRANSFORM _weave_pc_includes PREPEND "-I")
list(TRANSFORM _weave_pc_libdirs PREPEND "-L")
list(TRANSFORM _weave_pc_rpaths PREPEND "-Wl,-rpath,")
list(JOIN _weave_pc_includes " " WEAVE_PC_DEP_CFLAGS)
list(JOIN _weave_pc_libdirs " " WEAVE_PC_DEP_LIBDIRS)
list(JOIN _weave_pc_rpaths " " WEAVE_PC_DEP_RPATHS)
configure_file(${CMAKE_CURRENT_LIST_DIR}/weave.pc.in ${PROJECT_BINARY_DIR}/package/weave.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/weave.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The same package straight from the build tree (weave_DIR=<build folder>): targets point at the
# build's library and the source tree's headers.
export(EXPORT weaveTargets NAMESPACE weave:: FILE ${PROJECT_BINARY_DIR}/weaveTargets.cmake)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/weaveConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/weaveConfig.cmake
                              INSTALL_DESTINATION ${PROJECT_BINARY_DIR} INSTALL_PREFIX ${PROJECT_BINARY_DIR})
