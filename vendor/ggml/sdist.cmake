# The pinned libggml-python sdist, extracted: GGSPEC_GGML_SDIST_DIR. It is
# ggml's source for the backend builds (source_build.cmake) and for the RPC
# backend the prebuilt wheel lacks (rpc.cmake). GGSPEC_GGML_SDIST_DIR may name an
# already extracted sdist; otherwise pip downloads it from PyPI into the build
# folder, once.
include_guard(GLOBAL)

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

