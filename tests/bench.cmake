# tests/bench.cmake — ctest entries for fattn-bench (owner: bench). Smoke runs, not timings:
# the small CPU preset with one rep must run every arm without error and keep fused within
# 1e-4 of exact (f32); in a CUDA build the same on the GPU, reported as skipped when there is none.
if(TARGET fattn-bench)
  add_test(NAME fattn-bench.cpu-small
    COMMAND fattn-bench --backend cpu --preset small --reps 1 --warmup 0 --max-err 1e-4)
  if(FATTN_CUDA)
    add_test(NAME fattn-bench.cuda-small
      COMMAND fattn-bench --backend cuda --preset small --arms fused,exact --reps 1 --warmup 0 --max-err 5e-3)
    set_tests_properties(fattn-bench.cuda-small PROPERTIES SKIP_REGULAR_EXPRESSION "skipped: no CUDA device")
  endif()
endif()
