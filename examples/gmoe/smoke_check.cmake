# ctest gmoe_example_smoke: runs the embedded default with a tiny budget in a fresh cache and checks the
# output (both selection tables, both models, every digit domain) and the routing PNG; then a bad
# --test-env must fail with a message naming the range.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${GMOE} --cache ${WORK}/cache --steps 4 --checkpoint-every 2 --trials 1 --per-domain 8
                        --digits-per-class 4 --figure ${WORK}/routing.png
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gmoe failed (${rc}):\n${out}\n${err}")
endif()
foreach(needle "training-domain validation set" "test-domain validation set (oracle)" "GMoE" "ViT" "display"
        "handwritten" "script" "serif" "Avg")
  string(FIND "${out}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "gmoe output lacks '${needle}':\n${out}")
  endif()
endforeach()
if(NOT EXISTS ${WORK}/routing.png)
  message(FATAL_ERROR "gmoe wrote no routing figure at ${WORK}/routing.png")
endif()
file(READ ${WORK}/routing.png magic LIMIT 4 HEX)
if(NOT magic STREQUAL "89504e47")
  message(FATAL_ERROR "routing.png is not a PNG (starts with ${magic})")
endif()
execute_process(COMMAND ${GMOE} --cache ${WORK}/cache --steps 4 --trials 1 --test-env 7
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "out of range" at)
if(rc EQUAL 0 OR at EQUAL -1)
  message(FATAL_ERROR "--test-env 7 should fail naming the range (rc ${rc}):\n${out}\n${err}")
endif()
message(STATUS "gmoe smoke run OK")
