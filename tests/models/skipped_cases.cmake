# Run by CTest after the discovered cases are registered (TEST_INCLUDE_FILES, tests/models/CMakeLists.txt):
# Catch2 2 has no SKIP, so a case that cannot run on this CPU prints a TTMOE_SKIPPED line and asserts
# nothing, and this marks such output as skipped instead of passed. The cases named here are those
# that can print it.
cmake_policy(PUSH)
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST): CTest reads this file with no policies set
foreach(name IN ITEMS
    "AVX512-BF16 vdpbf16ps GEMM and GEMV: rounded x times BF16 W against a double reference, edge shapes, epilogue, threads")
  # CTest's if(TEST) does not see its own add_test; catch_discover_tests lists each suite's cases in
  # <executable>_TESTS (test_sanitized_llama in a sanitized build).
  if("${name}" IN_LIST test_llama_bf16_TESTS OR "${name}" IN_LIST test_sanitized_llama_TESTS)
    set_tests_properties("${name}" PROPERTIES SKIP_REGULAR_EXPRESSION "TTMOE_SKIPPED: ")
  endif()
endforeach()
cmake_policy(POP)
