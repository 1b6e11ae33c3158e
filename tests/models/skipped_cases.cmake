# Run by CTest after the discovered cases are registered (TEST_INCLUDE_FILES, tests/models/CMakeLists.txt):
# Catch2 2 has no SKIP, so a case that cannot run on this CPU prints a TTMOE_SKIPPED line and asserts
# nothing, and this marks such output as skipped instead of passed. The cases named here are those
# that can print it.
foreach(name IN ITEMS
    "AVX512-BF16 vdpbf16ps GEMM: rounded x times BF16 W against a double reference, edge shapes, epilogue, threads")
  if(TEST "${name}")
    set_tests_properties("${name}" PROPERTIES SKIP_REGULAR_EXPRESSION "TTMOE_SKIPPED: ")
  endif()
endforeach()
