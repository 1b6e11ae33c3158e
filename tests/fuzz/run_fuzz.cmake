# Runs the safetensors libFuzzer target for a bounded time; fails if it reports a crash.
# Invoked by CTest as `cmake -D... -P run_fuzz.cmake`. Variables:
#   FUZZER      path of the fuzzer executable (built here when CLANGXX is set)
#   CLANGXX     optional clang++ to compile SOURCE with, used when the project compiler is not
#               clang (libFuzzer ships only with clang); skipped when FUZZER is up to date
#   SOURCE      the fuzz target source;  INCLUDE_DIR  ttmoe's include/ directory
#   SEED_DIR    committed seed corpus (read only);  WORK_DIR  scratch directory in the build tree
#   DICT        libFuzzer dictionary;  SECONDS  fuzzing time budget
foreach(var FUZZER SEED_DIR WORK_DIR DICT SECONDS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_fuzz.cmake: ${var} is not set")
  endif()
endforeach()

if(CLANGXX)
  file(GLOB deps ${INCLUDE_DIR}/ttmoe/io/*.hpp)
  list(APPEND deps ${SOURCE} ${CMAKE_CURRENT_LIST_FILE})
  set(stale FALSE)
  if(NOT EXISTS ${FUZZER})
    set(stale TRUE)
  else()
    foreach(dep IN LISTS deps)
      if(${dep} IS_NEWER_THAN ${FUZZER})
        set(stale TRUE)
      endif()
    endforeach()
  endif()
  if(stale)
    message(STATUS "compiling ${FUZZER} with ${CLANGXX}")
    execute_process(
      COMMAND ${CLANGXX} -std=c++20 -O1 -g -Wall -Wextra
              -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
              -I${INCLUDE_DIR} ${SOURCE} -o ${FUZZER}.part
      RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "compiling the fuzzer failed (${rc})")
    endif()
    file(RENAME ${FUZZER}.part ${FUZZER})  # only a complete binary counts as up to date
  endif()
endif()

# New inputs go to the first corpus directory, which lives in the build tree, so the source
# tree's seeds are never modified; it persists across runs so coverage accumulates.
file(MAKE_DIRECTORY ${WORK_DIR}/corpus ${WORK_DIR}/artifacts)
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
          -dict=${DICT} -artifact_prefix=${WORK_DIR}/artifacts/ ${WORK_DIR}/corpus ${SEED_DIR}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(GLOB found ${WORK_DIR}/artifacts/*)
  message(FATAL_ERROR "the safetensors fuzzer failed (exit ${rc}); reproducer(s): ${found}\n"
                      "replay with: ${FUZZER} <reproducer>")
endif()
