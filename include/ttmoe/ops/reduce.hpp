#pragma once
// Reductions along a compile-time axis (negative counts from the end): sum, mean, max, min, argmax,
// argmin, variance, logsumexp; softmax and log_softmax; and whole-tensor sum/mean. Each records its VJP.
// Operands may be lazy expressions (they are evaluated first).

#include <cstdint>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe {

namespace detail {
/// [outer, n, inner] view of extents around axis A.
template <std::size_t A, std::size_t R>
std::array<index_t, 3> axis_view(const std::array<index_t, R>& e) {
  return {extent_product(e, 0, A), e[A], extent_product(e, A + 1, R)};
}
template <std::size_t A, bool Keep, class S>
using reduced_shape_t = std::conditional_t<Keep, shape_set_t<S, A, 1>, shape_drop_t<S, A>>;

template <std::size_t A, bool Keep, class S>
auto reduced_shape(const S& s) {
  using SO = reduced_shape_t<A, Keep, S>;
  auto e = s.extents();
  if constexpr (Keep) {
    e[A] = 1;
    return SO::from_extents(e);
  } else {
    return SO::from_extents(drop_extent<A>(e));
  }
}
}  // namespace detail

namespace detail {
/// The frame every reduction to a smaller shape shares: evaluates the operand, allocates the output
/// with Axis reduced (kept as 1 with KeepDim), runs `forward(x, out, v)` on x's [outer, n, inner]
/// view `v` and, when x needs a gradient, records under `name` the VJP that `make_vjp(x, out, v)`
/// returns (called only then, so it may capture x's gradient metadata).
template <int Axis, bool KeepDim, class X, class Forward, class MakeVjp>
auto reduce_along(const X& xin, const char* name, Forward&& forward, MakeVjp&& make_vjp) {
  auto x = eval(xin);
  using TX = std::remove_cvref_t<decltype(x)>;
  constexpr std::size_t A = axis_v<Axis, TX::rank>;
  const auto v = axis_view<A>(x.extents());
  Tensor<typename TX::value_type, reduced_shape_t<A, KeepDim, typename TX::shape_type>, typename TX::device_type> out(
      reduced_shape<A, KeepDim>(x.shape()));
  forward(x, out, v);
  if (should_record(x)) record(name, out, make_vjp(x, out, v));
  return out;
}
/// The backend of an operand's device.
template <class X>
using backend_of = Backend<typename std::remove_cvref_t<X>::device_type>;
}  // namespace detail

/// Sum along Axis (scaled by `scale`, used by mean).
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto sum(const X& xin, expr::operand_value_t<X> scale = 1) {
  using B = detail::backend_of<X>;
  return detail::reduce_along<Axis, KeepDim>(
      xin, "sum",
      [scale](const auto& x, auto& out, const auto& v) {
        B::reduce_sum(x.data(), out.data(), v[0], v[1], v[2], scale);
      },
      [scale](const auto& x, const auto&, const auto& v) {
        return [m = x.meta(), v, scale](const auto* g) {
          B::broadcast_add_axis(m->accumulate_target(), g, v[0], v[1], v[2], scale);
        };
      });
}

/// Mean along Axis.
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto mean(const X& xin) {
  auto x = eval(xin);
  using T = typename std::remove_cvref_t<decltype(x)>::value_type;
  constexpr std::size_t A = axis_v<Axis, std::remove_cvref_t<decltype(x)>::rank>;
  const index_t n = x.extent(A);
  return sum<Axis, KeepDim>(x, n == 0 ? T(0) : T(1) / T(n));
}

/// Sum of every element, as a rank-0 tensor.
template <class X>
  requires expr::Operand<X>
auto sum_all(const X& xin, typename std::remove_cvref_t<X>::value_type scale = 1) {
  auto x = eval(xin);
  return sum<0>(x.reshape(Shape<dyn>(x.numel())), scale);  // rank 0
}
/// Mean of every element, as a rank-0 tensor.
template <class X>
  requires expr::Operand<X>
auto mean_all(const X& xin) {
  auto x = eval(xin);
  using T = typename std::remove_cvref_t<decltype(x)>::value_type;
  return sum_all(x, x.numel() == 0 ? T(0) : T(1) / T(x.numel()));
}

namespace detail {
/// Max / min (IsMin) along Axis with the index of the chosen element: the values record under `name`
/// (the gradient flows to that element) and the indices are returned beside them.
template <int Axis, bool KeepDim, bool IsMin, class X>
auto extremum(const X& xin, const char* name) {
  using TX = std::remove_cvref_t<decltype(eval(xin))>;
  using D = typename TX::device_type;
  using Indices = Tensor<std::int64_t, reduced_shape_t<axis_v<Axis, TX::rank>, KeepDim, typename TX::shape_type>, D>;
  Indices idx;
  auto out = reduce_along<Axis, KeepDim>(
      xin, name,
      [&idx, name](const auto& x, auto& values, const auto& v) {
        if (v[1] == 0)
          throw ValueError(std::string(name) + ": reduction over an empty axis of shape " + x.shape().to_string());
        idx = Indices(values.shape());
        Backend<D>::reduce_extremum(x.data(), values.data(), idx.data(), v[0], v[1], v[2], IsMin);
      },
      [&idx](const auto& x, const auto&, const auto& v) {
        return [m = x.meta(), v, idx](const auto* g) {
          Backend<D>::scatter_add_axis(m->accumulate_target(), g, idx.data(), v[0], v[1], v[2], index_t(1));
        };
      });
  return std::pair{out, idx};
}
}  // namespace detail

/// Maximum along Axis (gradient flows to the first maximal element).
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto max(const X& x) {
  return detail::extremum<Axis, KeepDim, false>(x, "max").first;
}
/// Minimum along Axis.
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto min(const X& x) {
  return detail::extremum<Axis, KeepDim, true>(x, "min").first;
}
/// Index of the first maximum along Axis (int64, not differentiable).
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto argmax(const X& x) {
  autograd::NoGrad ng;
  return detail::extremum<Axis, KeepDim, false>(x, "argmax").second;
}
/// Index of the first minimum along Axis.
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto argmin(const X& x) {
  autograd::NoGrad ng;
  return detail::extremum<Axis, KeepDim, true>(x, "argmin").second;
}

/// Variance along Axis with `ddof` delta degrees of freedom (0: population, 1: unbiased).
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto variance(const X& xin, index_t ddof = 0) {
  using B = detail::backend_of<X>;
  return detail::reduce_along<Axis, KeepDim>(
      xin, "variance",
      [ddof](const auto& x, auto& out, const auto& v) {
        if (v[1] <= ddof)
          throw ValueError("variance: axis of length " + std::to_string(v[1]) + " with ddof " + std::to_string(ddof));
        B::reduce_variance(x.data(), out.data(), v[0], v[1], v[2], ddof);
      },
      [ddof](const auto& x, const auto&, const auto& v) {
        return [m = x.meta(), v, x, ddof](const auto* g) {
          B::variance_backward(x.data(), g, m->accumulate_target(), v[0], v[1], v[2], ddof);
        };
      });
}

/// log(sum(exp(x))) along Axis, computed stably.
template <int Axis, bool KeepDim = false, class X>
  requires expr::Operand<X>
auto logsumexp(const X& xin) {
  using B = detail::backend_of<X>;
  return detail::reduce_along<Axis, KeepDim>(
      xin, "logsumexp",
      [](const auto& x, auto& out, const auto& v) { B::logsumexp(x.data(), out.data(), v[0], v[1], v[2]); },
      [](const auto& x, const auto& out, const auto& v) {
        return [m = x.meta(), v, x, out_saved = out.detach()](const auto* g) {
          B::logsumexp_backward(x.data(), out_saved.data(), g, m->accumulate_target(), v[0], v[1], v[2]);
        };
      });
}

namespace detail {
template <int Axis, bool Log, class X>
auto softmax_impl(const X& xin) {
  auto x = eval(xin);
  using TX = std::remove_cvref_t<decltype(x)>;
  using T = typename TX::value_type;
  using D = typename TX::device_type;
  constexpr std::size_t A = axis_v<Axis, TX::rank>;
  const auto v = axis_view<A>(x.extents());
  TX out(x.shape());
  Backend<D>::softmax(x.data(), out.data(), v[0], v[1], v[2], Log);
  if (should_record(x)) {
    auto m = x.meta();
    record(Log ? "log_softmax" : "softmax", out, [m, v, y = out.detach()](const T* g) {
      Backend<D>::softmax_backward(y.data(), g, m->accumulate_target(), v[0], v[1], v[2], Log);
    });
  }
  return out;
}
}  // namespace detail

/// softmax along Axis (default: last).
template <int Axis = -1, class X>
  requires expr::Operand<X>
auto softmax(const X& x) {
  return detail::softmax_impl<Axis, false>(x);
}
/// log_softmax along Axis (default: last).
template <int Axis = -1, class X>
  requires expr::Operand<X>
auto log_softmax(const X& x) {
  return detail::softmax_impl<Axis, true>(x);
}

}  // namespace ttmoe
