#pragma once
// xsimd batch overloads of ttmoe::vm, plus the unaligned load/store/broadcast helpers the CPU
// executor uses. Host-only (never included by nvcc device translation units).

#include "ttmoe/simd/xsimd.hpp"

namespace ttmoe::vm {

template <class T, class A>
using vbatch = xsimd::batch<T, A>;

#define TTMOE_VM_BATCH_UNARY(name, fn)                      \
  template <class T, class A>                              \
  inline vbatch<T, A> name(const vbatch<T, A>& x) {        \
    return fn(x);                                          \
  }
TTMOE_VM_BATCH_UNARY(exp, xsimd::exp)
TTMOE_VM_BATCH_UNARY(log, xsimd::log)
TTMOE_VM_BATCH_UNARY(tanh, xsimd::tanh)
TTMOE_VM_BATCH_UNARY(sqrt, xsimd::sqrt)
TTMOE_VM_BATCH_UNARY(abs, xsimd::abs)
#undef TTMOE_VM_BATCH_UNARY

/// erf of a float batch as one rational function, x P(x^2) / Q(x^2) on [-4, 4] (odd degree-13 over
/// even degree-8, the minimax fit Eigen uses; beyond +-4 erf is +-1 to float precision). xsimd::erf
/// evaluates an exp and two polynomials per lane and selects, several times the work, and made the
/// exact GELU compute-bound. NaN stays NaN (the clamp alone would turn it into +-1).
template <class A>
inline vbatch<float, A> erf(const vbatch<float, A>& a) {
  using B = vbatch<float, A>;
  const B x = xsimd::max(xsimd::min(a, B(4.f)), B(-4.f));
  const B x2 = x * x;
  B p = xsimd::fma(x2, B(-2.72614225801306e-10f), B(2.77068142495902e-08f));
  p = xsimd::fma(x2, p, B(-2.10102402082508e-06f));
  p = xsimd::fma(x2, p, B(-5.69250639462346e-05f));
  p = xsimd::fma(x2, p, B(-7.34990630326855e-04f));
  p = xsimd::fma(x2, p, B(-2.95459980854025e-03f));
  p = xsimd::fma(x2, p, B(-1.60960333262415e-02f));
  B q = xsimd::fma(x2, B(-1.45660718464996e-05f), B(-2.13374055278905e-04f));
  q = xsimd::fma(x2, q, B(-1.68282697438203e-03f));
  q = xsimd::fma(x2, q, B(-7.37332916720468e-03f));
  q = xsimd::fma(x2, q, B(-1.42647390514189e-02f));
  return xsimd::select(xsimd::isnan(a), a, x * p / q);
}
/// erf of a double batch: xsimd's (double needs its accuracy, and is not on the hot path).
template <class A>
inline vbatch<double, A> erf(const vbatch<double, A>& a) {
  return xsimd::erf(a);
}

template <class T, class A>
inline vbatch<T, A> pow(const vbatch<T, A>& x, const vbatch<T, A>& y) {
  return xsimd::pow(x, y);
}
// NaN-propagating max/min, matching the scalar versions (and torch.maximum). NaN is tested with
// xsimd::isnan: xsimd 8's AVX/AVX-512 `!=` is an ordered compare, so `a != a` is false for NaN there.
template <class T, class A>
inline vbatch<T, A> max(const vbatch<T, A>& a, const vbatch<T, A>& b) {
  return xsimd::select((a > b) || xsimd::isnan(a), a, b);
}
template <class T, class A>
inline vbatch<T, A> min(const vbatch<T, A>& a, const vbatch<T, A>& b) {
  return xsimd::select((a < b) || xsimd::isnan(a), a, b);
}
template <class T, class A>
inline vbatch<T, A> gt(const vbatch<T, A>& a, const vbatch<T, A>& b) {
  return xsimd::select(a > b, vbatch<T, A>(T(1)), vbatch<T, A>(T(0)));
}
template <class T, class A>
inline vbatch<T, A> ge(const vbatch<T, A>& a, const vbatch<T, A>& b) {
  return xsimd::select(a >= b, vbatch<T, A>(T(1)), vbatch<T, A>(T(0)));
}
template <class T, class A>
inline vbatch<T, A> eq(const vbatch<T, A>& a, const vbatch<T, A>& b) {
  return xsimd::select(a == b, vbatch<T, A>(T(1)), vbatch<T, A>(T(0)));
}
template <class T, class A>
inline vbatch<T, A> select(const vbatch<T, A>& m, const vbatch<T, A>& a, const vbatch<T, A>& b) {
  return xsimd::select(m == vbatch<T, A>(T(0)), b, a);  // not `m != 0`: ordered, false for a NaN mask
}

}  // namespace ttmoe::vm

namespace ttmoe::cpu_backend {

/// The widest batch of T this translation unit was compiled for.
template <class T>
using batch = xsimd::batch<T>;

/// Number of lanes of batch<T>.
template <class T>
inline constexpr std::size_t lanes = batch<T>::size;

}  // namespace ttmoe::cpu_backend

namespace ttmoe::vm {
/// Unaligned load of a batch.
template <class V, class T>
  requires(!std::is_same_v<V, T>)
inline V load(const T* p) {
  return V::load_unaligned(p);
}
/// Unaligned store of a batch.
template <class T, class A>
inline void store(T* p, const xsimd::batch<T, A>& v) {
  v.store_unaligned(p);
}
}  // namespace ttmoe::vm
