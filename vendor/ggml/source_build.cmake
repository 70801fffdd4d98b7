# ggml compiled from the pinned libggml-python sdist, with GGML_CUDA /
# GGML_VULKAN / GGML_METAL or CPU flags as passed in, linked into ggspec and
# installed beside its module (ggspec/libggml*.so). Included by ggml.cmake.
#
#   CMAKE_ARGS="-DGGML_VULKAN=on" pip install .
#   CMAKE_ARGS="-DGGSPEC_GGML_FROM_SOURCE=on -DGGML_NATIVE=on ..." pip install .
#
# GGSPEC_GGML_SDIST_DIR may name an already extracted sdist; otherwise pip
# downloads it from PyPI into the build folder.

set(GGSPEC_GGML_SDIST_DIR "" CACHE PATH "extracted libggml-python ${GGSPEC_LIBGGML_VERSION} sdist")

if(NOT GGSPEC_GGML_SDIST_DIR)
  set(_ggspec_dl "${CMAKE_BINARY_DIR}/libggml-sdist")
  file(GLOB _ggspec_src "${_ggspec_dl}/src/libggml_python-*")
  if(NOT _ggspec_src)
    message(STATUS "ggspec: downloading the libggml-python==${GGSPEC_LIBGGML_VERSION} sdist")
    # --no-binary names the one package: with :all: pip would also build the
    # sdist's build tools (cmake, ninja) from source just to read its metadata.
    # CMAKE_ARGS is dropped so that metadata step does not see our backend flags.
    execute_process(
      COMMAND "${CMAKE_COMMAND}" -E env --unset=CMAKE_ARGS
              "${Python_EXECUTABLE}" -m pip download --no-deps --no-binary=libggml-python
              "libggml-python==${GGSPEC_LIBGGML_VERSION}" -d "${_ggspec_dl}"
      RESULT_VARIABLE _ggspec_rc)
    file(GLOB _ggspec_tgz "${_ggspec_dl}/libggml_python-*.tar.gz")
    if(NOT _ggspec_rc EQUAL 0 OR NOT _ggspec_tgz)
      message(FATAL_ERROR "ggspec: could not download the libggml-python sdist; "
                          "pass -DGGSPEC_GGML_SDIST_DIR=<extracted sdist>")
    endif()
    file(ARCHIVE_EXTRACT INPUT "${_ggspec_tgz}" DESTINATION "${_ggspec_dl}/src")
    file(GLOB _ggspec_src "${_ggspec_dl}/src/libggml_python-*")
  endif()
  set(GGSPEC_GGML_SDIST_DIR "${_ggspec_src}")
endif()
if(NOT EXISTS "${GGSPEC_GGML_SDIST_DIR}/ggml/CMakeLists.txt")
  message(FATAL_ERROR "ggspec: ${GGSPEC_GGML_SDIST_DIR} is not an extracted libggml-python sdist")
endif()

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
add_subdirectory("${GGSPEC_GGML_SDIST_DIR}/ggml" ggml-build EXCLUDE_FROM_ALL)

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
