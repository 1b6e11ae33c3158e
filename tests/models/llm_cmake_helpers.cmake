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

# Makes a tiny model with `llm train` in the default model's folder (its name read from `llm --help`)
# under ${WORK}/cache, so nothing big trains; writes ${WORK}/corpus.txt (its training text) and
# ${WORK}/short.txt (a sentence within the tiny context). Sets folder, cache and model in the caller.
macro(make_tiny_default_model)
  run_llm(help --help)
  expect_ok(help "llm --help")
  string(REGEX MATCH "<cache>/(llm-default-[A-Za-z0-9._-]+)" _ "${help_out}")
  set(folder "${CMAKE_MATCH_1}")
  if(NOT folder)
    message(FATAL_ERROR "llm --help does not name the default model's folder:\n${help_out}")
  endif()
  set(_sentence "The licence gives you the freedom to share and change the program, and the source code comes with it. ")
  string(REPEAT "${_sentence}" 40 _corpus)
  file(WRITE "${WORK}/corpus.txt" "${_corpus}")
  file(WRITE "${WORK}/short.txt" "The licence gives you the freedom to share.")
  set(cache "${WORK}/cache")
  set(model "${cache}/${folder}")
  run_llm(train train --corpus "${WORK}/corpus.txt" --out "${model}" --vocab-size 300 --hidden 16 --layers 1
          --heads 2 --kv-heads 1 --intermediate 32 --context 32 --steps 3 --batch 2)
  expect_ok(train "llm train (tiny model)")
endmacro()
