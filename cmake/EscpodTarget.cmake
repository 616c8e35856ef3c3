# One helper declares every layer library, so each layer states its dependencies once, and a
# target sees the headers of its own layer and of the layers it links, nothing else: an upward
# include (pod5 including pipeline), a sideways one (pipeline including another layer's private
# header) or an include of a layer not declared as a dependency fails to compile.
#
#   escpod_add_library(NAME <layer> [DIR <folder>] SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
#
# creates the static library escpod_<layer>, alias escpod::<layer>. DIR (default: NAME) is the
# folder of its headers and sources below include/escpod/ and src/; a sub-layer of a layer names
# its folder there, e.g. NAME pipeline_ops DIR pipeline/ops: headers included as
# "escpod/pipeline/ops/x.hpp", private ones as "pipeline/ops/x.hpp".
#
# How: include/ and src/ hold every layer side by side, so handing a target either folder would
# let it reach all of them. Each layer instead gets two include roots in the build tree, each
# holding one symbolic link (made at configure time; no file moves):
#   <build>/layer-roots/<layer>/public/escpod/<layer>  ->  include/escpod/<layer>
#   <build>/layer-roots/<layer>/private/<layer>        ->  src/<layer>
# The public root is a PUBLIC include directory of escpod_<layer>, so CMake's usage requirements
# hand it to exactly the targets that link the layer (and on through PUBLIC_DEPS): the link
# declarations are the one source of truth for what a target may include. The private root
# (`#include "<layer>/x.hpp"`) is the layer's own; its unit tests, and the few kernel benchmarks
# and fuzzers of internals, ask for it by name with escpod_use_internals. tests/layers proves the
# rule both ways (illegal includes fail, legal ones build) and forbids the ways around it: include
# paths with `..` or absolute ones, and src/ or include/ handed to a target whole.
set(ESCPOD_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror)

function(escpod_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ESCPOD_WARNINGS}>)
endfunction()

# Sets <out_var> to a folder holding one link, <link_name> -> <source_dir> (made once per
# configure; a stale link from an older tree is replaced).
function(escpod_link_root out_var root link_name source_dir)
  get_filename_component(_parent "${root}/${link_name}" DIRECTORY)
  file(MAKE_DIRECTORY "${_parent}")
  file(CREATE_LINK "${source_dir}" "${root}/${link_name}" SYMBOLIC)
  set(${out_var} "${root}" PARENT_SCOPE)
endfunction()

# The public include root of <layer> (include/escpod/<layer> as escpod/<layer>), or "" when the
# layer has no public headers.
function(escpod_public_root out_var layer)
  set(_headers ${CMAKE_SOURCE_DIR}/include/escpod/${layer})
  set(_root "")
  if(IS_DIRECTORY ${_headers})
    escpod_link_root(_root ${CMAKE_BINARY_DIR}/layer-roots/${layer}/public escpod/${layer} ${_headers})
  endif()
  set(${out_var} "${_root}" PARENT_SCOPE)
endfunction()

#   escpod_use_internals(<target> <layer>)
# Lets <target> include the private headers of <layer> (src/<layer>) as "<layer>/x.hpp". For the
# layer's own targets and its unit tests; anything else should use the public API.
function(escpod_use_internals target layer)
  if(NOT IS_DIRECTORY ${CMAKE_SOURCE_DIR}/src/${layer})
    message(FATAL_ERROR "escpod_use_internals(${target} ${layer}): there is no src/${layer}")
  endif()
  escpod_link_root(_root ${CMAKE_BINARY_DIR}/layer-roots/${layer}/private ${layer}
                   ${CMAKE_SOURCE_DIR}/src/${layer})
  target_include_directories(${target} PRIVATE ${_root})
endfunction()

function(escpod_add_library)
  cmake_parse_arguments(ARG "" "NAME;DIR" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT ARG_DIR)
    set(ARG_DIR ${ARG_NAME})
  endif()
  set(target escpod_${ARG_NAME})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(escpod::${ARG_NAME} ALIAS ${target})
  escpod_public_root(_public ${ARG_DIR})
  if(_public)
    target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${_public}>)
  endif()
  escpod_use_internals(${target} ${ARG_DIR})
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  escpod_warnings(${target})
endfunction()
