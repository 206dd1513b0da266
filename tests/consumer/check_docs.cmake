# check_docs.cmake — cmake -P script behind the ctest docs.self_contained (tests/packaging.cmake):
# what a user reads (README.md, docs/*.md, the public headers, the Python package) must not point
# at files outside the repository (the developers' notes beside it), and every docs/NAME.md it
# names must exist. Input (-D): SOURCE_DIR.
file(GLOB _files ${SOURCE_DIR}/README.md ${SOURCE_DIR}/docs/*.md ${SOURCE_DIR}/include/fattn/*
     ${SOURCE_DIR}/python/fattn/*.py)
set(_bad "")
foreach(_f ${_files})
  file(READ ${_f} _text)
  string(REGEX MATCHALL "\\.\\./shared/[A-Za-z_.-]*|shared/[A-Z][A-Za-z_-]*\\.md" _hits "${_text}")
  if(_hits)
    list(REMOVE_DUPLICATES _hits)
    string(APPEND _bad "\n  ${_f}: ${_hits}")
  endif()
  string(REGEX MATCHALL "docs/[A-Za-z_-]+\\.md" _refs "${_text}")
  foreach(_r ${_refs})
    if(NOT EXISTS ${SOURCE_DIR}/${_r})
      string(APPEND _bad "\n  ${_f}: names ${_r}, which does not exist")
    endif()
  endforeach()
endforeach()
if(_bad)
  message(FATAL_ERROR "user-facing files point at what users do not have:${_bad}")
endif()
message(STATUS "docs: self-contained (README, docs/, headers, python/fattn)")
