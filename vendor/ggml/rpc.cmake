# ggml's RPC backend (ggspec rpc-server, --rpc). The prebuilt wheel ships
# libggml, -base and -cpu only, so ggml-rpc.cpp and transport.cpp are compiled
# from the pinned sdist (sdist.cmake) into ggspec's module, against the same
# release's ggml. CMAKE_ARGS="-DGGML_RPC=off" leaves it out.
#
# Defines ggspec_add_rpc(target).

option(GGML_RPC "ggspec: ggml's RPC backend, compiled from the libggml-python sdist" ON)

function(ggspec_add_rpc target)
  if(NOT GGML_RPC)
    message(STATUS "ggspec: ggml's RPC backend left out (GGML_RPC=off)")
    return()
  endif()
  include(${CMAKE_CURRENT_FUNCTION_LIST_DIR}/sdist.cmake)
  set(_rpc "${GGSPEC_GGML_SDIST_DIR}/ggml/src/ggml-rpc")
  add_library(ggspec_ggml_rpc OBJECT "${_rpc}/ggml-rpc.cpp" "${_rpc}/transport.cpp")
  # ggml-impl.h and ggml-backend-impl.h are ggml's internal headers: the sdist's src/.
  target_include_directories(ggspec_ggml_rpc PRIVATE "${GGSPEC_GGML_SDIST_DIR}/ggml/include"
                                                     "${GGSPEC_GGML_SDIST_DIR}/ggml/src")
  set_target_properties(ggspec_ggml_rpc PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_STANDARD 17)
  target_sources(${target} PRIVATE $<TARGET_OBJECTS:ggspec_ggml_rpc> csrc/rpc/wire.cpp csrc/rpc/workers.cpp
                                   csrc/rpc/kernel_worker.cpp)
  # The worker's device wraps the CPU's, whose structs are ggml's internals too.
  set_source_files_properties(csrc/rpc/kernel_worker.cpp PROPERTIES
                              INCLUDE_DIRECTORIES "${GGSPEC_GGML_SDIST_DIR}/ggml/src")
  target_compile_definitions(${target} PRIVATE GGSPEC_RPC=1)
  # The RPC client's socket calls go through csrc/rpc/wire.cpp, which counts
  # their bytes and round trips and names the worker whose connection failed.
  target_link_options(${target} PRIVATE "LINKER:--wrap=send,--wrap=recv,--wrap=connect")
  message(STATUS "ggspec: ggml's RPC backend from ${GGSPEC_GGML_SDIST_DIR}")
endfunction()
