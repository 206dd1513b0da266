# harness.cmake — ctest entries for the parity harness fattn-test (tools/fattn-test.cpp).
# Full entries (label "harness"): every non-large case vs the float64 oracle on the CPU, the
# oracle vs finite differences, and determinism (run twice; threads 1/2/3 bitwise equal).
# Quick entries (labels "harness;quick"): the --quick subset of the same three, for
# sanitizer builds: `ctest -L quick`. Pass/fail is fattn-test's exit status (non-zero on any
# failed case, and on a crash).
if(TARGET fattn-test)
  add_test(NAME fattn-test-cpu COMMAND fattn-test test --backend cpu)
  add_test(NAME fattn-test-grad COMMAND fattn-test grad)
  add_test(NAME fattn-test-determinism COMMAND fattn-test determinism --backend cpu)
  # The PaTH --large case's harness (generator, per-batch slices, judge) on 2 batches instead of
  # 2048: the case itself is CUDA-sized (gpu-check runs it)
  add_test(NAME fattn-test-path-large-dry COMMAND fattn-test test --backend cpu -p path/large)
  set_tests_properties(fattn-test-path-large-dry PROPERTIES ENVIRONMENT FATTN_TEST_PATH_LARGE_B=2)
  set_tests_properties(fattn-test-cpu fattn-test-grad fattn-test-determinism fattn-test-path-large-dry PROPERTIES
    LABELS "harness" TIMEOUT 900)
  add_test(NAME fattn-test-cpu-quick COMMAND fattn-test test --backend cpu --quick)
  add_test(NAME fattn-test-grad-quick COMMAND fattn-test grad --quick)
  add_test(NAME fattn-test-determinism-quick COMMAND fattn-test determinism --backend cpu --quick)
  # selftest: injected faults (wrong value, unwritten cell, guard write, masked-row and
  # unseen-key values, zero loss gradient) must each make the judge fail.
  add_test(NAME fattn-test-selftest COMMAND fattn-test selftest --backend cpu)
  set_tests_properties(fattn-test-cpu-quick fattn-test-grad-quick fattn-test-determinism-quick
    fattn-test-selftest PROPERTIES LABELS "harness;quick" TIMEOUT 900)
endif()
