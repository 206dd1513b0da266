# scripts.cmake — ctest entries for the repository's scripts (included by tests/CMakeLists.txt):
#   scripts.gpu_check_verdict   scripts/gpu-check.sh's verdict for each exit status of its torch
#                               step (a stub in place of gpu-check-torch.sh; no GPU needed), and the
#                               library its shared build hands the torch part
#   scripts.shim_skipped_builds the fattn_torch target builds when torch is not importable (what an
#                               isolated `pip install ./python` asks for)
if(UNIX)
  find_program(FATTN_BASH bash)
  if(FATTN_BASH)
    add_test(NAME scripts.gpu_check_verdict
      COMMAND ${FATTN_BASH} ${PROJECT_SOURCE_DIR}/tests/scripts/gpu_check_verdict.sh ${PROJECT_SOURCE_DIR})
    set_tests_properties(scripts.gpu_check_verdict PROPERTIES TIMEOUT 120 LABELS "quick")
    add_test(NAME scripts.shim_skipped_builds
      COMMAND ${FATTN_BASH} ${PROJECT_SOURCE_DIR}/tests/scripts/shim_skipped_builds.sh ${PROJECT_SOURCE_DIR}
              ${CMAKE_CURRENT_BINARY_DIR}/shim_skipped)
    set_tests_properties(scripts.shim_skipped_builds PROPERTIES TIMEOUT 300 LABELS "quick")
  endif()
endif()
