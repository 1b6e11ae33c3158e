#pragma once
// xsimd batch overloads of ttmoe::vm, plus the unaligned load/store/broadcast helpers the CPU
// executor uses. Host-only (never included by nvcc device translation units).

#include <xsimd/xsimd.hpp>

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
TTMOE_VM_BATCH_UNARY(erf, xsimd::erf)
TTMOE_VM_BATCH_UNARY(sqrt, xsimd::sqrt)
TTMOE_VM_BATCH_UNARY(abs, xsimd::abs)
#undef TTMOE_VM_BATCH_UNARY

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
