#pragma once
// Kernels: the plain-data evaluators an executor runs. An expression (which owns its operands) is
// turned into a tree of kernels holding raw pointers and broadcast strides; the tree is trivially
// copyable, so each CPU thread takes its own copy and a thrust transform can carry it to the GPU by
// value. `eval` computes the forward value at inner position j of the current row; `fwd` + `bwd`
// compute the forward values once and push the upstream gradient down to the leaves' sinks.

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "ttmoe/core/config.hpp"
#include "ttmoe/expr/vmath.hpp"

namespace ttmoe::expr {

/// A minimal tuple usable in device code.
template <class... Ks>
struct KTuple;
template <>
struct KTuple<> {};
template <class K, class... Ks>
struct KTuple<K, Ks...> {
  K head;
  KTuple<Ks...> tail;
};
/// Builds a KTuple (nested aggregate) from its elements.
TTMOE_HD constexpr KTuple<> make_ktuple() { return {}; }
template <class K, class... Ks>
TTMOE_HD constexpr KTuple<K, Ks...> make_ktuple(K k, Ks... ks) {
  return {k, make_ktuple(ks...)};
}
/// I-th element of a KTuple.
template <std::size_t I, class Tup>
TTMOE_HD constexpr auto& kget(Tup& t) {
  if constexpr (I == 0) {
    return t.head;
  } else {
    return kget<I - 1>(t.tail);
  }
}

/// A tensor operand read with broadcast strides over the output's (coalesced) dimensions.
template <class T, std::size_t R>
struct LeafKernel {
  const T* base = nullptr;
  std::array<index_t, R> stride{};
  const T* row = nullptr;   // start of the current output row in this operand
  T* sink_base = nullptr;   // gradient sink in output layout (backward only; null = not needed)
  T* sink_row = nullptr;
  bool inner_contiguous = true;
  bool sink_store = false;  // the sink holds garbage and this is its first writer: store, not add

  /// Positions the operand at the output row whose outer multi-index is idx (last entry ignored).
  TTMOE_HD void set_row(const std::array<index_t, R>& idx, index_t out_row_offset) {
    index_t off = 0;
    if constexpr (R > 0)  // nvcc warns (#186) on `d + 1 < 0` with an unsigned bound
      for (std::size_t d = 0; d + 1 < R; ++d) off += idx[d] * stride[d];
    row = base ? base + off : nullptr;
    if (sink_base) sink_row = sink_base + out_row_offset;
  }
  /// Value at inner position j of the current row.
  template <class V>
  TTMOE_HD V eval(index_t j) const {
    return inner_contiguous ? vm::load<V>(row + j) : V(*row);
  }
  /// Value at an arbitrary output multi-index (for executors without rows, e.g. one GPU thread each).
  TTMOE_HD T at(const std::array<index_t, R>& idx) const {
    index_t off = 0;
    if constexpr (R > 0)
      for (std::size_t d = 0; d < R; ++d) off += idx[d] * stride[d];
    return base[off];
  }
  template <class V>
  struct Cache {
    V out;
  };
  template <class V>
  TTMOE_HD V fwd(index_t j, Cache<V>& c) const {
    // A null row is an operand the backward pass did not keep (no needed VJP reads its value).
    return c.out = row ? eval<V>(j) : V(0);
  }
  template <class V>
  TTMOE_HD void bwd(index_t j, const Cache<V>&, V g) const {
    if (sink_row) vm::store(sink_row + j, sink_store ? g : vm::load<V>(sink_row + j) + g);
  }
  template <class F>
  void visit_leaves(F&& f) {
    f(*this);
  }
};

/// A scalar operand.
template <class T>
struct ScalarKernel {
  T value;
  template <std::size_t R>
  TTMOE_HD void set_row(const std::array<index_t, R>&, index_t) {}
  template <class V>
  TTMOE_HD V eval(index_t) const {
    return V(value);
  }
  template <std::size_t R>
  TTMOE_HD T at(const std::array<index_t, R>&) const {
    return value;
  }
  template <class V>
  struct Cache {
    V out;
  };
  template <class V>
  TTMOE_HD V fwd(index_t, Cache<V>& c) const {
    return c.out = V(value);
  }
  template <class V>
  TTMOE_HD void bwd(index_t, const Cache<V>&, V) const {}
  template <class F>
  void visit_leaves(F&&) {}
};

/// An op node over child kernels.
template <class Op, class... Ks>
struct OpKernel {
  KTuple<Ks...> kids;
  bool active = true;  // false when no operand below needs a gradient (skips the VJP)

  template <std::size_t R>
  TTMOE_HD void set_row(const std::array<index_t, R>& idx, index_t out_row_offset) {
    set_rows(idx, out_row_offset, std::index_sequence_for<Ks...>{});
  }
  template <class V>
  TTMOE_HD V eval(index_t j) const {
    return eval_impl<V>(j, std::index_sequence_for<Ks...>{});
  }
  template <std::size_t R>
  TTMOE_HD auto at(const std::array<index_t, R>& idx) const {
    return at_impl(idx, std::index_sequence_for<Ks...>{});
  }
  template <class V>
  struct Cache {
    V out;
    KTuple<typename Ks::template Cache<V>...> kids;
  };
  template <class V>
  TTMOE_HD V fwd(index_t j, Cache<V>& c) const {
    return c.out = fwd_impl<V>(j, c, std::index_sequence_for<Ks...>{});
  }
  template <class V>
  TTMOE_HD void bwd(index_t j, const Cache<V>& c, V g) const {
    if (active) bwd_impl<V>(j, c, g, std::index_sequence_for<Ks...>{});
  }
  template <class F>
  void visit_leaves(F&& f) {
    visit_impl(f, std::index_sequence_for<Ks...>{});
  }

 private:
  template <std::size_t R, std::size_t... I>
  TTMOE_HD void set_rows(const std::array<index_t, R>& idx, index_t off, std::index_sequence<I...>) {
    (kget<I>(kids).set_row(idx, off), ...);
  }
  template <class V, std::size_t... I>
  TTMOE_HD V eval_impl(index_t j, std::index_sequence<I...>) const {
    return Op::apply(kget<I>(const_cast<KTuple<Ks...>&>(kids)).template eval<V>(j)...);
  }
  template <std::size_t R, std::size_t... I>
  TTMOE_HD auto at_impl(const std::array<index_t, R>& idx, std::index_sequence<I...>) const {
    return Op::apply(kget<I>(const_cast<KTuple<Ks...>&>(kids)).at(idx)...);
  }
  template <class V, std::size_t... I>
  TTMOE_HD V fwd_impl(index_t j, Cache<V>& c, std::index_sequence<I...>) const {
    return Op::apply(kget<I>(const_cast<KTuple<Ks...>&>(kids)).template fwd<V>(j, kget<I>(c.kids))...);
  }
  template <class V, std::size_t... I>
  TTMOE_HD void bwd_impl(index_t j, const Cache<V>& c, V g, std::index_sequence<I...>) const {
    V grads[sizeof...(Ks)];
    auto& cc = const_cast<Cache<V>&>(c);
    Op::vjp(kget<I>(cc.kids).out..., c.out, g, grads[I]...);
    (kget<I>(const_cast<KTuple<Ks...>&>(kids)).template bwd<V>(j, kget<I>(cc.kids), grads[I]), ...);
  }
  template <class F, std::size_t... I>
  void visit_impl(F& f, std::index_sequence<I...>) {
    (kget<I>(kids).visit_leaves(f), ...);
  }
};

/// Settles which leaves of a backward kernel tree store into a fresh (uninitialised) gradient sink
/// and which add, given the sinks that were fresh when the tree was built: a fresh sink's FIRST leaf
/// in visiting order stores, every later leaf on the same sink adds. Leaves run their VJP in that
/// same order at each element (OpKernel visits and runs its children left to right), so an operand
/// used twice (x * x) stores its first term and adds the second. Why: a fresh gradient then needs no
/// zero fill before the pass and no read in it. Host code (it runs before the kernel is launched).
template <class K>
void settle_fresh_sinks(K& k, const std::vector<const void*>& fresh) {
  std::vector<const void*> seen;
  k.visit_leaves([&](auto& leaf) {
    if constexpr (requires { leaf.sink_store; }) {
      if (!leaf.sink_base) return;
      const bool first = std::find(seen.begin(), seen.end(), leaf.sink_base) == seen.end();
      leaf.sink_store = first && std::find(fresh.begin(), fresh.end(), leaf.sink_base) != fresh.end();
      if (first) seen.push_back(leaf.sink_base);
    }
  });
}

}  // namespace ttmoe::expr
