# The two ways around the layer include roots (cmake/EscpodTarget.cmake), forbidden:
# - an include path that is absolute or has a `..` in it, in a C++/CUDA source: "../pod5/x.hpp"
#   resolves from the including file's folder, and "pipeline/../pod5/x.hpp" climbs out of a
#   root's link into the real tree;
# - a CMake file handing a target the whole of src/ or include/ (the source dir's src folder as
#   an include directory): that target would see every layer. Use escpod_use_internals instead.
#   cmake -DSOURCE_DIR=<repository root> -P check_no_bypass.cmake
cmake_minimum_required(VERSION 3.25)  # policies: GLOB_RECURSE does not follow symlinks
if(NOT IS_DIRECTORY "${SOURCE_DIR}/src")
  message(FATAL_ERROR "-DSOURCE_DIR=${SOURCE_DIR} is not the repository root (no src/)")
endif()

# Appends "  <file>: <line>\n" to <out_var> for each line of <files> matching <regex>.
function(escpod_grep out_var regex)
  set(_found "${${out_var}}")
  foreach(f IN LISTS ARGN)
    file(STRINGS ${f} _lines REGEX "${regex}")
    file(RELATIVE_PATH _rel ${SOURCE_DIR} ${f})
    foreach(line IN LISTS _lines)
      string(APPEND _found "  ${_rel}: ${line}\n")
    endforeach()
  endforeach()
  set(${out_var} "${_found}" PARENT_SCOPE)
endfunction()

set(_sources_globs)
set(_cmake_globs ${SOURCE_DIR}/CMakeLists.txt ${SOURCE_DIR}/cmake/*.cmake)
foreach(dir src include tests bench examples)
  foreach(ext cpp hpp h cu cuh)
    list(APPEND _sources_globs ${SOURCE_DIR}/${dir}/*.${ext})
  endforeach()
  list(APPEND _cmake_globs ${SOURCE_DIR}/${dir}/CMakeLists.txt ${SOURCE_DIR}/${dir}/*.cmake)
endforeach()
file(GLOB_RECURSE _sources ${_sources_globs})
file(GLOB_RECURSE _cmake_files ${_cmake_globs})
list(LENGTH _sources _n_sources)
list(LENGTH _cmake_files _n_cmake)
if(_n_sources LESS 50 OR _n_cmake LESS 10)
  message(FATAL_ERROR "found only ${_n_sources} sources and ${_n_cmake} CMake files under "
                      "${SOURCE_DIR}: wrong folder?")
endif()

set(_bad "")
escpod_grep(_bad "^[ \t]*#[ \t]*include[ \t]*[<\"](/|[^>\"]*\\.\\.)" ${_sources})
# The folder itself (followed by a space, ')', '>' or a quote, or ending the line), not a file in it.
escpod_grep(_bad "(CMAKE|PROJECT)_SOURCE_DIR}/(src|include)/?([ \t)>\"]|$)" ${_cmake_files})
if(_bad)
  message(FATAL_ERROR "these bypass the layer include roots (include \"escpod/<layer>/...\" or "
                      "\"<layer>/...\"; give a target a layer's private headers with "
                      "escpod_use_internals):\n${_bad}")
endif()
message(STATUS "${_n_sources} sources and ${_n_cmake} CMake files: nothing bypasses the layer roots")
