# One helper declares every layer library, so each layer states its dependencies once and an
# upward include (say, pod5 including pipeline) fails to build instead of silently linking.
#
#   escpod_add_library(NAME <layer> SOURCES ... [PUBLIC_DEPS ...] [PRIVATE_DEPS ...])
#
# creates the static library escpod_<layer>, alias escpod::<layer>, with include/ public and
# src/ private (internal headers live beside their .cpp files).
set(ESCPOD_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion -Werror)

function(escpod_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ESCPOD_WARNINGS}>)
endfunction()

function(escpod_add_library)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;PUBLIC_DEPS;PRIVATE_DEPS" ${ARGN})
  set(target escpod_${ARG_NAME})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(escpod::${ARG_NAME} ALIAS ${target})
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
    PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  escpod_warnings(${target})
endfunction()
