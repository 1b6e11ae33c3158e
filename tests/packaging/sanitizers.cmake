# sanitizers: a separate Debug build of the tests with -DTTMOE_SANITIZE=ON (ASan + UBSan, see
# tests/CMakeLists.txt), then `ctest -L unit` there. Fails if a test fails or if a sanitizer reports
# anything (ASan, LeakSanitizer or UBSan), in a failing or a passing test.
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... [-DCXX_COMPILER=...] [-DMAKE_PROGRAM=...]
#         [-DJOBS=2] -P sanitizers.cmake
# The build folder is kept between runs (incremental rebuilds). With TTMOE_SANITIZE each suite is a unity
# build (one TU per suite, tests/CMakeLists.txt): at -O0 under ASan+UBSan a suite's TUs otherwise each
# emit and instrument the same inline functions and templates (test_data 26 instead of 50 CPU-s). Suites
# that drive the same model code share one such TU across suites (UNITY_GROUP, tests/CMakeLists.txt):
# `--target test_llama_unit` then builds test_group_llama, which holds the cases of
# test_io, test_llama_unit, test_llama_bf16, test_ttmm_store and test_ttmm_merge, and test_group_core those of
# test_core and test_training_loop; each case still runs on its own by ctest.
set(PACKAGING_TEST sanitizers)
include(${CMAKE_CURRENT_LIST_DIR}/common.cmake)
if(NOT JOBS)
  set(JOBS 2)
endif()
packaging_toolchain_args(TOOLCHAIN)

# Tests that shell out to PyTorch or to the fuzzer are not sanitizer material: excluded by label and name.
# So are the compile-fail checks (core_compile_*: the compiler with -fsyntax-only, no test binary runs).
set(EXCLUDE_LABELS "^(fuzz|parity|reference|torch|pytorch|packaging)$")
set(EXCLUDE_NAMES "fuzz|torch|generate_[a-z_]*fixtures|parity_reference_selfcheck|^core_compile_")

set(build ${WORK_DIR}/build)
file(MAKE_DIRECTORY ${WORK_DIR})

# Debug with -g1 (line tables: enough for file:line in sanitizer stack traces) instead of -g: the ASan+UBSan
# objects compile ~20% faster and are half the size.
packaging_step("configure the sanitizer build" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${build} ${TOOLCHAIN}
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTTMOE_SANITIZE=ON -DTTMOE_BUILD_TESTS=ON -DTTMOE_PACKAGING_TESTS=OFF
  -DTTMOE_BUILD_EXAMPLES=OFF -DTTMOE_BUILD_BENCH=OFF)
# Build only the executables of `unit` suites: the ttmoe_test_suite(<name> LABEL unit ...) calls in
# tests/*/CMakeLists.txt (Catch2 labels are only known once a test binary exists). If none can be
# found this way, or with -DBUILD_ALL=ON, everything is built.
# The suites in SKIP_SUITES are left out (-DSKIP_SUITES= keeps them): they drive whole models and
# adaptation methods through the same storage, kernels, checkpoint readers and tokenizers that the
# suites kept here test directly, but under ASan+UBSan at -O1 they doubled this test's length (about
# 21 of CI's minutes). Raw memory, parsing of untrusted files and indexing live in what stays: core
# (storage, pool, tensors, autograd), io (safetensors), data and images (decoders, corruptions,
# streams), text (UTF-8, tokenizers), the training loop (checkpoint write and resume) and the LLM unit
# suite (KV cache, sampling, PEFT adapters). test_domainbed_training (GMoE and ViT models trained by
# the DomainBed driver) joined the list when this test went from 558 s to 1148 s of a 57-minute CI
# (2026-11-26; its ASan+UBSan compile was about 3.5 minutes of that); the DomainBed folder reader, its
# background loader and PNG decoding stay covered by test_data and test_images, checkpoint files by
# test_training_loop. test_ttmm_train and test_ttmm_eval (experts trained, and the baselines and TTT
# evaluated, on a tiny Llama) joined it on 2026-11-26: under ASan+UBSan at -O0 their compiles took 101
# and 90 CPU-s, while their runs, 0.2 and 0.5 s, exercise nothing the kept suites do not; the TTMM
# store (atomic writes, index and PEFT folder parsing) and the in-place merge with its restore patch
# (test_ttmm_store, test_ttmm_merge) stay sanitized.
if(NOT DEFINED SKIP_SUITES)
  set(SKIP_SUITES test_models_unit test_tta_unit test_tta_hyper test_tta_registry test_moe test_domainbed_training
                  test_ttmm_train test_ttmm_eval)
endif()
set(unit_targets "")
set(sanitize_groups "")
if(NOT BUILD_ALL)
  file(GLOB suite_lists ${SOURCE_DIR}/tests/*/CMakeLists.txt)
  foreach(f IN LISTS suite_lists)
    file(READ ${f} text)
    string(REGEX MATCHALL "ttmoe_test_suite\\([^)]*\\)" calls "${text}")
    foreach(call IN LISTS calls)
      if(call MATCHES "LABEL[ \t\r\n]+\"?unit\"?[ \t\r\n)]" AND call MATCHES "^ttmoe_test_suite\\([ \t\r\n]*([A-Za-z0-9_.+-]+)")
        set(suite ${CMAKE_MATCH_1})
        list(APPEND unit_targets ${suite})
        if(call MATCHES "UNITY_GROUP[ \t\r\n]+([A-Za-z0-9_]+)")
          list(APPEND sanitize_groups ${CMAKE_MATCH_1})
          list(APPEND group_${CMAKE_MATCH_1} ${suite})
        endif()
      endif()
    endforeach()
  endforeach()
  list(REMOVE_DUPLICATES unit_targets)
  # A skipped name that is no unit suite (renamed, removed) is an error, so the list cannot go stale
  # and silently sanitise less or more than it says.
  foreach(skip IN LISTS SKIP_SUITES)
    list(FIND unit_targets "${skip}" skip_at)  # not IN_LIST: this runs as a cmake -P script, policy CMP0057 unset
    if(skip_at EQUAL -1)
      message(FATAL_ERROR "[${PACKAGING_TEST}] SKIP_SUITES names '${skip}', which is no `unit` test suite in tests/*/CMakeLists.txt; update the list")
    endif()
  endforeach()
  # The suites of one UNITY_GROUP are one executable here: skipping some of them would still build
  # and run them all, so a list that splits a group is an error.
  list(REMOVE_DUPLICATES sanitize_groups)
  foreach(group IN LISTS sanitize_groups)
    set(skipped "")
    foreach(member IN LISTS group_${group})
      list(FIND SKIP_SUITES "${member}" skip_at)
      if(NOT skip_at EQUAL -1)
        list(APPEND skipped ${member})
      endif()
    endforeach()
    list(LENGTH skipped n_skipped)
    list(LENGTH group_${group} n_members)
    if(n_skipped GREATER 0 AND NOT n_skipped EQUAL n_members)
      message(FATAL_ERROR "[${PACKAGING_TEST}] SKIP_SUITES names ${skipped} but not the rest of their UNITY_GROUP ${group} (${group_${group}}), which is one executable here; skip all of them or none")
    endif()
  endforeach()
  list(REMOVE_ITEM unit_targets ${SKIP_SUITES})
endif()
if(unit_targets)
  packaging_step("build the unit test executables with ASan+UBSan" ${CMAKE_COMMAND} --build ${build} -j ${JOBS}
    --target ${unit_targets})
else()
  packaging_step("build all tests with ASan+UBSan" ${CMAKE_COMMAND} --build ${build} -j ${JOBS})
endif()

# Sanitizer errors abort the test process (halt_on_error, -fno-sanitize-recover), so ctest sees a failure;
# the full log of every test, passing ones included, is also scanned for any sanitizer report.
set(asan "detect_leaks=1:check_initialization_order=1:strict_init_order=1:halt_on_error=1")
set(ubsan "print_stacktrace=1:halt_on_error=1")
set(log ${build}/Testing/Temporary/LastTest.log)
file(REMOVE ${log})
# -FA: pull in no fixture set-up tests through FIXTURES_REQUIRED (today every fixture is generated by
# PyTorch: parity_fixtures, model_fixtures, moetta_fixture; unit tests need none).
set(ctest_cmd ${CMAKE_CTEST_COMMAND} --test-dir ${build} -L unit -LE "${EXCLUDE_LABELS}" -E "${EXCLUDE_NAMES}"
    -FA ".*" --no-tests=error --output-on-failure --test-output-size-passed 1000000 -j ${JOBS})
string(REPLACE ";" " " shown "${ctest_cmd}")
message(STATUS "[${PACKAGING_TEST}] run the unit tests: ASAN_OPTIONS=${asan} UBSAN_OPTIONS=${ubsan} ${shown}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=${asan} UBSAN_OPTIONS=${ubsan} ${ctest_cmd}
  RESULT_VARIABLE ctest_rc)

set(reports "")
if(EXISTS ${log})
  file(STRINGS ${log} reports REGEX "runtime error:|ERROR: (Address|Leak|Undefined|Thread)Sanitizer|SUMMARY: [A-Za-z]+Sanitizer")
else()
  message(WARNING "[${PACKAGING_TEST}] no ${log} to scan")
endif()
if(reports)
  list(JOIN reports "\n  " text)
  message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: sanitizer report lines in ${log} (full reports: failing tests above, every test in that log):\n  ${text}")
endif()
if(NOT ctest_rc STREQUAL "0")
  message(FATAL_ERROR "[${PACKAGING_TEST}] FAILED: `ctest -L unit` in the sanitizer build exited with ${ctest_rc} (see the failing tests above)")
endif()
message(STATUS "[${PACKAGING_TEST}] PASSED: unit tests clean under ASan+UBSan")
