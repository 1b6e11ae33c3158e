# The moetta command line without training or data: `--help` documents every embedded-run option,
# and bad values of the validation-stream options are errors that name the option (exit 1, nothing
# trained). Fast enough for CI: no Fashion-MNIST is read.
#   cmake -DMOETTA=<moetta executable> -P cli_check.cmake

if(NOT MOETTA)
  message(FATAL_ERROR "usage: cmake -DMOETTA=<moetta> -P cli_check.cmake")
endif()

execute_process(COMMAND "${MOETTA}" --help RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "moetta --help exited ${rc}:\n${out}${err}")
endif()
foreach(option --val-table --tune --validate --hyper --limit --seeds)
  string(FIND "${out}" "${option}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "moetta --help does not list ${option}:\n${out}")
  endif()
endforeach()

# Each bad invocation must fail before any work, with an error naming the offending option.
function(expect_rejected option)
  execute_process(COMMAND "${MOETTA}" ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0)
    message(FATAL_ERROR "moetta ${ARGN} succeeded; expected an error naming ${option}:\n${out}${err}")
  endif()
  string(FIND "${err}" "${option}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "moetta ${ARGN}: the error does not name ${option}:\n${err}")
  endif()
  string(FIND "${out}" "Training" trained)
  if(NOT trained EQUAL -1)
    message(FATAL_ERROR "moetta ${ARGN} started training before rejecting ${option}:\n${out}")
  endif()
endfunction()
expect_rejected(--val-table --val-table cifar10)
expect_rejected(--severity --severity 6)
expect_rejected(--hyper --hyper best)
