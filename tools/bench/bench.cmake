# tools/bench/bench.cmake — optional cuDNN SDPA arm of fattn-bench (included from the top-level
# CMakeLists.txt). Enabled when FATTN_CUDNN_FRONTEND_DIR points at the cudnn-frontend headers
# (scripts/fetch-peer-headers.sh puts them in .carry/cudnn-frontend/include) and cuDNN itself is
# found (FATTN_CUDNN_DIR: a root with include/ and lib/, e.g. the nvidia-cudnn-cu13 wheel folder;
# else the CUDA toolkit's folders). Without them the arm reports "skipped: not built".
set(FATTN_CUDNN_FRONTEND_DIR "" CACHE PATH "cudnn-frontend include folder (holds cudnn_frontend.h)")
set(FATTN_CUDNN_DIR "" CACHE PATH "cuDNN root with include/ and lib/")
if(FATTN_CUDA AND TARGET fattn-bench AND FATTN_CUDNN_FRONTEND_DIR)
  if(EXISTS "${FATTN_CUDNN_FRONTEND_DIR}/cudnn_frontend.h")
    find_path(FATTN_CUDNN_INCLUDE cudnn.h
      HINTS "${FATTN_CUDNN_DIR}/include" ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
    find_library(FATTN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
      HINTS "${FATTN_CUDNN_DIR}/lib" "${FATTN_CUDNN_DIR}/lib64" ${CUDAToolkit_LIBRARY_DIR} NO_DEFAULT_PATH)
    if(FATTN_CUDNN_INCLUDE AND FATTN_CUDNN_LIBRARY)
      # cuDNN's own include goes first so the frontend compiles against the library it runs with.
      target_include_directories(fattn-bench BEFORE PRIVATE "${FATTN_CUDNN_INCLUDE}" "${FATTN_CUDNN_FRONTEND_DIR}")
      target_compile_definitions(fattn-bench PRIVATE FATTN_BENCH_CUDNN=1)
      # The frontend's experimental engines call NVRTC (linked even though SDPA does not use them).
      target_link_libraries(fattn-bench PRIVATE "${FATTN_CUDNN_LIBRARY}" CUDA::nvrtc ${CMAKE_DL_LIBS})
      get_filename_component(_cudnn_libdir "${FATTN_CUDNN_LIBRARY}" DIRECTORY)
      set_target_properties(fattn-bench PROPERTIES BUILD_RPATH "${_cudnn_libdir}")
      message(STATUS "fattn-bench: cuDNN SDPA arm ON (${FATTN_CUDNN_LIBRARY})")
    else()
      message(STATUS "fattn-bench: cuDNN SDPA arm OFF (cudnn.h or libcudnn not found; set FATTN_CUDNN_DIR)")
    endif()
  else()
    message(STATUS "fattn-bench: cuDNN SDPA arm OFF (no cudnn_frontend.h in ${FATTN_CUDNN_FRONTEND_DIR})")
  endif()
endif()
include(${CMAKE_CURRENT_LIST_DIR}/blas.cmake)  # optional SGEMM ceiling (OpenBLAS)
