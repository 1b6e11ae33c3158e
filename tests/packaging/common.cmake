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
