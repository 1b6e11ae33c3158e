# Helpers shared by the `llm` command-line checks run as cmake -P scripts (LLM = the executable).

# Runs llm with the given arguments; sets <prefix>_rc, <prefix>_out, <prefix>_err.
function(run_llm prefix)
  execute_process(COMMAND "${LLM}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${prefix}_rc "${rc}" PARENT_SCOPE)
  set(${prefix}_out "${out}" PARENT_SCOPE)
  set(${prefix}_err "${err}" PARENT_SCOPE)
endfunction()

function(expect_ok prefix what)
  if(NOT "${${prefix}_rc}" STREQUAL "0")
    message(FATAL_ERROR "${what}: exit ${${prefix}_rc}\nstdout: ${${prefix}_out}\nstderr: ${${prefix}_err}")
  endif()
endfunction()

function(expect_contains text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: expected to find\n  ${needle}\nin\n${text}")
  endif()
endfunction()

function(expect_lacks text needle what)
  string(FIND "${text}" "${needle}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${what}: did not expect\n  ${needle}\nin\n${text}")
  endif()
endfunction()
