# One case of tests/layers (see its CMakeLists.txt): compiles `#include "${HEADER}"` with a
# target's include directories and definitions, and checks the result against EXPECT.
#   cmake -DCOMPILER=... -DSTD_FLAG=... -DINCLUDES=<file> -DDEFINITIONS=<file> -DHEADER=...
#         -DHEADER_FILE=... -DEXPECT=PASS|FAIL -DWORK_DIR=... -P check_include.cmake
foreach(var COMPILER INCLUDES DEFINITIONS HEADER HEADER_FILE EXPECT WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_include.cmake: -D${var}=... is missing")
  endif()
endforeach()
if(NOT EXISTS ${HEADER_FILE})
  message(FATAL_ERROR "${HEADER_FILE} does not exist: this case no longer tests anything; "
                      "point it at a header that does (tests/layers/CMakeLists.txt)")
endif()

file(STRINGS ${INCLUDES} _includes)
file(STRINGS ${DEFINITIONS} _definitions)
set(_args ${STD_FLAG} -fsyntax-only)
foreach(dir IN LISTS _includes)
  list(APPEND _args -I${dir})
endforeach()
foreach(def IN LISTS _definitions)
  list(APPEND _args -D${def})
endforeach()

# The snippet sits alone in its folder, so a quoted include can only resolve through -I.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(WRITE ${WORK_DIR}/snippet.cpp "#include \"${HEADER}\"\n")
execute_process(COMMAND ${COMPILER} ${_args} ${WORK_DIR}/snippet.cpp
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)

string(REPLACE ";" " " _command "${COMPILER};${_args};${WORK_DIR}/snippet.cpp")
if(EXPECT STREQUAL "PASS")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "#include \"${HEADER}\" should build and did not:\n${_command}\n${_out}")
  endif()
elseif(EXPECT STREQUAL "FAIL")
  # GCC: "<header>: No such file or directory"; clang: "'<header>' file not found".
  string(FIND "${_out}" "${HEADER}: No such file" _gcc)
  string(FIND "${_out}" "'${HEADER}' file not found" _clang)
  if(_rc EQUAL 0)
    message(FATAL_ERROR "#include \"${HEADER}\" built; the layer rules should hide it:\n${_command}")
  elseif(_gcc EQUAL -1 AND _clang EQUAL -1)
    message(FATAL_ERROR "#include \"${HEADER}\" failed, but not because the header was hidden:\n"
                        "${_command}\n${_out}")
  endif()
else()
  message(FATAL_ERROR "EXPECT must be PASS or FAIL, not '${EXPECT}'")
endif()
message(STATUS "#include \"${HEADER}\": ${EXPECT} as expected")
