# pkgconfig.cmake — variables for cmake/fattn.pc.in (included by the top-level CMakeLists.txt just
# before it configures the .pc file).
#   FATTN_PC_RELPREFIX  path from <libdir>/pkgconfig back to the install prefix, so the .pc is
#                       relocatable (cmake --install --prefix <dir> after configuring elsewhere)
#   FATTN_PC_LIBS       what a static libfattn needs at link time from C: the C++ runtime and
#                       threads, plus the static CUDA runtime in a CUDA build (never cuBLAS)
file(RELATIVE_PATH FATTN_PC_RELPREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
# The C++ runtime: what the C++ compiler links beyond the C compiler (FATTN_CXX_RUNTIME of the
# top-level CMakeLists.txt: -lstdc++ -lm with GCC).
set(FATTN_PC_LIBS "")
foreach(_l ${FATTN_CXX_RUNTIME})
  string(APPEND FATTN_PC_LIBS " -l${_l}")
endforeach()
string(APPEND FATTN_PC_LIBS " -lpthread")
if(FATTN_CUDA)
  # The CUDA runtime is linked statically (no run-time dependency); cuBLAS is not linked at all:
  # the exact arm opens it at run time, so a CPU-only program needs no CUDA library but this one.
  string(APPEND FATTN_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
string(STRIP "${FATTN_PC_LIBS}" FATTN_PC_LIBS)
