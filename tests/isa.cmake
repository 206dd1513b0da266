# tests/isa.cmake — ctest entries for the per-ISA CPU math (src/cpu/attn_math.cpp).
#   cpu-gemm-spills      scripts/check-spills.py on the built attn_math object: every ISA's GEMM
#                        inner loop keeps its accumulators in registers (optimized x86-64 builds
#                        with python3 and objdump only; a Debug build spills by design).
#   fattn-test-cpu-isa-* the quick parity subset with FATTN_CPU_ISA capping the path, so the
#                        baseline (and, on an AVX-512 host, the AVX2) kernels run on every host.
find_package(Python3 COMPONENTS Interpreter QUIET)
find_program(FATTN_OBJDUMP objdump)
if(Python3_Interpreter_FOUND AND FATTN_OBJDUMP AND NOT FATTN_SANITIZE AND NOT FATTN_FUZZ
   AND CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$"
   AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  add_test(NAME cpu-gemm-spills
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/check-spills.py
            --objdump ${FATTN_OBJDUMP} "$<TARGET_OBJECTS:fattn>")
  set_tests_properties(cpu-gemm-spills PROPERTIES LABELS "unit;isa" TIMEOUT 120)
endif()
if(TARGET fattn-test)
  foreach(_isa base avx2)
    add_test(NAME fattn-test-cpu-isa-${_isa} COMMAND fattn-test test --backend cpu --quick)
    set_tests_properties(fattn-test-cpu-isa-${_isa} PROPERTIES
      ENVIRONMENT "FATTN_CPU_ISA=${_isa}" LABELS "harness;isa" TIMEOUT 900)
  endforeach()
endif()
