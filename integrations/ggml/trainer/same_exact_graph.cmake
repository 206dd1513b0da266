# cmake -DA=<fattn-ggml-train> -DB=<fattn-ggml-train-nofattn> -DOUT=<dir> -P same_exact_graph.cmake
# The exact arm's training graph (forward + loss + backward) dumped by the trainer built with
# fattn and by the one built without it: the files must be byte-identical.
foreach(_bin A B)
  execute_process(COMMAND ${${_bin}} --attn exact --steps 0 --threads 2 --dump-graph ${OUT}/exact_graph_${_bin}.txt
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${${_bin}} failed (${_rc}):\n${_out}")
  endif()
  message(STATUS "${_out}")
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${OUT}/exact_graph_A.txt ${OUT}/exact_graph_B.txt
  RESULT_VARIABLE _same)
if(NOT _same EQUAL 0)
  message(FATAL_ERROR "the exact graphs differ: ${OUT}/exact_graph_A.txt vs ${OUT}/exact_graph_B.txt")
endif()
file(SIZE ${OUT}/exact_graph_A.txt _size)
message(STATUS "exact graphs byte-identical (${_size} bytes)")
