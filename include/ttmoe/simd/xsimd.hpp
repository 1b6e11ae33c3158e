#pragma once
// <xsimd/xsimd.hpp> as ttmoe's headers include it: through here, so that a Debug (-O0) build on a
// CPU with AVX512BW compiles with GCC 12.
// Why: without optimisation (__OPTIMIZE__ undefined), GCC 12's avx512bwintrin.h defines
// _mm512_mask_blend_epi8 and _mm512_mask_blend_epi16 as macros that cast their vector arguments
// straight to __v64qi / __v32hi, where its optimised branch declares functions taking __m512i.
// xsimd's avx512bw select() passes batch objects, which convert to __m512i but not to those types,
// so every -O0 -march=native build on such a CPU stopped inside xsimd (seen on an AMD EPYC with
// AVX-512 in the sanitizer build, which runs at -O0). Where the header made them macros, we put back
// the functions it declares under optimisation: the same builtin, the same types. A program that
// includes xsimd itself before any ttmoe header gets xsimd's own behaviour.
#if (defined(__x86_64__) || defined(__i386__)) && defined(__AVX512BW__)
#include <immintrin.h>
#if defined(_mm512_mask_blend_epi8)
#undef _mm512_mask_blend_epi8
/// GCC 12's optimised-build definition (see above): per byte, __W where __U is set, else __A.
inline __m512i _mm512_mask_blend_epi8(__mmask64 __U, __m512i __A, __m512i __W) {
  return reinterpret_cast<__m512i>(__builtin_ia32_blendmb_512_mask(reinterpret_cast<__v64qi>(__A),
                                                                  reinterpret_cast<__v64qi>(__W), __U));
}
#endif
#if defined(_mm512_mask_blend_epi16)
#undef _mm512_mask_blend_epi16
/// GCC 12's optimised-build definition (see above): per 16-bit lane, __W where __U is set, else __A.
inline __m512i _mm512_mask_blend_epi16(__mmask32 __U, __m512i __A, __m512i __W) {
  return reinterpret_cast<__m512i>(__builtin_ia32_blendmw_512_mask(reinterpret_cast<__v32hi>(__A),
                                                                  reinterpret_cast<__v32hi>(__W), __U));
}
#endif
#endif

#include <xsimd/xsimd.hpp>
