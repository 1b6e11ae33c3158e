#pragma once
// The one way an op records itself: `record(name, out, vjp)` gives `out` fresh gradient metadata and
// pushes the VJP closure onto the active tape. The closure captures exactly what its VJP reads.

#include "ttmoe/core/recording.hpp"
#include "ttmoe/core/tensor.hpp"

namespace ttmoe {

/// Pushes `vjp(const T* grad_out)` for output `out` onto the active tape.
template <class T, class S, class D, class F>
void record(const char* name, Tensor<T, S, D>& out, F&& vjp) {
  autograd::active_recorder()->push(name, out.make_output_meta(), std::forward<F>(vjp));
}

/// Like record, for a VJP that hands its output gradient on (pass_gradient, core/tensor.hpp):
/// `vjp(g, out_meta)`.
template <class T, class S, class D, class F>
void record_with_output(const char* name, Tensor<T, S, D>& out, F&& vjp) {
  auto om = out.make_output_meta();
  // The node owns `om`, so the raw pointer lives as long as the closure.
  autograd::active_recorder()->push(name, om, [o = om.get(), f = std::forward<F>(vjp)](const T* g) { f(g, *o); });
}

/// Normalises a possibly negative axis for rank R at compile time.
template <int Axis, std::size_t R>
inline constexpr std::size_t axis_v = [] {
  static_assert(Axis < int(R) && Axis >= -int(R), "ttmoe: axis out of range for this rank");
  return static_cast<std::size_t>(Axis < 0 ? Axis + int(R) : Axis);
}();

/// Product of extents [b, e).
template <std::size_t R>
index_t extent_product(const std::array<index_t, R>& e, std::size_t b, std::size_t end) {
  index_t p = 1;
  for (std::size_t i = b; i < end; ++i) p *= e[i];
  return p;
}

}  // namespace ttmoe
