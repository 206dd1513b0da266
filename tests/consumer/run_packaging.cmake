# run_packaging.cmake — cmake -P script behind the packaging ctest (tests/packaging.cmake):
#   1. install the build tree to a fresh prefix,
#   2. configure, build and run tests/consumer against it with find_package(fattn), and
#      tests/consumer_c, a project with LANGUAGES C only (the static library must carry its C++
#      runtime),
#   3. compile and run examples/attn_example.c with only `pkg-config --cflags --libs fattn`;
#      neither the flags nor that CPU-only program may name cuBLAS (the exact arm opens it at
#      run time), and the installed headers may not point at files users do not have.
# Inputs (-D): BUILD_DIR, SOURCE_DIR, WORK_DIR, C_COMPILER, LIBDIR, CUDA (ON/OFF).
foreach(_v BUILD_DIR SOURCE_DIR WORK_DIR C_COMPILER LIBDIR)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "run_packaging.cmake: -D${_v}=... is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(_f include/fattn/fattn.h include/fattn/fattn.hpp ${LIBDIR}/cmake/fattn/fattnConfig.cmake
           ${LIBDIR}/pkgconfig/fattn.pc)
  if(NOT EXISTS ${prefix}/${_f})
    message(FATAL_ERROR "install is missing ${_f}")
  endif()
endforeach()

# ---- find_package consumer
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
run(${WORK_DIR}/consumer/consumer_c)
message(STATUS "${LAST_OUT}")
run(${WORK_DIR}/consumer/consumer_noexc)
message(STATUS "${LAST_OUT}")

# ---- a C-only find_package consumer
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer_c -B ${WORK_DIR}/consumer_c
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=${C_COMPILER})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer_c)
run(${WORK_DIR}/consumer_c/consumer_c_only)
message(STATUS "C-only project: ${LAST_OUT}")

# ---- the installed headers are self-contained documentation: no pointer into a tree users lack
file(GLOB _headers ${prefix}/include/fattn/*)
foreach(_h ${_headers})
  file(READ ${_h} _text)
  if(_text MATCHES "\\.\\./shared/|shared/[A-Z]+\\.md")
    message(FATAL_ERROR "${_h} points at ../shared/*.md, which is not installed; use docs/ of the repository")
  endif()
endforeach()

# ---- pkg-config: the C example with nothing but the .pc file's flags
find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config not found (apt-get install pkg-config)")
endif()
set(ENV{PKG_CONFIG_PATH} ${prefix}/${LIBDIR}/pkgconfig)
run(${PKG_CONFIG} --cflags --libs fattn)
string(STRIP "${LAST_OUT}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
message(STATUS "pkg-config --cflags --libs fattn: ${flags}")
if(flags MATCHES "cublas")
  message(FATAL_ERROR "pkg-config links cuBLAS into every program: ${flags}")
endif()
run(${C_COMPILER} -std=c99 -Wall -Wextra -pedantic ${SOURCE_DIR}/examples/attn_example.c ${flags}
    -o ${WORK_DIR}/attn_example_pc)
run(${WORK_DIR}/attn_example_pc)
message(STATUS "${LAST_OUT}")
find_program(READELF readelf)
if(READELF)
  run(${READELF} -d ${WORK_DIR}/attn_example_pc)
  if(LAST_OUT MATCHES "libcublas")
    message(FATAL_ERROR "the CPU-only example depends on cuBLAS:\n${LAST_OUT}")
  endif()
endif()
