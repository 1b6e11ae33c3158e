#pragma once
// Lazy elementwise expressions. `a * x + b` builds an Expr tree (no work, no allocation); assigning it
// to a Tensor runs ONE fused loop on the tensors' device. Operands are held by value: a tensor operand
// is a shared handle, so a lazy expression kept in `auto` keeps its operands alive (no dangling).
// Shapes broadcast with numpy rules; static clashes fail to compile, dynamic ones throw ShapeError.
// Under a tape, materialising records one node whose VJP is one fused loop over the same tree.

#include <array>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "ttmoe/core/broadcast.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/expr/kernel.hpp"
#include "ttmoe/expr/ops.hpp"

namespace ttmoe {
namespace expr {

/// Collects the work to finish a fused backward pass (reducing broadcast operands' gradients).
template <class T, class D>
struct BackwardPlan {
  std::vector<std::shared_ptr<Buffer<T, D>>> temps;
  std::vector<std::function<void()>> finish;
  /// Gradient buffers allocated (uninitialised) for this pass: their first leaf stores into them
  /// (settle_fresh_sinks) instead of a zero fill followed by adds.
  std::vector<const void*> fresh_sinks;
};

/// A tensor operand of an expression.
template <class T, class S, class D>
struct TensorLeaf {
  using value_type = T;
  using shape_type = S;
  using device_type = D;
  static constexpr std::size_t rank = S::rank;
  Tensor<T, S, D> tensor;

  std::array<index_t, rank> extents() const { return tensor.extents(); }
  bool requires_grad() const { return tensor.requires_grad(); }
  /// This operand as the backward pass keeps it: whole when its values are read, else only its
  /// shape and gradient metadata (the buffer is released).
  TensorLeaf for_backward(bool keep_values) const {
    if (keep_values) return *this;
    return {Tensor<T, S, D>::from_parts(nullptr, nullptr, tensor.shape(), tensor.meta())};
  }

  template <std::size_t R>
  LeafKernel<T, R> kernel(const std::array<index_t, R>& out) const {
    LeafKernel<T, R> k;
    k.base = tensor.data();
    k.stride = broadcast_strides<R>(tensor.extents(), out);
    return k;
  }
  template <std::size_t R>
  LeafKernel<T, R> backward_kernel(const std::array<index_t, R>& out, bool needed, BackwardPlan<T, D>& plan) const {
    LeafKernel<T, R> k = kernel(out);
    if (!needed || !tensor.requires_grad()) return k;
    index_t out_n = 1;
    for (auto e : out) out_n *= e;
    auto meta = tensor.meta();
    if (out_n == tensor.numel()) {  // same layout as the output: write in place
      const auto t = meta->target();
      k.sink_base = t.data;
      if (t.fresh) plan.fresh_sinks.push_back(t.data);
    } else {
      auto tmp = make_buffer<T, D>(out_n);  // this leaf's own: its VJP stores every element
      k.sink_base = tmp->data();
      plan.fresh_sinks.push_back(tmp->data());
      plan.temps.push_back(tmp);
      const auto leaf_ext = tensor.extents();
      plan.finish.push_back([tmp, meta, leaf_ext, out] {
        Backend<D>::reduce_broadcast_add(meta->accumulate_target(), leaf_ext, tmp->data(), out);
      });
    }
    return k;
  }
};

/// A scalar operand (broadcasts to any shape, never differentiated).
template <class T>
struct ScalarLeaf {
  using value_type = T;
  using shape_type = Shape<>;
  using device_type = void;
  static constexpr std::size_t rank = 0;
  T value;

  std::array<index_t, 0> extents() const { return {}; }
  bool requires_grad() const { return false; }
  ScalarLeaf for_backward(bool) const { return *this; }
  template <std::size_t R>
  ScalarKernel<T> kernel(const std::array<index_t, R>&) const {
    return {value};
  }
  template <std::size_t R, class D>
  ScalarKernel<T> backward_kernel(const std::array<index_t, R>&, bool, BackwardPlan<T, D>&) const {
    return {value};
  }
};

template <class... A>
struct common_device {
  using type = void;
};
template <class A, class... Rest>
struct common_device<A, Rest...> {
  using rest = typename common_device<Rest...>::type;
  static_assert(std::is_void_v<A> || std::is_void_v<rest> || std::is_same_v<A, rest>,
                "ttmoe: operands of one expression live on different devices; copy one first");
  using type = std::conditional_t<std::is_void_v<A>, rest, A>;
};

/// True when `Op` says which of its N operands' values its VJP reads (see ops.hpp). A named concept
/// rather than an inline requires-expression: nvcc 13's front end crashes on the latter inside Expr.
template <class Op, std::size_t N>
concept states_kept_operands = requires { Op::keep_operands(std::array<bool, N>{}); };

/// An op applied elementwise to operand expressions.
template <class Op, class... A>
struct Expr {
  using is_lazy_expression = void;
  using value_type = std::common_type_t<typename A::value_type...>;
  using shape_type = broadcast_shape_t<Op, typename A::shape_type...>;
  using device_type = typename common_device<typename A::device_type...>::type;
  static constexpr std::size_t rank = shape_type::rank;
  static_assert((std::is_same_v<typename A::value_type, value_type> && ...),
                "ttmoe: operands of one expression must share an element type; convert one first");

  std::tuple<A...> args;
  std::array<index_t, rank> ext;

  explicit Expr(A... a) : args(std::move(a)...), ext(compute_extents()) {}

  std::array<index_t, rank> extents() const { return ext; }
  /// True when materialising this expression must be recorded.
  bool requires_grad() const {
    if constexpr (!Op::differentiable) {
      return false;
    } else {
      return std::apply([](const auto&... x) { return (x.requires_grad() || ...); }, args);
    }
  }
  /// The expression as its backward pass keeps it: operands whose values no needed VJP reads are
  /// reduced to shape + gradient metadata, so their buffers are not held by the tape.
  Expr for_backward(bool keep_values) const {
    constexpr std::size_t N = sizeof...(A);
    std::array<bool, N> keep{};
    keep.fill(true);
    if constexpr (states_kept_operands<Op, N>) {
      if (!keep_values) {
        const std::array<bool, N> rg = std::apply([](const auto&... x) { return std::array<bool, N>{x.requires_grad()...}; }, args);
        keep = Op::keep_operands(rg);
      }
    }
    return stripped(keep, std::index_sequence_for<A...>{});
  }
  // for_backward's operand-wise rebuild (keep[I] says whether operand I keeps its values).
  template <std::size_t... I>
  Expr stripped(const std::array<bool, sizeof...(A)>& keep, std::index_sequence<I...>) const {
    return Expr(std::get<I>(args).for_backward(keep[I])...);
  }
  template <std::size_t R>
  auto kernel(const std::array<index_t, R>& out) const {
    return std::apply(
        [&](const auto&... x) { return OpKernel<Op, decltype(x.kernel(out))...>{make_ktuple(x.kernel(out)...), true}; }, args);
  }
  template <std::size_t R, class D>
  auto backward_kernel(const std::array<index_t, R>& out, bool needed, BackwardPlan<value_type, D>& plan) const {
    const bool live = needed && Op::differentiable && requires_grad();
    auto k = std::apply(
        [&](const auto&... x) {
          return OpKernel<Op, decltype(x.backward_kernel(out, live, plan))...>{
              make_ktuple(x.backward_kernel(out, live, plan)...), live};
        },
        args);
    k.active = live;
    return k;
  }

 private:
  std::array<index_t, rank> compute_extents() const {
    std::array<index_t, rank> e{};
    e.fill(1);
    std::apply([&](const auto&... x) { ((e = broadcast_runtime<rank>(e, x.extents(), Op::name)), ...); }, args);
    return e;
  }
};

// ---- operand conversion ---------------------------------------------------------------------------
template <class X>
struct is_expr_operand : std::bool_constant<TensorType<X> || LazyExpression<X>> {};

template <class X>
concept Operand = is_expr_operand<std::remove_cvref_t<X>>::value;

/// Element type of an operand (the tensor's or the expression's).
template <class X>
using operand_value_t = typename std::remove_cvref_t<X>::value_type;

template <class T, class X>
auto to_operand(const X& x) {
  if constexpr (TensorType<X>) {
    return TensorLeaf<typename X::value_type, typename X::shape_type, typename X::device_type>{x};
  } else if constexpr (LazyExpression<X>) {
    return x;
  } else {
    static_assert(std::is_arithmetic_v<X>, "ttmoe: expression operands are tensors, expressions or numbers");
    return ScalarLeaf<T>{static_cast<T>(x)};
  }
}

template <class... X>
struct first_value_type;
template <class X, class... Rest>
struct first_value_type<X, Rest...> {
  using type = typename first_value_type<Rest...>::type;
};
template <class X, class... Rest>
  requires Operand<X>
struct first_value_type<X, Rest...> {
  using type = operand_value_t<X>;
};

/// Builds Expr<Op, ...> from tensors, expressions and numbers (numbers take the tensors' type).
template <class Op, class... X>
auto make_expr(const X&... x) {
  using T = typename first_value_type<X...>::type;
  return Expr<Op, decltype(to_operand<T>(x))...>(to_operand<T>(x)...);
}

}  // namespace expr

// ---- materialisation ----------------------------------------------------------------------------
/// Evaluates an expression into a new tensor of shape type S (default: the expression's own), in
/// one fused loop; records one tape node when the expression needs a gradient.
template <ShapeType S, LazyExpression E>
Tensor<typename E::value_type, S, typename E::device_type> materialize(const E& e) {
  using T = typename E::value_type;
  using D = typename E::device_type;
  static_assert(!std::is_void_v<D>, "ttmoe: an expression of numbers alone has no device");
  static_assert(S::rank == E::rank, "ttmoe: the destination tensor's rank differs from the expression's");
  constexpr std::size_t R = E::rank;
  const auto ext = e.extents();
  Tensor<T, S, D> out(S::from_extents(ext, "assign expression"));
  Backend<D>::evaluate(e.kernel(ext), out.data(), ext);
  if (autograd::is_recording() && e.requires_grad()) {
    autograd::active_recorder()->push("fused_elementwise", out.make_output_meta(), [e = e.for_backward(false), ext](const T* g) {
      expr::BackwardPlan<T, D> plan;
      auto k = e.template backward_kernel<R, D>(ext, true, plan);
      expr::settle_fresh_sinks(k, plan.fresh_sinks);
      Backend<D>::evaluate_backward(k, g, ext);
      for (auto& f : plan.finish) f();
    });
  }
  return out;
}

/// Evaluates an expression into a tensor of its own shape type.
template <LazyExpression E>
auto eval(const E& e) {
  return materialize<typename E::shape_type>(e);
}
/// A tensor is already evaluated.
template <TensorType X>
const X& eval(const X& x) {
  return x;
}

/// Writes an expression into an existing tensor of the same extents (no allocation, not recorded:
/// for optimiser updates and other in-place work under NoGrad).
template <class T, ShapeType S, class D, LazyExpression E>
void assign(const Tensor<T, S, D>& dst, const E& e) {
  const auto ext = e.extents();
  if (ext != dst.extents())
    throw ShapeError("assign: destination shape " + dst.shape().to_string() + " differs from expression shape " +
                     extents_to_string(ext));
  Backend<D>::evaluate(e.kernel(ext), dst.data(), ext);
}

// ---- the op vocabulary ----------------------------------------------------------------------------
#define TTMOE_UNARY_FN(fn, OP)                                      \
  template <expr::Operand X>                                        \
  auto fn(const X& x) {                                             \
    return expr::make_expr<op::OP>(x);                              \
  }
/// Elementwise e^x.
TTMOE_UNARY_FN(exp, exp)
/// Elementwise natural log.
TTMOE_UNARY_FN(log, log)
/// Elementwise tanh.
TTMOE_UNARY_FN(tanh, tanh)
/// Elementwise erf.
TTMOE_UNARY_FN(erf, erf)
/// Elementwise square root.
TTMOE_UNARY_FN(sqrt, sqrt)
/// Elementwise 1/sqrt.
TTMOE_UNARY_FN(rsqrt, rsqrt)
/// Elementwise |x|.
TTMOE_UNARY_FN(abs, abs)
/// Elementwise x^2.
TTMOE_UNARY_FN(square, square)
/// Elementwise logistic sigmoid.
TTMOE_UNARY_FN(sigmoid, sigmoid)
/// Elementwise max(x, 0).
TTMOE_UNARY_FN(relu, relu)
/// Exact (erf) GELU.
TTMOE_UNARY_FN(gelu, gelu)
/// Tanh-approximate GELU.
TTMOE_UNARY_FN(gelu_tanh, gelu_tanh)
/// SiLU (swish).
TTMOE_UNARY_FN(silu, silu)
#undef TTMOE_UNARY_FN

template <expr::Operand X>
auto operator-(const X& x) {
  return expr::make_expr<op::neg>(x);
}

#define TTMOE_BINARY_OPERATOR(sym, OP)                                       \
  template <class X, class Y>                                                \
    requires(expr::Operand<X> || expr::Operand<Y>)                           \
  auto operator sym(const X& x, const Y& y) {                                \
    return expr::make_expr<op::OP>(x, y);                                    \
  }
TTMOE_BINARY_OPERATOR(+, add)
TTMOE_BINARY_OPERATOR(-, sub)
TTMOE_BINARY_OPERATOR(*, mul)
TTMOE_BINARY_OPERATOR(/, div)
TTMOE_BINARY_OPERATOR(>, greater)
TTMOE_BINARY_OPERATOR(>=, greater_equal)
TTMOE_BINARY_OPERATOR(<, less)
TTMOE_BINARY_OPERATOR(<=, less_equal)
#undef TTMOE_BINARY_OPERATOR

#define TTMOE_BINARY_FN(fn, OP)                                              \
  template <class X, class Y>                                                \
    requires(expr::Operand<X> || expr::Operand<Y>)                           \
  auto fn(const X& x, const Y& y) {                                          \
    return expr::make_expr<op::OP>(x, y);                                    \
  }
/// Elementwise x^y.
TTMOE_BINARY_FN(pow, pow)
/// Elementwise maximum.
TTMOE_BINARY_FN(maximum, maximum)
/// Elementwise minimum.
TTMOE_BINARY_FN(minimum, minimum)
/// 1 where x == y, else 0.
TTMOE_BINARY_FN(equal, equal)
#undef TTMOE_BINARY_FN

/// mask != 0 ? a : b, elementwise.
template <class M, class X, class Y>
  requires(expr::Operand<M> || expr::Operand<X> || expr::Operand<Y>)
auto where(const M& mask, const X& a, const Y& b) {
  return expr::make_expr<op::where>(mask, a, b);
}
/// a * b + c, elementwise.
template <class X, class Y, class Z>
  requires(expr::Operand<X> || expr::Operand<Y> || expr::Operand<Z>)
auto muladd(const X& a, const Y& b, const Z& c) {
  return expr::make_expr<op::muladd>(a, b, c);
}

}  // namespace ttmoe
