# ring_nccl.cmake — examples/ring_nccl.c, the context-parallel C example (docs/RING.md, "For C
# engines"), built only with the CUDA backend and when NCCL's header and library are found.
# NCCL from a system package, a tarball (-DFATTN_NCCL_ROOT=/path or $NCCL_ROOT), or the pip
# wheel nvidia-nccl-cu13 / -cu12 (found through the Python on PATH; the wheel ships
# lib/libnccl.so.2 only, hence the versioned name). The example links cuBLAS (element-wise sums).
set(FATTN_NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL install prefix for examples/ring_nccl.c")
set(_nccl_hints ${FATTN_NCCL_ROOT})
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c
                          "import nvidia.nccl as m; print(list(m.__path__)[0])"
                  OUTPUT_VARIABLE _nccl_pip OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _nccl_pip_rc ERROR_QUIET)
  if(_nccl_pip_rc EQUAL 0 AND _nccl_pip)
    list(APPEND _nccl_hints ${_nccl_pip})
  endif()
endif()
find_path(FATTN_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(FATTN_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints} PATH_SUFFIXES lib lib64)
if(FATTN_NCCL_INCLUDE_DIR AND FATTN_NCCL_LIBRARY AND TARGET CUDA::cublas)
  message(STATUS "fattn: NCCL ${FATTN_NCCL_LIBRARY}: building fattn-example-ring-nccl")
  add_executable(fattn-example-ring-nccl ${CMAKE_CURRENT_LIST_DIR}/ring_nccl.c)
  set_target_properties(fattn-example-ring-nccl PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON
                        LINKER_LANGUAGE C)
  target_include_directories(fattn-example-ring-nccl PRIVATE ${FATTN_NCCL_INCLUDE_DIR})
  target_link_libraries(fattn-example-ring-nccl PRIVATE fattn ${FATTN_NCCL_LIBRARY} CUDA::cublas
                        CUDA::cudart m)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(fattn-example-ring-nccl PRIVATE -Wall -Wextra)
  endif()
else()
  message(STATUS "fattn: NCCL not found (nccl.h / libnccl): fattn-example-ring-nccl not built "
                 "(-DFATTN_NCCL_ROOT=...)")
endif()
