#pragma once
// Elementwise op functors. Each states its forward `apply` and, right beside it, its vector-Jacobian
// product `vjp`, which receives the operands, the forward result and the upstream gradient g and writes
// one gradient per operand. Both are templates over the value type V (float, double or an xsimd batch),
// so the same body runs in the scalar loop, the SIMD loop and on the GPU. An op that is not
// differentiable says so (`differentiable = false`): its result never carries a gradient.
//
// What the backward keeps alive: by default a fused node saves every tensor operand. An op whose VJP
// does not read operand values says so with `keep_operands(requires_grad)` (which operands' values the
// VJP reads, given which operands need a gradient), so `x + bias` or a residual add saves nothing and
// `x * w` keeps x only if w needs a gradient.
//
// Adding an op: write the functor here and a gradcheck case in tests/gradcheck; the coverage test
// fails until the case exists.

#include <array>

#include "ttmoe/expr/vmath.hpp"

namespace ttmoe::op {

// ---- unary ---------------------------------------------------------------------------------
/// -a
struct neg {
  static constexpr const char* name = "neg";
  static constexpr bool differentiable = true;
  static constexpr std::array<bool, 1> keep_operands(std::array<bool, 1>) { return {false}; }
  template <class V> TTMOE_HD static V apply(V a) { return -a; }
  template <class V> TTMOE_HD static void vjp(V, V, V g, V& ga) { ga = -g; }
};
/// e^a
struct exp {
  static constexpr const char* name = "exp";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::exp(a); }
  template <class V> TTMOE_HD static void vjp(V, V out, V g, V& ga) { ga = g * out; }
};
/// natural log
struct log {
  static constexpr const char* name = "log";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::log(a); }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) { ga = g / a; }
};
/// hyperbolic tangent
struct tanh {
  static constexpr const char* name = "tanh";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::tanh(a); }
  template <class V> TTMOE_HD static void vjp(V, V out, V g, V& ga) { ga = g * (V(1) - out * out); }
};
/// Gauss error function
struct erf {
  static constexpr const char* name = "erf";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::erf(a); }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) {
    ga = g * V(1.1283791670955126) * vm::exp(-(a * a));  // 2/sqrt(pi) e^{-a^2}
  }
};
/// square root
struct sqrt {
  static constexpr const char* name = "sqrt";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::sqrt(a); }
  template <class V> TTMOE_HD static void vjp(V, V out, V g, V& ga) { ga = g * V(0.5) / out; }
};
/// 1 / sqrt(a)
struct rsqrt {
  static constexpr const char* name = "rsqrt";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return V(1) / vm::sqrt(a); }
  template <class V> TTMOE_HD static void vjp(V a, V out, V g, V& ga) { ga = g * V(-0.5) * out / a; }
};
/// |a| (kink at 0: gradient 0 there, like PyTorch)
struct abs {
  static constexpr const char* name = "abs";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::abs(a); }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) {
    ga = g * (vm::gt(a, V(0)) - vm::gt(V(0), a));
  }
};
/// a^2
struct square {
  static constexpr const char* name = "square";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return a * a; }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) { ga = V(2) * g * a; }
};
/// 1 / (1 + e^{-a})
struct sigmoid {
  static constexpr const char* name = "sigmoid";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return V(1) / (V(1) + vm::exp(-a)); }
  template <class V> TTMOE_HD static void vjp(V, V out, V g, V& ga) { ga = g * out * (V(1) - out); }
};
/// max(a, 0) (kink at 0: gradient 0 there)
struct relu {
  static constexpr const char* name = "relu";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return vm::max(a, V(0)); }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) { ga = g * vm::gt(a, V(0)); }
};
/// Exact GELU: a * Phi(a) = a/2 (1 + erf(a / sqrt 2)).
struct gelu {
  static constexpr const char* name = "gelu";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return V(0.5) * a * (V(1) + vm::erf(a * V(0.7071067811865476))); }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) {
    const V cdf = V(0.5) * (V(1) + vm::erf(a * V(0.7071067811865476)));
    const V pdf = V(0.3989422804014327) * vm::exp(V(-0.5) * a * a);
    ga = g * (cdf + a * pdf);
  }
};
/// Tanh-approximate GELU: a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))).
struct gelu_tanh {
  static constexpr const char* name = "gelu_tanh";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) {
    return V(0.5) * a * (V(1) + vm::tanh(V(0.7978845608028654) * (a + V(0.044715) * a * a * a)));
  }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) {
    const V t = vm::tanh(V(0.7978845608028654) * (a + V(0.044715) * a * a * a));
    const V dinner = V(0.7978845608028654) * (V(1) + V(3 * 0.044715) * a * a);
    ga = g * (V(0.5) * (V(1) + t) + V(0.5) * a * (V(1) - t * t) * dinner);
  }
};
/// SiLU / swish: a * sigmoid(a).
struct silu {
  static constexpr const char* name = "silu";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a) { return a / (V(1) + vm::exp(-a)); }
  template <class V> TTMOE_HD static void vjp(V a, V, V g, V& ga) {
    const V s = V(1) / (V(1) + vm::exp(-a));
    ga = g * s * (V(1) + a * (V(1) - s));
  }
};

// ---- binary --------------------------------------------------------------------------------
/// a + b
struct add {
  static constexpr const char* name = "add";
  static constexpr bool differentiable = true;
  static constexpr std::array<bool, 2> keep_operands(std::array<bool, 2>) { return {false, false}; }
  template <class V> TTMOE_HD static V apply(V a, V b) { return a + b; }
  template <class V> TTMOE_HD static void vjp(V, V, V, V g, V& ga, V& gb) { ga = g; gb = g; }
};
/// a - b
struct sub {
  static constexpr const char* name = "sub";
  static constexpr bool differentiable = true;
  static constexpr std::array<bool, 2> keep_operands(std::array<bool, 2>) { return {false, false}; }
  template <class V> TTMOE_HD static V apply(V a, V b) { return a - b; }
  template <class V> TTMOE_HD static void vjp(V, V, V, V g, V& ga, V& gb) { ga = g; gb = -g; }
};
/// a * b
struct mul {
  static constexpr const char* name = "mul";
  static constexpr bool differentiable = true;
  static constexpr std::array<bool, 2> keep_operands(std::array<bool, 2> rg) { return {rg[1], rg[0]}; }
  template <class V> TTMOE_HD static V apply(V a, V b) { return a * b; }
  template <class V> TTMOE_HD static void vjp(V a, V b, V, V g, V& ga, V& gb) { ga = g * b; gb = g * a; }
};
/// a / b
struct div {
  static constexpr const char* name = "div";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a, V b) { return a / b; }
  template <class V> TTMOE_HD static void vjp(V, V b, V out, V g, V& ga, V& gb) {
    ga = g / b;
    gb = -g * out / b;
  }
};
/// a^b (for a > 0 when b needs a gradient)
struct pow {
  static constexpr const char* name = "pow";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a, V b) { return vm::pow(a, b); }
  template <class V> TTMOE_HD static void vjp(V a, V b, V out, V g, V& ga, V& gb) {
    ga = g * b * vm::pow(a, b - V(1));
    gb = g * out * vm::log(a);
  }
};
/// Elementwise maximum (ties send the gradient to a, as in the subgradient torch uses for max).
struct maximum {
  static constexpr const char* name = "maximum";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a, V b) { return vm::max(a, b); }
  template <class V> TTMOE_HD static void vjp(V a, V b, V, V g, V& ga, V& gb) {
    const V m = vm::ge(a, b);
    ga = g * m;
    gb = g * (V(1) - m);
  }
};
/// Elementwise minimum (ties send the gradient to a).
struct minimum {
  static constexpr const char* name = "minimum";
  static constexpr bool differentiable = true;
  template <class V> TTMOE_HD static V apply(V a, V b) { return vm::min(a, b); }
  template <class V> TTMOE_HD static void vjp(V a, V b, V, V g, V& ga, V& gb) {
    const V m = vm::ge(b, a);
    ga = g * m;
    gb = g * (V(1) - m);
  }
};

#define TTMOE_COMPARISON(NAME, EXPR)                                                   \
  struct NAME {                                                                        \
    static constexpr const char* name = #NAME;                                         \
    static constexpr bool differentiable = false;                                      \
    template <class V> TTMOE_HD static V apply(V a, V b) { return EXPR; }              \
    template <class V> TTMOE_HD static void vjp(V, V, V, V, V& ga, V& gb) {            \
      ga = V(0);                                                                       \
      gb = V(0);                                                                       \
    }                                                                                  \
  };
/// 1 where a > b, else 0 (no gradient).
TTMOE_COMPARISON(greater, vm::gt(a, b))
/// 1 where a >= b, else 0 (no gradient).
TTMOE_COMPARISON(greater_equal, vm::ge(a, b))
/// 1 where a < b, else 0 (no gradient).
TTMOE_COMPARISON(less, vm::gt(b, a))
/// 1 where a <= b, else 0 (no gradient).
TTMOE_COMPARISON(less_equal, vm::ge(b, a))
/// 1 where a == b, else 0 (no gradient).
TTMOE_COMPARISON(equal, vm::eq(a, b))
#undef TTMOE_COMPARISON

// ---- ternary -------------------------------------------------------------------------------
/// where(mask, a, b): a where mask != 0, else b. The mask gets no gradient.
struct where {
  static constexpr const char* name = "where";
  static constexpr bool differentiable = true;
  static constexpr std::array<bool, 3> keep_operands(std::array<bool, 3>) { return {true, false, false}; }
  template <class V> TTMOE_HD static V apply(V m, V a, V b) { return vm::select(m, a, b); }
  template <class V> TTMOE_HD static void vjp(V m, V, V, V, V g, V& gm, V& ga, V& gb) {
    gm = V(0);
    ga = vm::select(m, g, V(0));
    gb = vm::select(m, V(0), g);
  }
};
/// fma(a, b, c) = a * b + c, one rounding fewer in spirit; a common fused pattern (x * w + b).
struct muladd {
  static constexpr const char* name = "muladd";
  static constexpr bool differentiable = true;
  static constexpr std::array<bool, 3> keep_operands(std::array<bool, 3> rg) { return {rg[1], rg[0], false}; }
  template <class V> TTMOE_HD static V apply(V a, V b, V c) { return a * b + c; }
  template <class V> TTMOE_HD static void vjp(V a, V b, V, V, V g, V& ga, V& gb, V& gc) {
    ga = g * b;
    gb = g * a;
    gc = g;
  }
};

}  // namespace ttmoe::op
