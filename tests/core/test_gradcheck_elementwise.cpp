// Gradient checks of every differentiable elementwise functor (expr/ops.hpp) and of fused
// multi-op expressions, at random shapes with broadcasting. See tests/support/gradcheck.hpp.

#include <gradcheck.hpp>

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {

// Unary op f at three shapes: rank 1 (odd lengths: SIMD body + scalar tail), a partly static rank-3
// shape, and an expression operand (the functor fused under a scale).
template <class F>
Case unary(const char* functor, F f) {
  return Case()
      .covers(functor)
      .variant("rank1", [](Rng& r) { return Shapes{{r.ext(1, 19)}}; },
               [f](const Inputs& in) -> Output { return f(in.get<1>(0)); })
      .variant("rank3 Shape<2,?,3>", [](Rng& r) { return Shapes{{2, r.ext(1, 4), 3}}; },
               [f](const Inputs& in) -> Output { return f(in.get_as<Shape<2, dyn, 3>>(0)); })
      .variant("expression operand", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 6)}}; },
               [f](const Inputs& in) -> Output { return f(in.get<2>(0) * 0.75); });
}

// Binary op f: same shapes, row broadcast, two-sided broadcast with rank mismatch, a [1]-shaped
// first operand, and a number on either side.
template <class F>
Case binary(const char* functor, F f, bool number_left = true) {
  Case c = Case()
               .covers(functor)
               .variant("same [?,?]", [](Rng& r) { auto a = r.ext(1, 4), b = r.ext(1, 11); return Shapes{{a, b}, {a, b}}; },
                        [f](const Inputs& in) -> Output { return f(in.get<2>(0), in.get<2>(1)); })
               .variant("row broadcast [?,?] . [?]", [](Rng& r) { auto a = r.ext(2, 4), b = r.ext(1, 11); return Shapes{{a, b}, {b}}; },
                        [f](const Inputs& in) -> Output { return f(in.get<2>(0), in.get<1>(1)); })
               .variant("two-sided [?,1,?] . [?,1]", [](Rng& r) { auto a = r.ext(1, 3), b = r.ext(2, 3), c = r.ext(2, 5); return Shapes{{a, 1, c}, {b, 1}}; },
                        [f](const Inputs& in) -> Output { return f(in.get<3>(0), in.get<2>(1)); })
               .variant("column broadcast [?,1] . [?,?] (static [1] dims)", [](Rng& r) { auto a = r.ext(2, 4), b = r.ext(2, 9); return Shapes{{a, 1}, {a, b}}; },
                        [f](const Inputs& in) -> Output { return f(in.get_as<Shape<dyn, 1>>(0), in.get<2>(1)); })
               .variant("number right", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 9)}}; },
                        [f](const Inputs& in) -> Output { return f(in.get<2>(0), 0.7); });
  if (number_left)
    c.variant("number left", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 9)}}; },
              [f](const Inputs& in) -> Output { return f(1.3, in.get<2>(0)); });
  return c;
}

}  // namespace

// ---- unary ---------------------------------------------------------------------------------------
GRADCHECK_CASE("neg") { return unary("neg", [](const auto& x) { return -x; }); }
GRADCHECK_CASE("exp") { return unary("exp", [](const auto& x) { return exp(x); }); }
GRADCHECK_CASE("log") { return unary("log", [](const auto& x) { return log(x); }).range(0.3, 3); }
GRADCHECK_CASE("tanh") { return unary("tanh", [](const auto& x) { return tanh(x); }); }
GRADCHECK_CASE("erf") { return unary("erf", [](const auto& x) { return erf(x); }); }
GRADCHECK_CASE("sqrt") { return unary("sqrt", [](const auto& x) { return sqrt(x); }).range(0.3, 3); }
GRADCHECK_CASE("rsqrt") { return unary("rsqrt", [](const auto& x) { return rsqrt(x); }).range(0.3, 3); }
GRADCHECK_CASE("abs") { return unary("abs", [](const auto& x) { return abs(x); }).kink(kink_at(0, 0.0)); }
GRADCHECK_CASE("square") { return unary("square", [](const auto& x) { return square(x); }); }
GRADCHECK_CASE("sigmoid") { return unary("sigmoid", [](const auto& x) { return sigmoid(x); }).range(-4, 4); }
GRADCHECK_CASE("relu") { return unary("relu", [](const auto& x) { return relu(x); }).kink(kink_at(0, 0.0)); }
GRADCHECK_CASE("gelu") { return unary("gelu", [](const auto& x) { return gelu(x); }).range(-4, 4); }
GRADCHECK_CASE("gelu_tanh") { return unary("gelu_tanh", [](const auto& x) { return gelu_tanh(x); }).range(-4, 4); }
GRADCHECK_CASE("silu") { return unary("silu", [](const auto& x) { return silu(x); }).range(-4, 4); }

// ---- binary --------------------------------------------------------------------------------------
GRADCHECK_CASE("add") { return binary("add", [](const auto& a, const auto& b) { return a + b; }); }
GRADCHECK_CASE("sub") { return binary("sub", [](const auto& a, const auto& b) { return a - b; }); }
GRADCHECK_CASE("mul") { return binary("mul", [](const auto& a, const auto& b) { return a * b; }); }
GRADCHECK_CASE("div") {
  // Divisors stay in [0.5, 2) (input 1); a number numerator gets its own case below.
  return binary("div", [](const auto& a, const auto& b) { return a / b; }, /*number_left=*/false).range_of(1, 0.5, 2);
}
GRADCHECK_CASE("div number numerator") {
  return Case()
      .covers("div")
      .range(0.5, 2)
      .variant("number / [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output { return -1.3 / in.get<2>(0); })
      .variant("negative divisor [?] / -[?,?]", [](Rng& r) { auto b = r.ext(1, 9); return Shapes{{b}, {r.ext(1, 3), b}}; },
               [](const Inputs& in) -> Output { return in.get<1>(0) / -in.get<2>(1); });
}
GRADCHECK_CASE("pow") {
  // Base (input 0) positive, exponent in [-2, 2): both get gradients.
  return binary("pow", [](const auto& a, const auto& b) { return pow(a, b); }).range_of(0, 0.4, 2.5);
}
GRADCHECK_CASE("pow integer exponent, negative base") {
  return Case()
      .covers("pow")
      .range(-2, 2)
      .variant("pow(x, 3)", [](Rng& r) { return Shapes{{r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return pow(in.get<1>(0), 3.0); })
      .variant("pow(x, 2)", [](Rng& r) { return Shapes{{r.ext(2, 3), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output { return pow(in.get<2>(0), 2.0); });
}
GRADCHECK_CASE("maximum") {
  return binary("maximum", [](const auto& a, const auto& b) { return maximum(a, b); })
      .kink(ties_between({0, 1}))
      .kink(kink_at(0, 0.7))   // number right
      .kink(kink_at(0, 1.3));  // number left
}
GRADCHECK_CASE("minimum") {
  return binary("minimum", [](const auto& a, const auto& b) { return minimum(a, b); })
      .kink(ties_between({0, 1}))
      .kink(kink_at(0, 0.7))
      .kink(kink_at(0, 1.3));
}

// ---- ternary -------------------------------------------------------------------------------------
GRADCHECK_CASE("where") {
  // Input 0 is the 0/1 mask (no gradient); a and b broadcast against it and each other.
  return Case()
      .covers("where")
      .mask_input(0)
      .variant("same [?,?]", [](Rng& r) { auto a = r.ext(1, 4), b = r.ext(1, 11); return Shapes{{a, b}, {a, b}, {a, b}}; },
               [](const Inputs& in) -> Output { return where(in.get<2>(0), in.get<2>(1), in.get<2>(2)); })
      .variant("mask [?,1], a [?,?], b [?]", [](Rng& r) { auto a = r.ext(2, 4), b = r.ext(2, 9); return Shapes{{a, 1}, {a, b}, {b}}; },
               [](const Inputs& in) -> Output { return where(in.get<2>(0), in.get<2>(1), in.get<1>(2)); })
      .variant("mask [?], a [?,1,?], number", [](Rng& r) { auto c = r.ext(2, 7); return Shapes{{c}, {r.ext(1, 3), 1, c}}; },
               [](const Inputs& in) -> Output { return where(in.get<1>(0), in.get<3>(1), -0.5); })
      .variant("mask expression (a > b)", [](Rng& r) { auto a = r.ext(1, 4), b = r.ext(1, 9); return Shapes{{a, b}, {a, b}, {a, b}}; },
               [](const Inputs& in) -> Output {
                 auto a = in.get<2>(1), b = in.get<2>(2);
                 return where(a > b, a * b, b - in.get<2>(0));
               })
      .kink(ties_between({1, 2}));  // the (a > b) variant switches branch at a == b
}
GRADCHECK_CASE("muladd") {
  return Case()
      .covers("muladd")
      .variant("same [?,?]", [](Rng& r) { auto a = r.ext(1, 4), b = r.ext(1, 11); return Shapes{{a, b}, {a, b}, {a, b}}; },
               [](const Inputs& in) -> Output { return muladd(in.get<2>(0), in.get<2>(1), in.get<2>(2)); })
      .variant("x [?,?], w [?], bias [?]", [](Rng& r) { auto a = r.ext(2, 4), b = r.ext(1, 11); return Shapes{{a, b}, {b}, {b}}; },
               [](const Inputs& in) -> Output { return muladd(in.get<2>(0), in.get<1>(1), in.get<1>(2)); })
      .variant("x [?,1,?], y [?,1], z [?]", [](Rng& r) { auto a = r.ext(1, 3), b = r.ext(2, 3), c = r.ext(2, 5); return Shapes{{a, 1, c}, {b, 1}, {c}}; },
               [](const Inputs& in) -> Output { return muladd(in.get<3>(0), in.get<2>(1), in.get<1>(2)); })
      .variant("numbers muladd(x, 2, bias)", [](Rng& r) { auto b = r.ext(1, 11); return Shapes{{r.ext(1, 3), b}, {b}}; },
               [](const Inputs& in) -> Output { return muladd(in.get<2>(0), 2.0, in.get<1>(1)); });
}

// ---- fused multi-op expressions (recorded as ONE fused_elementwise node) ---------------------------
GRADCHECK_CASE("fused gelu(a*x+b)*y") {
  return Case()
      .variant("a,x,y [?,?], b [?] broadcast", [](Rng& r) { auto n = r.ext(1, 4), d = r.ext(1, 11); return Shapes{{n, d}, {n, d}, {d}, {n, d}}; },
               [](const Inputs& in) -> Output {
                 return gelu(in.get<2>(0) * in.get<2>(1) + in.get<1>(2)) * in.get<2>(3);
               })
      .variant("static x Shape<?,5>, b [5], y [?,1]", [](Rng& r) { auto n = r.ext(1, 4); return Shapes{{n, 5}, {n, 5}, {5}, {n, 1}}; },
               [](const Inputs& in) -> Output {
                 return gelu(in.get<2>(0) * in.get_as<Shape<dyn, 5>>(1) + in.get_as<Shape<5>>(2)) * in.get<2>(3);
               });
}
GRADCHECK_CASE("fused repeated operand") {
  // The same leaf reaches the VJP through several paths: x*x, x*x + x, y broadcast twice.
  return Case()
      .variant("x*x", [](Rng& r) { return Shapes{{r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<1>(0); return x * x; })
      .variant("x*x*y + y*y - x (y broadcast [?])", [](Rng& r) { auto b = r.ext(1, 9); return Shapes{{r.ext(1, 4), b}, {b}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 auto y = in.get<1>(1);
                 return x * x * y + y * y - x;
               })
      .variant("tanh(x) * sigmoid(x) + square(x) / (1 + x*x)", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 return tanh(x) * sigmoid(x) + square(x) / (1.0 + x * x);
               });
}
GRADCHECK_CASE("fused deep expression") {
  return Case()
      .range_of(3, 0.5, 2)
      .variant("exp(-square(x)) / (1 + sigmoid(y)) * tanh(z) + sqrt(w) - silu(x*z)",
               [](Rng& r) { auto a = r.ext(1, 3), b = r.ext(1, 7); return Shapes{{a, b}, {b}, {a, 1}, {a, b}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 auto y = in.get<1>(1);
                 auto z = in.get<2>(2);
                 auto w = in.get<2>(3);
                 return exp(-square(x)) / (1.0 + sigmoid(y)) * tanh(z) + sqrt(w) - silu(x * z);
               })
      .variant("auto-held sub-expressions combined later",
               [](Rng& r) { auto b = r.ext(1, 9); return Shapes{{r.ext(1, 3), b}, {b}, {b}, {b}}; },
               [](const Inputs& in) -> Output {
                 auto h = muladd(in.get<2>(0), in.get<1>(1), in.get<1>(2));  // lazy, kept in auto
                 auto g = gelu_tanh(h) - erf(h * 0.5);
                 return pow(in.get<1>(3), 1.5) * g + maximum(g, h * 0.0 - 5.0);  // maximum far from its kink
               });
}
GRADCHECK_CASE("fused comparisons as masks") {
  // Leaky relu written with non-differentiable comparisons: the masks carry no gradient.
  return Case()
      .kink(kink_at(0, 0.0))
      .variant("(x > 0) * x + (x <= 0) * 0.1 * x", [](Rng& r) { return Shapes{{r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<1>(0);
                 return (x > 0.0) * x + (x <= 0.0) * 0.1 * x;
               })
      .variant("(x >= 0) * y + (x < 0) * abs(x) * y + equal(x, x) * x", [](Rng& r) { auto b = r.ext(1, 9); return Shapes{{r.ext(1, 3), b}, {b}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 auto y = in.get<1>(1);
                 return (x >= 0.0) * y + (x < 0.0) * abs(x) * y + equal(x, x) * x;
               });
}
