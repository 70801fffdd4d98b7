# How ggspec finds ggml. No ggml source is committed: ggml comes from PyPI's
# libggml-python==0.20.2.post1, either as its prebuilt CPU wheel (the default) or,
# when a GPU backend or GGSPEC_GGML_FROM_SOURCE is asked for, built from that
# same release's sdist.
#
# Defines ggspec_link_ggml(target).

set(GGSPEC_LIBGGML_VERSION "0.20.2.post1")

option(GGML_CUDA   "build ggml from the libggml-python sdist with CUDA"   OFF)
option(GGML_VULKAN "build ggml from the libggml-python sdist with Vulkan" OFF)
option(GGML_METAL  "build ggml from the libggml-python sdist with Metal"  OFF)
option(GGSPEC_GGML_FROM_SOURCE "build ggml from the libggml-python sdist (e.g. for native CPU flags)" OFF)

if(GGML_CUDA OR GGML_VULKAN OR GGML_METAL OR GGSPEC_GGML_FROM_SOURCE)
  include(${CMAKE_CURRENT_LIST_DIR}/source_build.cmake)
  return()
endif()

# --- the prebuilt CPU wheel -------------------------------------------------
if(NOT ggml_DIR)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c "import libggml, os; print(os.path.dirname(libggml.__file__))"
    OUTPUT_VARIABLE GGSPEC_LIBGGML_ROOT OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE _ggspec_rc)
  if(NOT _ggspec_rc EQUAL 0)
    message(FATAL_ERROR "ggspec: libggml-python==${GGSPEC_LIBGGML_VERSION} is not importable; "
                        "it is a build dependency (pip installs it from pyproject.toml)")
  endif()
  # The wheel keeps its CMake package under lib64/, which CMake does not search on Debian.
  foreach(_libdir lib64 lib)
    if(EXISTS "${GGSPEC_LIBGGML_ROOT}/${_libdir}/cmake/ggml/ggml-config.cmake")
      set(ggml_DIR "${GGSPEC_LIBGGML_ROOT}/${_libdir}/cmake/ggml")
      set(GGSPEC_LIBGGML_LIBDIR "${_libdir}")
      break()
    endif()
  endforeach()
endif()
if(NOT GGSPEC_LIBGGML_LIBDIR)
  get_filename_component(GGSPEC_LIBGGML_LIBDIR "${ggml_DIR}/../.." NAME)
endif()
find_package(ggml REQUIRED CONFIG)
message(STATUS "ggspec: ggml from ${ggml_DIR}")

# The wheel's exported targets hand consumers an rpath of $ORIGIN/../libggml/lib,
# but the libraries live in lib64/. Drop it and set the right one on our module.
foreach(_t ggml::ggml ggml::ggml-base ggml::ggml-cpu)
  if(TARGET ${_t})
    set_property(TARGET ${_t} PROPERTY INTERFACE_LINK_OPTIONS "")
  endif()
endforeach()

function(ggspec_link_ggml target)
  target_link_libraries(${target} PRIVATE ggml::ggml ggml::ggml-base ggml::ggml-cpu)
  # ggspec/_core.so sits beside libggml/ in site-packages.
  set_target_properties(${target} PROPERTIES
    BUILD_WITH_INSTALL_RPATH TRUE
    INSTALL_RPATH "$ORIGIN/../libggml/${GGSPEC_LIBGGML_LIBDIR}")
endfunction()
