# tools/bench/blas.cmake — the optional SGEMM ceiling of fattn-bench's CPU runs (included from
# bench.cmake). OpenBLAS only (Debian: libopenblas-dev): the reference BLAS is no ceiling, so
# without OpenBLAS fattn-bench prints "SGEMM ceiling: no BLAS". FATTN_BENCH_BLAS=OFF disables it.
option(FATTN_BENCH_BLAS "fattn-bench: time OpenBLAS SGEMM as the CPU ceiling when found" ON)
if(TARGET fattn-bench AND FATTN_BENCH_BLAS)
  find_library(FATTN_OPENBLAS_LIBRARY NAMES openblas)
  if(FATTN_OPENBLAS_LIBRARY)
    # Declared in bench_sgemm.cpp (cblas_sgemm and openblas_* are OpenBLAS's exported C symbols),
    # so no BLAS header is needed.
    target_compile_definitions(fattn-bench PRIVATE FATTN_BENCH_OPENBLAS=1)
    target_link_libraries(fattn-bench PRIVATE "${FATTN_OPENBLAS_LIBRARY}")
    message(STATUS "fattn-bench: SGEMM ceiling from OpenBLAS (${FATTN_OPENBLAS_LIBRARY})")
  else()
    message(STATUS "fattn-bench: SGEMM ceiling OFF (OpenBLAS not found; Debian: libopenblas-dev)")
  endif()
endif()
