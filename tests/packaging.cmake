# packaging.cmake — ctest entries of engineer "core" (included by tests/CMakeLists.txt):
#   example.attn_c         the C99 example of the README, built in-tree and run
#   packaging.install      cmake --install to a temp prefix, then a find_package(fattn) consumer
#                          (C99 + the C++ wrapper with -fno-exceptions), a LANGUAGES C only
#                          project, and the C example built from `pkg-config --cflags --libs
#                          fattn` alone (no cuBLAS in the flags or the program), each run
#   docs.self_contained    README, docs/, headers, python/fattn name no file users lack
include(GNUInstallDirs)  # CMAKE_INSTALL_LIBDIR (the top level includes it only after tests/)

add_executable(fattn-example-attn ${PROJECT_SOURCE_DIR}/examples/attn_example.c)
set_target_properties(fattn-example-attn PROPERTIES C_STANDARD 99 C_EXTENSIONS OFF)
target_link_libraries(fattn-example-attn PRIVATE fattn)
if(NOT MSVC)
  target_link_libraries(fattn-example-attn PRIVATE m)
endif()
add_test(NAME example.attn_c COMMAND fattn-example-attn)

add_test(NAME packaging.install
  COMMAND ${CMAKE_COMMAND}
    -DBUILD_DIR=${PROJECT_BINARY_DIR}
    -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/packaging
    -DC_COMPILER=${CMAKE_C_COMPILER}
    -DLIBDIR=${CMAKE_INSTALL_LIBDIR}
    -DCUDA=${FATTN_CUDA}
    -P ${PROJECT_SOURCE_DIR}/tests/consumer/run_packaging.cmake)
set_tests_properties(packaging.install PROPERTIES TIMEOUT 600 LABELS packaging)

# README, docs/, the public headers and the Python package point only at files users have.
add_test(NAME docs.self_contained
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
    -P ${PROJECT_SOURCE_DIR}/tests/consumer/check_docs.cmake)
set_tests_properties(docs.self_contained PROPERTIES LABELS "quick")
