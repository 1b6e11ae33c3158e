# ctest ttmm_example_smoke: runs the embedded default with a tiny budget in a fresh cache and checks
# its output (the validation choices, every method's row) and the Figure-1 PNG; then `ttmm eval`'s
# bad inputs must fail with a clear message: an empty eval folder, and a store of another base model.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${TTMM} --cache ${WORK}/cache --docs 8 --val-docs 2 --test-docs 2 --base-steps 10
                        --clusters 2 --neighbours 4 --figure ${WORK}/figure1.png
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ttmm failed (${rc}):\n${out}\n${err}")
endif()
foreach(needle "chosen on validation" "test: " "base " "finetune " "ttmm-1 " "ttmm-3 " "ttmm-10 "
        "ensemble-3 " "ensemble-10 " "ttt " "normalised")
  string(FIND "${out}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "ttmm output lacks '${needle}':\n${out}")
  endif()
endforeach()
file(READ ${WORK}/figure1.png magic LIMIT 4 HEX)
if(NOT magic STREQUAL "89504e47")
  message(FATAL_ERROR "figure1.png is not a PNG (starts with ${magic})")
endif()

file(GLOB work_dirs LIST_DIRECTORIES true ${WORK}/cache/ttmm-default-*)
list(GET work_dirs 0 run)
file(GLOB stores LIST_DIRECTORIES true ${run}/store-lr*)
list(GET stores 0 store)
file(MAKE_DIRECTORY ${WORK}/empty)
execute_process(COMMAND ${TTMM} eval --model ${run}/base --experts ${store} --eval ${WORK}/empty --methods base
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "ttmm eval: error:" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "an empty --eval folder should fail with a message (rc ${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TTMM} base-model --corpus ${run}/corpus/train --out ${WORK}/other --steps 2 --hidden 64
                        --context 256
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ttmm base-model failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TTMM} eval --model ${WORK}/other --experts ${store} --eval ${run}/corpus/test --methods base
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "the experts were trained on base model" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "a store of another base model should fail naming the mismatch (rc ${rc}):\n${out}\n${err}")
endif()
message(STATUS "ttmm smoke run OK")
