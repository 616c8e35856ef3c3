# Third-party dependencies. Debian packages through find_package/pkg-config; Arrow C++ from an
# installed Arrow (Apache's packages or conda: ArrowConfig.cmake) or, by default, from the
# pyarrow wheel in .venv, which ships Arrow's headers and shared libraries.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(TBB REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
# BAM/SAM/CRAM reading for bam-filter (Debian libhts-dev).
pkg_check_modules(HTSLIB REQUIRED IMPORTED_TARGET htslib)

set(ESCPOD_ARROW_FROM "auto" CACHE STRING "Where Arrow C++ comes from: auto, system or pyarrow")
if(NOT ESCPOD_ARROW_FROM STREQUAL "pyarrow")
  find_package(Arrow CONFIG QUIET)
endif()
if(Arrow_FOUND AND TARGET Arrow::arrow_shared)
  message(STATUS "Arrow C++ ${Arrow_VERSION} from ${Arrow_DIR}")
  add_library(escpod_arrow INTERFACE)
  target_link_libraries(escpod_arrow INTERFACE Arrow::arrow_shared)
  # Parquet (fingerprint tables) comes with the same Arrow installation.
  find_package(Parquet CONFIG REQUIRED HINTS ${Arrow_DIR}/../Parquet)
  add_library(escpod_parquet INTERFACE)
  target_link_libraries(escpod_parquet INTERFACE Parquet::parquet_shared)
elseif(ESCPOD_ARROW_FROM STREQUAL "system")
  message(FATAL_ERROR "ESCPOD_ARROW_FROM=system but no ArrowConfig.cmake was found")
else()
  execute_process(
    COMMAND ${ESCPOD_PYTHON} -c
      "import pyarrow as pa; pa.create_library_symlinks(); print(pa.get_include()); print(pa.get_library_dirs()[0]); print(pa.__version__)"
    OUTPUT_VARIABLE _pa_out RESULT_VARIABLE _pa_rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_VARIABLE _pa_err)
  if(NOT _pa_rc EQUAL 0)
    message(FATAL_ERROR
      "Arrow C++ not found. Run scripts/setup.sh (it installs the pyarrow wheel into .venv), "
      "point ESCPOD_PYTHON at a Python with pyarrow, or install Arrow C++ (Apache's apt "
      "repository or conda-forge arrow-cpp) and set Arrow_DIR.\n${_pa_err}")
  endif()
  string(REPLACE "\n" ";" _pa_lines "${_pa_out}")
  list(GET _pa_lines 0 ESCPOD_ARROW_INCLUDE)
  list(GET _pa_lines 1 ESCPOD_ARROW_LIBDIR)
  list(GET _pa_lines 2 ESCPOD_ARROW_VERSION)
  message(STATUS "Arrow C++ ${ESCPOD_ARROW_VERSION} from the pyarrow wheel at ${ESCPOD_ARROW_LIBDIR}")
  add_library(escpod_arrow INTERFACE)
  # SYSTEM: Arrow's headers are not held to our warning flags.
  target_include_directories(escpod_arrow SYSTEM INTERFACE ${ESCPOD_ARROW_INCLUDE})
  target_link_libraries(escpod_arrow INTERFACE ${ESCPOD_ARROW_LIBDIR}/libarrow.so)
  add_library(escpod_parquet INTERFACE)
  target_link_libraries(escpod_parquet INTERFACE escpod_arrow ${ESCPOD_ARROW_LIBDIR}/libparquet.so)
  # The binaries find libarrow at run time through their RPATH, not LD_LIBRARY_PATH.
  set(CMAKE_BUILD_RPATH "${ESCPOD_ARROW_LIBDIR}")
  set(CMAKE_INSTALL_RPATH "${ESCPOD_ARROW_LIBDIR}")
endif()
add_library(escpod::arrow ALIAS escpod_arrow)
add_library(escpod::parquet ALIAS escpod_parquet)
# escpod/arrow_bridge/ (arrow::Status to ours) comes with Arrow, so only targets that link Arrow
# can include it (see EscpodTarget.cmake for the include roots).
escpod_public_root(_arrow_bridge_root arrow_bridge)
target_include_directories(escpod_arrow INTERFACE ${_arrow_bridge_root})
