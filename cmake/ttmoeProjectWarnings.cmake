# Warning flags for ttmoe's OWN targets (tests, examples, benchmarks). Never installed or exported:
# consumers of ttmoe::ttmoe get none of these flags, so nothing here hides a warning in their code.
#
# GCC before 13 reports -Wmaybe-uninitialized / -Wuninitialized on the variable `__Y` inside
# <avx512fintrin.h> wherever an AVX-512 intrinsic built on _mm512_undefined_*() is inlined into
# optimised code (GCC bug 105593, fixed in GCC 13). In an AVX-512 build (-march=native on such a CPU)
# that is thousands of warnings, all in the compiler's own header, and they bury real ones. These two
# flags are dropped for GCC < 13 only; every other compiler keeps them.
add_library(ttmoe_project_warnings INTERFACE)
target_compile_options(ttmoe_project_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-maybe-uninitialized;-Wno-uninitialized>)
