# `llm generate` / `llm perplexity` without --model: they must use the default model cached under
# $TTMOE_CACHE_DIR (or --cache), and a corrupt cached folder must be a clear error naming it.
# The cache is prepared here with a tiny model made by `llm train` itself under the default model's
# folder name (read from `llm --help`), so the test never trains the real default model.
#   cmake -DLLM=<llm executable> -DWORK=<scratch folder> -P llm_default_model_check.cmake

if(NOT LLM OR NOT WORK)
  message(FATAL_ERROR "usage: cmake -DLLM=<llm> -DWORK=<dir> -P llm_default_model_check.cmake")
endif()
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
unset(ENV{TTMOE_CACHE_DIR})

include("${CMAKE_CURRENT_LIST_DIR}/llm_cmake_helpers.cmake")

# A tiny model in the default model's cache folder: sets folder, cache, model.
make_tiny_default_model()

# generate without --model, through $TTMOE_CACHE_DIR: the cached folder, no training, the same text as --model.
set(gen generate --prompt "The licence gives" --max-new-tokens 12)
set(ENV{TTMOE_CACHE_DIR} "${cache}")
run_llm(def ${gen})
expect_ok(def "generate without --model")
expect_contains("${def_err}" "llm: default model: ${model}" "generate without --model")
expect_lacks("${def_err}" "training" "generate without --model (the cache is there: no training)")
unset(ENV{TTMOE_CACHE_DIR})
run_llm(ref ${gen} --model "${model}")
expect_ok(ref "generate --model")
if(def_out STREQUAL "" OR NOT def_out STREQUAL ref_out)
  message(FATAL_ERROR "generate without --model printed\n${def_out}\nbut with --model ${model}\n${ref_out}")
endif()

# --cache DIR instead of the environment variable, and perplexity.
run_llm(cached ${gen} --cache "${cache}")
expect_ok(cached "generate --cache")
expect_contains("${cached_err}" "llm: default model: ${model}" "generate --cache")
if(NOT cached_out STREQUAL ref_out)
  message(FATAL_ERROR "generate --cache printed\n${cached_out}\nbut with --model\n${ref_out}")
endif()
set(ENV{TTMOE_CACHE_DIR} "${cache}")
run_llm(ppl perplexity --file "${WORK}/short.txt")
expect_ok(ppl "perplexity without --model")
unset(ENV{TTMOE_CACHE_DIR})
run_llm(pplref perplexity --file "${WORK}/short.txt" --model "${model}")
expect_ok(pplref "perplexity --model")
expect_contains("${ppl_out}" "perplexity: " "perplexity without --model")
if(NOT ppl_out STREQUAL pplref_out)
  message(FATAL_ERROR "perplexity without --model:\n${ppl_out}\nwith --model:\n${pplref_out}")
endif()

# A corrupt cached folder: exit 1, one error naming the folder and the bad file, and no retraining.
foreach(broken IN ITEMS config weights)
  set(bad_cache "${WORK}/bad-${broken}")
  set(bad "${bad_cache}/${folder}")
  file(COPY "${model}/" DESTINATION "${bad}")
  if(broken STREQUAL "config")
    file(WRITE "${bad}/config.json" "{ \"model_type\": \"llama\", ")
    set(bad_file "config.json")
  else()
    file(WRITE "${bad}/model.safetensors" "truncated")
    set(bad_file "model.safetensors")
  endif()
  set(ENV{TTMOE_CACHE_DIR} "${bad_cache}")
  run_llm(err ${gen})
  unset(ENV{TTMOE_CACHE_DIR})
  if("${err_rc}" STREQUAL "0")
    message(FATAL_ERROR "a corrupt ${broken} in the cached default model was accepted:\n${err_out}")
  endif()
  expect_contains("${err_err}" "llm: error: the cached default model ${bad} cannot be loaded" "corrupt ${broken}")
  expect_contains("${err_err}" "${bad_file}" "corrupt ${broken}")
  expect_lacks("${err_err}" "training" "corrupt ${broken} (must not retrain over it)")
endforeach()
message(STATUS "llm default model: used from the cache, same output as --model; corrupt folders rejected by name")
