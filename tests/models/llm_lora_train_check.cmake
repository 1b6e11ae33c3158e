# `llm lora-train` end to end, fast: on the default model (a tiny one made by `llm train` in the
# default model's cache folder, as llm_default_model_check.cmake does, so nothing big trains) and the
# default corpus (Debian's common-licenses), a few steps; the adapter folder it writes must load back
# (`llm perplexity --lora`) and change the score. Then `llm perplexity --window/--stride`: a window
# covering the whole text scores exactly as the plain command, a smaller one runs, a stride past the
# window is an error.
#   cmake -DLLM=<llm executable> -DWORK=<scratch folder> -DCORPUS=<corpus path> -P llm_lora_train_check.cmake

if(NOT LLM OR NOT WORK OR NOT CORPUS)
  message(FATAL_ERROR "usage: cmake -DLLM=<llm> -DWORK=<dir> -DCORPUS=<path> -P llm_lora_train_check.cmake")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/llm_cmake_helpers.cmake")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

make_tiny_default_model()  # sets folder, cache, model
set(ENV{TTMOE_CACHE_DIR} "${cache}")

# LoRA training on the default model and corpus; --seq above the tiny context is capped (a note).
set(adapter "${WORK}/adapter")
run_llm(lt lora-train --corpus "${CORPUS}" --out "${adapter}" --rank 4 --alpha 8 --lr 1e-2 --batch 2
        --accumulation 2 --seq 64 --max-steps 3 --seed 5)
expect_ok(lt "llm lora-train")
expect_contains("${lt_out}" "steps: 3" "lora-train summary")
expect_contains("${lt_out}" "adapted_modules: 7" "lora-train summary (7 projections x 1 layer)")
expect_contains("${lt_err}" "exceeds the model's context" "lora-train --seq note")
expect_contains("${lt_err}" "lora-train [" "lora-train progress bar")
if(NOT EXISTS "${adapter}/adapter_config.json" OR NOT EXISTS "${adapter}/adapter_model.safetensors")
  message(FATAL_ERROR "lora-train wrote no PEFT folder in ${adapter}")
endif()
file(READ "${adapter}/adapter_config.json" cfg)
expect_contains("${cfg}" "\"r\": 4" "adapter_config.json")

# Loaded back: the perplexity with the adapter differs from the base model's.
run_llm(base perplexity --file "${WORK}/short.txt")
expect_ok(base "perplexity (base)")
run_llm(with perplexity --file "${WORK}/short.txt" --lora "${adapter}")
expect_ok(with "perplexity --lora <trained adapter>")
expect_contains("${with_out}" "perplexity: " "perplexity --lora")
if(base_out STREQUAL with_out)
  message(FATAL_ERROR "the trained adapter does not change the perplexity:\n${with_out}")
endif()

# Sliding windows.
run_llm(whole perplexity --file "${WORK}/short.txt" --window 32 --stride 32)
expect_ok(whole "perplexity --window 32")
if(NOT whole_out STREQUAL base_out)
  message(FATAL_ERROR "one window covering the text must score as the plain command:\n${whole_out}\nvs\n${base_out}")
endif()
run_llm(win perplexity --file "${WORK}/corpus.txt" --window 16 --stride 4)
expect_ok(win "perplexity --window 16 --stride 4 on a text longer than the context")
expect_contains("${win_out}" "perplexity: " "windowed perplexity")
run_llm(bad perplexity --file "${WORK}/short.txt" --window 8 --stride 9)
if("${bad_rc}" STREQUAL "0")
  message(FATAL_ERROR "a stride past the window was accepted:\n${bad_out}")
endif()
expect_contains("${bad_err}" "stride 9 must be in [1, 8]" "stride past the window")
unset(ENV{TTMOE_CACHE_DIR})
