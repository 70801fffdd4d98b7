# ggml compiled from the pinned libggml-python sdist, with GGML_CUDA /
# GGML_VULKAN / GGML_METAL or CPU flags as passed in, linked into ggspec and
# installed beside its module (ggspec/libggml*.so). Included by ggml.cmake.
#
#   CMAKE_ARGS="-DGGML_VULKAN=on" pip install .
#   CMAKE_ARGS="-DGGSPEC_GGML_FROM_SOURCE=on -DGGML_NATIVE=on ..." pip install .

include(${CMAKE_CURRENT_LIST_DIR}/sdist.cmake)

# Unless the caller says otherwise, the CPU side matches the wheel: no
# -march=native (it faults on hosts that report AMX without supporting it),
# AVX2-class kernels, no OpenMP, no llamafile (its sgemm takes batched matmuls
# away from the per-row dot products that the exactness tests cover).
set(GGML_NATIVE OFF CACHE BOOL "")
set(GGML_AVX ON CACHE BOOL "")
set(GGML_AVX2 ON CACHE BOOL "")
set(GGML_FMA ON CACHE BOOL "")
set(GGML_F16C ON CACHE BOOL "")
set(GGML_OPENMP OFF CACHE BOOL "")
set(GGML_LLAMAFILE OFF CACHE BOOL "")
set(GGML_BUILD_TESTS OFF CACHE BOOL "")
set(GGML_BUILD_EXAMPLES OFF CACHE BOOL "")
set(BUILD_SHARED_LIBS ON)
# ggspec compiles ggml's RPC backend into its own module (rpc.cmake), in this
# mode as with the wheel: ggml's copy stays out (a normal variable shadows the
# GGML_RPC option inside ggml's build, CMP0077).
set(_ggspec_rpc ${GGML_RPC})
set(GGML_RPC OFF)
add_subdirectory("${GGSPEC_GGML_SDIST_DIR}/ggml" ggml-build EXCLUDE_FROM_ALL)
set(GGML_RPC ${_ggspec_rpc})

set(_ggspec_ggml_libs ggml ggml-base ggml-cpu)
foreach(_b ggml-cuda ggml-vulkan ggml-metal ggml-blas)
  if(TARGET ${_b})
    list(APPEND _ggspec_ggml_libs ${_b})
  endif()
endforeach()
foreach(_t ${_ggspec_ggml_libs})
  set_target_properties(${_t} PROPERTIES BUILD_WITH_INSTALL_RPATH TRUE INSTALL_RPATH "$ORIGIN")
endforeach()
install(TARGETS ${_ggspec_ggml_libs} LIBRARY DESTINATION ggspec RUNTIME DESTINATION ggspec)
message(STATUS "ggspec: ggml built from ${GGSPEC_GGML_SDIST_DIR} (${_ggspec_ggml_libs})")

function(ggspec_link_ggml target)
  target_link_libraries(${target} PRIVATE ggml ggml-base ggml-cpu)
  set_target_properties(${target} PROPERTIES BUILD_WITH_INSTALL_RPATH TRUE INSTALL_RPATH "$ORIGIN")
endfunction()
