#pragma once
// The math the op functors are written in. Every function works on a scalar (float/double, also in
// CUDA device code) and, on host compilers, on an xsimd batch, so one functor body serves the scalar
// fallback, the SIMD loop and the thrust/CUDA transform. Comparisons return 1/0 in the value type so
// that masks compose with arithmetic.

#include <cmath>
#include <type_traits>

#include "ttmoe/core/config.hpp"

namespace ttmoe::vm {

#define TTMOE_VM_UNARY(name, expr)                            \
  TTMOE_HD inline float name(float x) { return expr; }        \
  TTMOE_HD inline double name(double x) { return expr; }

TTMOE_VM_UNARY(exp, ::std::exp(x))
TTMOE_VM_UNARY(log, ::std::log(x))
TTMOE_VM_UNARY(tanh, ::std::tanh(x))
TTMOE_VM_UNARY(erf, ::std::erf(x))
TTMOE_VM_UNARY(sqrt, ::std::sqrt(x))
TTMOE_VM_UNARY(abs, ::std::fabs(x))
#undef TTMOE_VM_UNARY

TTMOE_HD inline float pow(float x, float y) { return ::std::pow(x, y); }
TTMOE_HD inline double pow(double x, double y) { return ::std::pow(x, y); }
TTMOE_HD inline float max(float a, float b) { return a > b || a != a ? a : b; }
TTMOE_HD inline double max(double a, double b) { return a > b || a != a ? a : b; }
TTMOE_HD inline float min(float a, float b) { return a < b || a != a ? a : b; }
TTMOE_HD inline double min(double a, double b) { return a < b || a != a ? a : b; }
/// 1 where a > b (else 0).
TTMOE_HD inline float gt(float a, float b) { return a > b ? 1.f : 0.f; }
TTMOE_HD inline double gt(double a, double b) { return a > b ? 1.0 : 0.0; }
/// 1 where a >= b.
TTMOE_HD inline float ge(float a, float b) { return a >= b ? 1.f : 0.f; }
TTMOE_HD inline double ge(double a, double b) { return a >= b ? 1.0 : 0.0; }
/// 1 where a == b.
TTMOE_HD inline float eq(float a, float b) { return a == b ? 1.f : 0.f; }
TTMOE_HD inline double eq(double a, double b) { return a == b ? 1.0 : 0.0; }
/// a where mask != 0, else b.
TTMOE_HD inline float select(float m, float a, float b) { return m != 0.f ? a : b; }
TTMOE_HD inline double select(double m, double a, double b) { return m != 0.0 ? a : b; }

}  // namespace ttmoe::vm

#if !defined(__CUDACC__)
#include "ttmoe/simd/math.hpp"
#endif

namespace ttmoe::vm {
/// Loads one V from p (scalar version; the batch version lives with the SIMD shim).
template <class V, class T>
  requires std::is_same_v<V, T>
TTMOE_HD inline V load(const T* p) {
  return *p;
}
/// Stores one V to p (scalar version).
template <class T>
TTMOE_HD inline void store(T* p, T v) {
  *p = v;
}
}  // namespace ttmoe::vm
