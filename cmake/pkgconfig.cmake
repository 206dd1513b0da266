# pkgconfig.cmake — variables for cmake/fattn.pc.in (included by the top-level CMakeLists.txt just
# before it configures the .pc file).
#   FATTN_PC_RELPREFIX  path from <libdir>/pkgconfig back to the install prefix, so the .pc is
#                       relocatable (cmake --install --prefix <dir> after configuring elsewhere)
#   FATTN_PC_LIBS       what a static libfattn needs at link time from C: the C++ runtime and
#                       threads, plus the CUDA runtime (static) and cuBLAS in a CUDA build
file(RELATIVE_PATH FATTN_PC_RELPREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
set(FATTN_PC_LIBS "-lstdc++ -lm -lpthread")
if(FATTN_CUDA)
  # cuBLAS is a shared library: the rpath lets a pkg-config-built program find it at run time.
  string(APPEND FATTN_PC_LIBS " -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR}"
         " -lcublas -lcudart_static -ldl -lrt")
endif()
