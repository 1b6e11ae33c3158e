# Helpers shared by the packaging test drivers (cmake -P scripts).

# packaging_step(<name> <command...>): prints the step, runs it with its output passed through, and
# stops the test with a message naming the step if the command fails.
function(packaging_step name)
  string(REPLACE ";" " " _shown "${ARGN}")
  message(STATUS "[${PACKAGING_TEST}] ${name}: ${_shown}")
  string(TIMESTAMP _t0 "%s")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc)
  string(TIMESTAMP _t1 "%s")
  math(EXPR _dt "${_t1} - ${_t0}")
  if(NOT _rc STREQUAL "0")
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED at step '${name}' (exit: ${_rc}) after ${_dt} s\n  command: ${_shown}")
  endif()
  message(STATUS "[${PACKAGING_TEST}] ${name}: ok (${_dt} s)")
endfunction()

# The generator/compiler arguments that make a nested build use the outer build's toolchain.
function(packaging_toolchain_args out)
  set(_args -G "${GENERATOR}")
  if(MAKE_PROGRAM)
    list(APPEND _args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  if(CXX_COMPILER)
    list(APPEND _args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  endif()
  set(${out} "${_args}" PARENT_SCOPE)
endfunction()

foreach(_v SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "[${PACKAGING_TEST}] driver called without -D${_v}=...")
  endif()
endforeach()

# packaging_consume(<prefix> <config dir> <work dir> REQUIRE_BLAS|OPTIONAL_BLAS [CONFIGURE_ONLY]):
# configures tests/packaging/consumer against the package installed under <prefix> (find_package must
# pick <config dir>), builds it, checks that ttmoe::ttmoe adds no ISA flag while ttmoe::native adds
# -march=native, and runs app, app_native and app_blas (REQUIRE_BLAS: app_blas must exist).
function(packaging_consume prefix config_dir consumer blas_mode)
  cmake_parse_arguments(C "CONFIGURE_ONLY" "" "" ${ARGN})
  packaging_toolchain_args(TOOLCHAIN)
  if(NOT JOBS)
    set(JOBS 2)
  endif()
  packaging_step("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/packaging/consumer -B ${consumer}
    ${TOOLCHAIN} -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_EXPORT_COMPILE_COMMANDS=ON
    -DEXPECTED_TTMOE_DIR=${config_dir})
  if(C_CONFIGURE_ONLY)
    return()
  endif()
  packaging_step("build the consumer" ${CMAKE_COMMAND} --build ${consumer} -j ${JOBS})

  # The compile command of `app` (ttmoe::ttmoe alone) must carry no machine-specific ISA flag;
  # `app_native` (with ttmoe::native) must carry -march=native.
  file(READ ${consumer}/compile_commands.json _cc)
  string(JSON _n LENGTH "${_cc}")
  math(EXPR _last "${_n} - 1")
  set(_seen_app FALSE)
  set(_seen_native FALSE)
  foreach(i RANGE ${_last})
    string(JSON _cmd GET "${_cc}" ${i} command)
    string(JSON _out ERROR_VARIABLE _no_output GET "${_cc}" ${i} output)
    if(_no_output)
      set(_out "${_cmd}")
    endif()
    if(_out MATCHES "CMakeFiles/app\\.dir/")
      set(_seen_app TRUE)
      if(_cmd MATCHES "(^| )(-march=[^ ]*|-mtune=native|-mavx[^ ]*|-mfma|-msse[^ ]*)")
        message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ttmoe::ttmoe leaks '${CMAKE_MATCH_2}' into the consumer:\n  ${_cmd}")
      endif()
    elseif(_out MATCHES "CMakeFiles/app_native\\.dir/")
      set(_seen_native TRUE)
      if(NOT _cmd MATCHES "-march=native")
        message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ttmoe::native did not add -march=native:\n  ${_cmd}")
      endif()
    endif()
  endforeach()
  if(NOT _seen_app OR NOT _seen_native)
    message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: compile_commands.json lacks app or app_native")
  endif()
  message(STATUS "[${PACKAGING_TEST}] compile flags: ttmoe::ttmoe adds no ISA flag; ttmoe::native adds -march=native")

  foreach(app app app_native app_blas)
    if(EXISTS ${consumer}/${app})
      packaging_step("run ${app}" ${consumer}/${app})
    elseif(NOT app STREQUAL "app_blas" OR blas_mode STREQUAL "REQUIRE_BLAS")
      message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: ${consumer}/${app} was not built")
    else()
      message(STATUS "[${PACKAGING_TEST}] no ttmoe::blas in the installed package (no BLAS found): app_blas skipped")
    endif()
  endforeach()
endfunction()
