// Shapes (static/dynamic extents, storage cost, broadcast result types and runtime errors), tensor
// basics and views, lazy elementwise expressions (every functor in float and double against plain
// loops, broadcasting patterns, > 1M elements across threads, NaN propagation, lifetime, assign) and
// printing through fmt.

#include "core_test_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <numeric>
#include <thread>
#include <type_traits>

using namespace ttmoe;
using namespace core_test;

// ---- shapes ------------------------------------------------------------------------------------------
// Static extents live in the type: only dynamic ones take storage.
static_assert(sizeof(Shape<dyn, 197, 768>) == sizeof(index_t));
static_assert(sizeof(Shape<2, 3>) == 1);  // an empty class (its storage array has no elements)
static_assert(sizeof(Shape<dyn, dyn, 4>) == 2 * sizeof(index_t));
static_assert(sizeof(DynShape<3>) == 3 * sizeof(index_t));
static_assert(sizeof(Tensor<float, Shape<2, 3>>) < sizeof(Tensor<float, DynShape<2>>));
static_assert(Shape<2, 3>::fully_static && !Shape<dyn, 3>::fully_static);
static_assert(Shape<dyn, 197, 768>::rank == 3 && Shape<dyn, 197, 768>::rank_dynamic == 1);
static_assert(Shape<2, 3>{}.numel() == 6);  // static shapes are usable in constant expressions
static_assert(Shape<dyn, 197, 768>(8).extent<1>() == 197);
static_assert(std::is_same_v<DynShape<3>, Shape<dyn, dyn, dyn>>);
static_assert(std::is_same_v<DynShape<0>, Shape<>>);
static_assert(std::is_same_v<shape_set_t<Shape<2, 3, 4>, 1, dyn>, Shape<2, dyn, 4>>);
static_assert(std::is_same_v<shape_drop_t<Shape<2, 3, 4>, 0>, Shape<3, 4>>);
static_assert(std::is_same_v<shape_swap_t<Shape<2, dyn, 4>, 1, 2>, Shape<2, 4, dyn>>);
static_assert(StaticallyConvertible<Shape<2, 3>, Shape<dyn, 3>>);
static_assert(!StaticallyConvertible<Shape<dyn, 3>, Shape<2, 3>>);
static_assert(!StaticallyConvertible<Shape<2, 3>, Shape<3, dyn>>);

// Broadcast result types (numpy rules on types: static extents propagate, dyn stays dyn unless the
// other side fixes it).
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<2, 3>, Shape<3>>, Shape<2, 3>>);
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<2, 1>, Shape<1, 5>>, Shape<2, 5>>);
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<dyn, 1>, Shape<4>>, Shape<dyn, 4>>);
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<dyn>, Shape<5>>, Shape<5>>);
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<1>, Shape<dyn>>, Shape<dyn>>);
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<dyn, 197, 768>, Shape<768>>, Shape<dyn, 197, 768>>);
static_assert(std::is_same_v<broadcast_shape_t<op::mul, Shape<3, 1, 5>, Shape<4, 1>>, Shape<3, 4, 5>>);
static_assert(std::is_same_v<broadcast_shape_t<op::add, Shape<>, Shape<2, 3>>, Shape<2, 3>>);
static_assert(std::is_same_v<broadcast_shape_t<op::where, Shape<3>, Shape<2, 1>, Shape<dyn, 2, 3>>, Shape<dyn, 2, 3>>);
// ... and the types expressions, matmul and reductions produce.
static_assert(std::is_same_v<decltype(std::declval<Tensor<float, Shape<dyn, 197, 768>>>() + std::declval<Tensor<float, Shape<768>>>())::shape_type,
                             Shape<dyn, 197, 768>>);
static_assert(std::is_same_v<decltype(std::declval<Tensor<float, Shape<4, 1>>>() * 2.0f)::shape_type, Shape<4, 1>>);
static_assert(std::is_same_v<decltype(matmul(std::declval<Tensor<float, Shape<dyn, 197, 768>>>(),
                                             std::declval<Tensor<float, Shape<768, 3072>>>())),
                             Tensor<float, Shape<dyn, 197, 3072>>>);
static_assert(std::is_same_v<decltype(matmul<false, true>(std::declval<Tensor<float, Shape<dyn, 197, 768>>>(),
                                                          std::declval<Tensor<float, Shape<3072, 768>>>())),
                             Tensor<float, Shape<dyn, 197, 3072>>>);
static_assert(std::is_same_v<decltype(matmul<true, false>(std::declval<Tensor<float, Shape<5, 3>>>(),
                                                          std::declval<Tensor<float, Shape<5, dyn>>>())),
                             Tensor<float, Shape<3, dyn>>>);
static_assert(std::is_same_v<decltype(sum<1>(std::declval<Tensor<float, Shape<dyn, 197, 768>>>())),
                             Tensor<float, Shape<dyn, 768>>>);
static_assert(std::is_same_v<decltype(sum<-1, true>(std::declval<Tensor<float, Shape<dyn, 197, 768>>>())),
                             Tensor<float, Shape<dyn, 197, 1>>>);
static_assert(std::is_same_v<decltype(sum_all(std::declval<Tensor<float, Shape<2, 3>>>())), Tensor<float, Shape<>>>);
static_assert(std::is_same_v<decltype(argmax<0>(std::declval<Tensor<float, Shape<2, 3>>>())),
                             Tensor<std::int64_t, Shape<3>>>);
static_assert(std::is_same_v<decltype(permute<2, 0, 1>(std::declval<Tensor<float, Shape<2, dyn, 4>>>())),
                             Tensor<float, Shape<4, 2, dyn>>>);
static_assert(std::is_same_v<decltype(std::declval<Tensor<float, Shape<4, 3>>>().slice(0, 1)), Tensor<float, Shape<dyn, 3>>>);

TEST_CASE("Shape: static and dynamic extents", "[core][shape]") {
  const Shape<dyn, 197, 768> s(8);
  CHECK(s.extent(0) == 8);
  CHECK(s.extent(1) == 197);
  CHECK(s.extent(2) == 768);
  CHECK(s.extents() == std::array<index_t, 3>{8, 197, 768});
  CHECK(s.numel() == 8u * 197u * 768u);
  CHECK(s.strides() == std::array<index_t, 3>{197u * 768u, 768, 1});
  CHECK(s.to_string() == "[8, 197, 768]");
  CHECK(Shape<dyn, 197, 768>::type_string() == "[?, 197, 768]");
  const DynShape<2> d(3, 4);
  CHECK(d.extents() == std::array<index_t, 2>{3, 4});
  CHECK(d.numel() == 12);
  CHECK(Shape<>{}.numel() == 1);
  CHECK(Shape<>{}.to_string() == "[]");
  CHECK(DynShape<2>(0, 5).numel() == 0);
  CHECK(Shape<dyn, 3>(2) == Shape<dyn, 3>(2));
  CHECK_FALSE(Shape<dyn, 3>(2) == Shape<dyn, 3>(4));
}

TEST_CASE("Shape::from_extents checks static extents and names the caller", "[core][shape]") {
  using S = Shape<dyn, 197, 768>;
  const auto ok = S::from_extents({4, 197, 768}, "my_op");
  CHECK(ok.extent(0) == 4);
  CHECK_THROWS_AS((S::from_extents({4, 196, 768}, "my_op")), ShapeError);
  CHECK_THROWS_WITH((S::from_extents({4, 196, 768}, "my_op")),
                    Catch::Contains("my_op") && Catch::Contains("[4, 196, 768]") && Catch::Contains("[?, 197, 768]"));
  CHECK_THROWS_AS((Shape<2, 3>::from_extents({3, 2})), ShapeError);
  CHECK_NOTHROW(DynShape<2>::from_extents({7, 9}));
  CHECK(make_shape<Shape<dyn, 5>>({11, 5}).extent(0) == 11);
  CHECK_THROWS_AS((make_shape<Shape<dyn, 5>>({11, 6})), ShapeError);
}

TEST_CASE("Tensor shape conversions: static -> dynamic implicitly, as<> checked at run time", "[core][shape]") {
  auto s = Tensor<float, Shape<2, 3>>::from_host({}, {1, 2, 3, 4, 5, 6});
  Tensor<float, DynShape<2>> d = s;  // implicit widening shares storage
  CHECK(d.data() == s.data());
  CHECK(d.extents() == std::array<index_t, 2>{2, 3});
  Tensor<float, Shape<dyn, 3>> half = s;
  CHECK(half.extent(0) == 2);
  auto back = d.as<Shape<2, 3>>();
  CHECK(back.data() == s.data());
  CHECK_THROWS_AS((d.as<Shape<3, 2>>()), ShapeError);
  CHECK_THROWS_WITH((d.as<Shape<3, 2>>("my_cast")), Catch::Contains("my_cast") && Catch::Contains("[2, 3]"));
}

TEST_CASE("runtime broadcast errors name the op and both shapes", "[core][shape][broadcast]") {
  auto a = make_random<float, 2>({2, 3}, -1, 1, 1);
  auto b = make_random<float, 2>({2, 4}, -1, 1, 2);
  CHECK_THROWS_AS(a + b, ShapeError);
  CHECK_THROWS_WITH(a + b, Catch::Contains("add") && Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_WITH(a * b, Catch::Contains("mul") && Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  CHECK_THROWS_WITH(maximum(a, b), Catch::Contains("maximum") && Catch::Contains("[2, 4]"));
  auto v = make_random<float, 1>({4}, -1, 1, 3);
  CHECK_THROWS_WITH(a - v, Catch::StartsWith("sub") && Catch::Contains("[2, 3]") && Catch::Contains("[4]"));
  // Rank mismatch: the lower-rank operand's shape appears right-aligned to the output rank.
  CHECK_THROWS_WITH(v / a, Catch::Contains("div") && Catch::Contains("[1, 4]") && Catch::Contains("[2, 3]"));
  auto m = make_random<float, 1>({5}, -1, 1, 4);
  CHECK_THROWS_WITH(where(m, a, a), Catch::Contains("where") && Catch::Contains("[1, 5]") && Catch::Contains("[2, 3]"));
  // Static against dynamic: the static side fixes the type, the dynamic side is checked.
  auto st = Tensor<float, Shape<5>>::zeros();
  auto dy = make_random<float, 1>({3}, -1, 1, 5);
  CHECK_THROWS_WITH(st + dy, Catch::Contains("add") && Catch::Contains("[5]") && Catch::Contains("[3]"));
  auto one = make_random<float, 1>({1}, -1, 1, 6);
  CHECK_NOTHROW(eval(st + one));
  // Materialising into a static shape that does not fit the expression's extents.
  auto x = make_random<float, 2>({2, 3}, -1, 1, 7);
  CHECK_THROWS_AS(([&] { Tensor<float, Shape<3, 2>> y = x * 2.0f; return y.numel(); }()), ShapeError);
}

// ---- tensor basics and views ---------------------------------------------------------------------------
TEST_CASE("Tensor factories, element access and errors", "[core][tensor]") {
  auto z = Tensor<double, DynShape<2>>::zeros(DynShape<2>(2, 3));
  for (double v : z.to_vector()) CHECK(v == 0.0);
  auto f = Tensor<float, Shape<4>>::full({}, 2.5f);
  for (float v : f.to_vector()) CHECK(v == 2.5f);
  auto t = Tensor<float, Shape<2, 3>>::from_host({}, {1, 2, 3, 4, 5, 6});
  CHECK(t(0, 0) == 1);
  CHECK(t(1, 2) == 6);
  CHECK(t(1, 0) == 4);
  t(0, 1) = 20;
  CHECK(t.data()[1] == 20);
  CHECK_THROWS_AS(t(2, 0), ValueError);
  CHECK_THROWS_WITH(t(0, 3), Catch::Contains("[0, 3]") && Catch::Contains("[2, 3]"));
  CHECK_THROWS_AS((Tensor<float, Shape<2, 3>>::from_host({}, {1, 2, 3})), ShapeError);
  CHECK_THROWS_WITH((Tensor<float, Shape<2, 3>>::from_host({}, {1, 2, 3})), Catch::Contains("3 values") && Catch::Contains("[2, 3]"));
  CHECK(Tensor<float, Shape<1, 1>>::full({}, 7.f).item() == 7.f);
  CHECK_THROWS_AS(t.item(), ShapeError);
  CHECK_FALSE(Tensor<float, DynShape<1>>().defined());
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % cpu::alignment == 0);
  // Copies are shallow; clone is deep.
  auto alias = t;
  alias(0, 0) = -1;
  CHECK(t(0, 0) == -1);
  auto deep = t.clone();
  deep(0, 0) = 100;
  CHECK(t(0, 0) == -1);
  CHECK(deep.data() != t.data());
  CHECK(deep.to_vector()[5] == 6);
}

TEST_CASE("slice and reshape are views that share storage", "[core][tensor][view]") {
  std::vector<float> v(24);
  std::iota(v.begin(), v.end(), 0.f);
  auto x = make<float, 3>({4, 3, 2}, v);
  auto s = x.slice(1, 3);
  CHECK(s.extents() == std::array<index_t, 3>{2, 3, 2});
  CHECK(s.data() == x.data() + 6);
  CHECK(s(0, 0, 0) == 6);
  CHECK(s(1, 2, 1) == 17);
  s(0, 0, 0) = -5;
  CHECK(x(1, 0, 0) == -5);
  CHECK(x.slice(2, 2).numel() == 0);
  CHECK_THROWS_AS(x.slice(3, 5), ValueError);
  CHECK_THROWS_WITH(x.slice(3, 2), Catch::Contains("slice") && Catch::Contains("[4, 3, 2]"));
  auto r = x.reshape(Shape<6, dyn>(4));
  CHECK(r.data() == x.data());
  CHECK(r(1, 0) == 4);
  CHECK(r(5, 3) == 23);
  auto flat = x.reshape(DynShape<1>(24));
  flat(23) = 99;
  CHECK(x(3, 2, 1) == 99);
  CHECK_THROWS_AS(x.reshape(DynShape<2>(5, 5)), ShapeError);
  CHECK_THROWS_WITH(x.reshape(DynShape<2>(5, 5)), Catch::Contains("reshape") && Catch::Contains("[4, 3, 2]") && Catch::Contains("[5, 5]"));
  // detach shares storage but has no autograd metadata.
  x.set_requires_grad();
  auto dt = x.detach();
  CHECK(dt.data() == x.data());
  CHECK(x.requires_grad());
  CHECK_FALSE(dt.requires_grad());
}

// ---- expressions: every functor against plain loops -----------------------------------------------------
namespace {
template <class T>
constexpr double tol() {
  return std::is_same_v<T, float> ? 2e-6 : 1e-13;
}

// x in [lo, hi): rank-1 of odd length (SIMD body + scalar tail) and a rank-3 shape with a tail per row.
template <class T, class Build, class Ref>
void check_unary(const char* name, Build build, Ref ref, double lo, double hi, double rtol_scale = 1) {
  for (const auto& ext : {std::array<index_t, 3>{1, 1, 1037}, std::array<index_t, 3>{3, 5, 19}}) {
    auto x = make_random<T, 3>(ext, lo, hi, 11);
    const auto xv = x.to_vector();
    Tensor<T, DynShape<3>> y = build(x);
    std::vector<double> r(xv.size());
    for (std::size_t i = 0; i < xv.size(); ++i) r[i] = ref(static_cast<double>(xv[i]));
    INFO("functor " << name << " extents " << extents_to_string(ext));
    CHECK_CLOSE(y.to_vector(), r, rtol_scale * tol<T>(), rtol_scale * tol<T>());
  }
}
template <class T, class Build, class Ref>
void check_binary(const char* name, Build build, Ref ref, double lo0, double hi0, double lo1, double hi1,
                  bool integers = false) {
  const std::array<index_t, 2> e{7, 157};
  auto a = make_random<T, 2>(e, lo0, hi0, 21), b = make_random<T, 2>(e, lo1, hi1, 22);
  if (integers) {  // small integers: comparisons and equal meet exact ties
    for (index_t i = 0; i < a.numel(); ++i) {
      a.data()[i] = std::round(a.data()[i]);
      b.data()[i] = std::round(b.data()[i]);
    }
  }
  const auto av = a.to_vector(), bv = b.to_vector();
  Tensor<T, DynShape<2>> y = build(a, b);
  std::vector<double> r(av.size());
  for (std::size_t i = 0; i < av.size(); ++i) r[i] = ref(double(av[i]), double(bv[i]));
  INFO("functor " << name);
  CHECK_CLOSE(y.to_vector(), r, tol<T>(), tol<T>());
}
}  // namespace

TEST_CASE("float erf (the rational approximation on SIMD lanes) stays within 5e-7 of std::erf", "[core][expr]") {
  // Worst case measured on this grid: 3.3e-7 at -O2 -march=native, 4.2e-7 at -O1 (the sanitizer
  // build), with or without AVX-512: about 3.5 ulp of a value near 1.
  // A dense grid over [-8, 8] (beyond +-4 erf is +-1 in float) plus the special values.
  std::vector<float> xs;
  for (int i = -800000; i <= 800000; ++i) xs.push_back(float(i) * 1e-5f);
  for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 3.9f, 4.f, 4.1f, 1e30f, -1e30f, INFINITY, -INFINITY}) xs.push_back(v);
  auto x = Tensor<float, DynShape<1>>::from_host(DynShape<1>(xs.size()), xs);
  Tensor<float, DynShape<1>> y = erf(x);
  const auto yv = y.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, std::abs(double(yv[i]) - std::erf(double(xs[i]))));
  CHECK(worst <= 5e-7);
  auto nan = Tensor<float, DynShape<1>>::full(DynShape<1>(37), std::numeric_limits<float>::quiet_NaN());
  Tensor<float, DynShape<1>> yn = erf(nan);
  for (float v : yn.to_vector()) CHECK(std::isnan(v));
}

TEMPLATE_TEST_CASE("every elementwise functor matches a plain loop", "[core][expr]", float, double) {
  using T = TestType;
  const double s2 = 0.7071067811865476, k = 0.7978845608028654;
  check_unary<T>("neg", [](const auto& x) { return -x; }, [](double v) { return -v; }, -3, 3);
  check_unary<T>("exp", [](const auto& x) { return exp(x); }, [](double v) { return std::exp(v); }, -10, 10);
  check_unary<T>("log", [](const auto& x) { return log(x); }, [](double v) { return std::log(v); }, 1e-3, 1e3);
  check_unary<T>("tanh", [](const auto& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -6, 6);
  check_unary<T>("erf", [](const auto& x) { return erf(x); }, [](double v) { return std::erf(v); }, -4, 4);
  check_unary<T>("sqrt", [](const auto& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0, 100);
  check_unary<T>("rsqrt", [](const auto& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, 1e-2, 100);
  check_unary<T>("abs", [](const auto& x) { return abs(x); }, [](double v) { return std::abs(v); }, -3, 3);
  check_unary<T>("square", [](const auto& x) { return square(x); }, [](double v) { return v * v; }, -3, 3);
  check_unary<T>("sigmoid", [](const auto& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, -20, 20);
  check_unary<T>("relu", [](const auto& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0.0; }, -3, 3);
  check_unary<T>("gelu", [](const auto& x) { return gelu(x); },
                 [&](double v) { return 0.5 * v * (1 + std::erf(v * s2)); }, -6, 6, 4);
  check_unary<T>("gelu_tanh", [](const auto& x) { return gelu_tanh(x); },
                 [&](double v) { return 0.5 * v * (1 + std::tanh(k * (v + 0.044715 * v * v * v))); }, -6, 6, 4);
  check_unary<T>("silu", [](const auto& x) { return silu(x); }, [](double v) { return v / (1 + std::exp(-v)); }, -20, 20, 4);

  check_binary<T>("add", [](const auto& a, const auto& b) { return a + b; }, [](double a, double b) { return a + b; }, -3, 3, -3, 3);
  check_binary<T>("sub", [](const auto& a, const auto& b) { return a - b; }, [](double a, double b) { return a - b; }, -3, 3, -3, 3);
  check_binary<T>("mul", [](const auto& a, const auto& b) { return a * b; }, [](double a, double b) { return a * b; }, -3, 3, -3, 3);
  check_binary<T>("div", [](const auto& a, const auto& b) { return a / b; }, [](double a, double b) { return a / b; }, -3, 3, 0.1, 3);
  check_binary<T>("pow", [](const auto& a, const auto& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }, 0.01, 5, -3, 3);
  check_binary<T>("maximum", [](const auto& a, const auto& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }, -3, 3, -3, 3);
  check_binary<T>("minimum", [](const auto& a, const auto& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }, -3, 3, -3, 3);
  check_binary<T>("greater", [](const auto& a, const auto& b) { return a > b; }, [](double a, double b) { return a > b ? 1.0 : 0.0; }, -3, 3, -3, 3, true);
  check_binary<T>("greater_equal", [](const auto& a, const auto& b) { return a >= b; }, [](double a, double b) { return a >= b ? 1.0 : 0.0; }, -3, 3, -3, 3, true);
  check_binary<T>("less", [](const auto& a, const auto& b) { return a < b; }, [](double a, double b) { return a < b ? 1.0 : 0.0; }, -3, 3, -3, 3, true);
  check_binary<T>("less_equal", [](const auto& a, const auto& b) { return a <= b; }, [](double a, double b) { return a <= b ? 1.0 : 0.0; }, -3, 3, -3, 3, true);
  check_binary<T>("equal", [](const auto& a, const auto& b) { return equal(a, b); }, [](double a, double b) { return a == b ? 1.0 : 0.0; }, -3, 3, -3, 3, true);
  // pow with integral exponents accepts negative bases (as std::pow does).
  check_unary<T>("pow(x, 3)", [](const auto& x) { return pow(x, 3.0); }, [](double v) { return v * v * v; }, -3, 3);
  check_unary<T>("pow(x, 2)", [](const auto& x) { return pow(x, 2.0); }, [](double v) { return v * v; }, -3, 3);

  // Ternary functors.
  const std::array<index_t, 2> e{5, 37};
  auto m = make_random<T, 2>(e, 0, 1, 31), a = make_random<T, 2>(e, -2, 2, 32), b = make_random<T, 2>(e, -2, 2, 33);
  for (index_t i = 0; i < m.numel(); ++i) m.data()[i] = m.data()[i] < T(0.5) ? T(0) : T(i % 3 + 1);  // any non-zero selects a
  const auto mv = m.to_vector(), av = a.to_vector(), bv = b.to_vector();
  Tensor<T, DynShape<2>> w = where(m, a, b), fma = muladd(m, a, b);
  std::vector<double> rw(mv.size()), rf(mv.size());
  for (std::size_t i = 0; i < mv.size(); ++i) {
    rw[i] = mv[i] != 0 ? av[i] : bv[i];
    rf[i] = double(mv[i]) * av[i] + bv[i];
  }
  CHECK_CLOSE(w.to_vector(), rw, 0.0, 0.0);
  CHECK_CLOSE(fma.to_vector(), rf, tol<T>(), tol<T>());
}

TEST_CASE("a fused multi-op expression matches the loop, in one pass with numbers mixed in", "[core][expr]") {
  const std::array<index_t, 2> e{13, 101};
  auto a = make_random<float, 2>(e, -2, 2, 41), x = make_random<float, 2>(e, -2, 2, 42);
  auto b = make_random<float, 1>({101}, -1, 1, 43);
  Tensor<float, DynShape<2>> y = gelu(a * x + b) * 2.0f - sigmoid(x) / (1.0f + square(a));
  const auto av = a.to_vector(), xv = x.to_vector(), bv = b.to_vector();
  std::vector<double> r(av.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    const double z = double(av[i]) * xv[i] + bv[i % 101];
    r[i] = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))) * 2 - 1 / (1 + std::exp(-double(xv[i]))) / (1 + double(av[i]) * av[i]);
  }
  CHECK_CLOSE(y.to_vector(), r, 1e-5, 1e-5);
}

// ---- broadcasting patterns ------------------------------------------------------------------------------
namespace {
template <std::size_t R, std::size_t RA, std::size_t RB, class F>
std::vector<double> broadcast_ref(const std::array<index_t, R>& out, const std::array<index_t, RA>& ea,
                                  const std::vector<float>& a, const std::array<index_t, RB>& eb,
                                  const std::vector<float>& b, F f) {
  index_t n = 1;
  for (auto x : out) n *= x;
  std::vector<double> r(n);
  for (index_t p = 0; p < n; ++p) {
    const auto idx = unravel(p, out);
    r[p] = f(double(a[broadcast_offset(idx, ea)]), double(b[broadcast_offset(idx, eb)]));
  }
  return r;
}
template <std::size_t RA, std::size_t RB, std::size_t R>
void check_broadcast_pattern(const std::array<index_t, RA>& ea, const std::array<index_t, RB>& eb,
                             const std::array<index_t, R>& expected, std::uint64_t seed) {
  auto a = make_random<float, RA>(ea, -2, 2, seed), b = make_random<float, RB>(eb, -2, 2, seed + 1);
  auto y = eval(a * b - a + 0.5f * b);
  static_assert(decltype(y)::rank == R);
  REQUIRE(y.extents() == expected);
  INFO("a " << extents_to_string(ea) << " b " << extents_to_string(eb));
  CHECK_CLOSE(y.to_vector(), broadcast_ref(expected, ea, a.to_vector(), eb, b.to_vector(),
                                           [](double x, double z) { return x * z - x + 0.5 * z; }),
              1e-6, 1e-6);
  // The operands swapped broadcast the same way.
  auto y2 = eval(b * a);
  CHECK_CLOSE(y2.to_vector(), broadcast_ref(expected, ea, a.to_vector(), eb, b.to_vector(),
                                            [](double x, double z) { return x * z; }),
              1e-6, 1e-6);
}
}  // namespace

TEST_CASE("broadcasting patterns: row, column, scalar, rank mismatch, two-sided", "[core][expr][broadcast]") {
  check_broadcast_pattern<2, 1, 2>({7, 37}, {37}, {7, 37}, 100);                     // row
  check_broadcast_pattern<2, 2, 2>({37, 9}, {37, 1}, {37, 9}, 110);                  // column
  check_broadcast_pattern<2, 2, 2>({1, 1}, {23, 19}, {23, 19}, 120);                 // scalar-shaped
  check_broadcast_pattern<3, 2, 3>({3, 17, 21}, {17, 1}, {3, 17, 21}, 130);          // rank mismatch
  check_broadcast_pattern<3, 2, 3>({4, 1, 33}, {5, 1}, {4, 5, 33}, 140);             // two-sided
  check_broadcast_pattern<4, 4, 4>({2, 1, 3, 1}, {1, 4, 1, 5}, {2, 4, 3, 5}, 150);   // alternating
  check_broadcast_pattern<3, 1, 3>({2, 3, 1}, {1}, {2, 3, 1}, 160);                  // trailing 1s

  // A rank-0 tensor and a plain number both broadcast to everything.
  auto x = make_random<float, 2>({3, 41}, -2, 2, 170);
  auto s = Tensor<float, Shape<>>::full({}, 1.5f);
  Tensor<float, DynShape<2>> y = x * s + 2.0f;
  std::vector<double> r;
  for (float v : x.to_vector()) r.push_back(double(v) * 1.5 + 2);
  CHECK_CLOSE(y.to_vector(), r, 1e-6, 1e-6);
  // Several operands with different patterns in one expression: x [A,B,C], row [C], col [A,B,1], scalar.
  auto a3 = make_random<double, 3>({3, 4, 29}, -1, 1, 180);
  auto row = make_random<double, 1>({29}, -1, 1, 181);
  auto col = make_random<double, 3>({3, 4, 1}, -1, 1, 182);
  Tensor<double, DynShape<3>> z = muladd(a3, row, col) * 3.0 - where(a3 > 0.0, row, col);
  const auto av = a3.to_vector(), rv = row.to_vector(), cv = col.to_vector();
  std::vector<double> rz(av.size());
  for (std::size_t p = 0; p < av.size(); ++p) {
    const double rr = rv[p % 29], cc = cv[p / 29];
    rz[p] = (av[p] * rr + cc) * 3.0 - (av[p] > 0 ? rr : cc);
  }
  CHECK_CLOSE(z.to_vector(), rz, 1e-14, 1e-14);
}

TEST_CASE("large expressions (> 1M elements, odd sizes) split across threads match the loop", "[core][expr][threads]") {
  ThreadCountGuard guard;
  for (std::size_t threads : {1u, 4u}) {
    cpu_backend::set_num_threads(threads);
    INFO("threads " << threads);
    // Flat odd length: per-thread ranges end inside SIMD blocks.
    const index_t n = 1000003;
    auto a = make_random<float, 1>({n}, -2, 2, 200), x = make_random<float, 1>({n}, -2, 2, 201);
    auto b = make_random<float, 1>({n}, -2, 2, 202);
    Tensor<float, DynShape<1>> y = tanh(a * x + b) - 0.25f * x;
    const auto av = a.to_vector(), xv = x.to_vector(), bv = b.to_vector();
    std::vector<double> r(n);
    for (index_t i = 0; i < n; ++i) r[i] = std::tanh(double(av[i]) * xv[i] + bv[i]) - 0.25 * xv[i];
    CHECK_CLOSE(y.to_vector(), r, 1e-5, 1e-5);
    // Row broadcast over [1001, 999]: thread ranges start in the middle of rows.
    auto m = make_random<float, 2>({1001, 999}, -2, 2, 203);
    auto row = make_random<float, 1>({999}, -2, 2, 204);
    auto col = make_random<float, 2>({1001, 1}, -2, 2, 205);
    Tensor<float, DynShape<2>> z = m * row + col;
    const auto mv = m.to_vector(), rv = row.to_vector(), cv = col.to_vector();
    std::vector<double> rz(mv.size());
    for (std::size_t p = 0; p < mv.size(); ++p) rz[p] = double(mv[p]) * rv[p % 999] + cv[p / 999];
    CHECK_CLOSE(z.to_vector(), rz, 1e-6, 1e-6);
  }
}

TEST_CASE("maximum and minimum propagate NaN from either side (SIMD body and scalar tail)", "[core][expr][nan]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const index_t n = 37;  // 2 AVX-512 float batches + a 5-element tail
  std::vector<float> a(n), b(n);
  for (index_t i = 0; i < n; ++i) {
    a[i] = float(i) - 18;
    b[i] = 18 - float(i);
  }
  for (index_t i : {0u, 5u, 20u, 35u}) a[i] = nan;  // NaN on the left
  for (index_t i : {3u, 17u, 33u, 36u}) b[i] = nan;  // NaN on the right
  auto ta = make<float, 1>({n}, a), tb = make<float, 1>({n}, b);
  const auto mx = eval(maximum(ta, tb)).to_vector(), mn = eval(minimum(ta, tb)).to_vector();
  const auto mx2 = eval(maximum(tb, ta)).to_vector(), mn2 = eval(minimum(tb, ta)).to_vector();
  for (index_t i = 0; i < n; ++i) {
    INFO("element " << i);
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      CHECK(std::isnan(mx[i]));
      CHECK(std::isnan(mn[i]));
      CHECK(std::isnan(mx2[i]));
      CHECK(std::isnan(mn2[i]));
    } else {
      CHECK(mx[i] == std::max(a[i], b[i]));
      CHECK(mn[i] == std::min(a[i], b[i]));
      CHECK(mx2[i] == mx[i]);
      CHECK(mn2[i] == mn[i]);
    }
  }
  // Against a number too.
  CHECK(std::isnan(eval(maximum(ta, 0.0f)).to_vector()[0]));
  CHECK(std::isnan(eval(minimum(1.0f, ta)).to_vector()[20]));
  // where: a NaN mask is non-zero, so it selects the first branch in the SIMD body and the tail alike.
  const auto w = eval(where(ta, tb, 7.0f)).to_vector();
  for (index_t i = 0; i < n; ++i) {
    INFO("where element " << i);
    if (a[i] != 0 && !std::isnan(b[i])) CHECK(w[i] == b[i]);
    if (a[i] == 0) CHECK(w[i] == 7.0f);
  }
}

TEST_CASE("the thread pool can be resized between jobs and rethrows exceptions", "[core][threads]") {
  ThreadCountGuard guard;
  const index_t n = 100003;
  for (std::size_t threads : {2u, 3u, 1u, 4u, 2u}) {
    cpu_backend::set_num_threads(threads);
    CHECK(cpu_backend::num_threads() == threads);
    std::vector<int> hits(n, 0);
    cpu_backend::parallel_for(n, 1000, [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) ++hits[i];
    });
    CHECK(std::count(hits.begin(), hits.end(), 1) == std::ptrdiff_t(n));
    // Give freshly started workers time to (wrongly) pick up a finished job.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  cpu_backend::set_num_threads(4);
  CHECK_THROWS_WITH(cpu_backend::parallel_for(n, 1000, [&](index_t b, index_t) {
                      if (b > 0) throw std::runtime_error("boom in a worker");
                    }),
                    "boom in a worker");
  // Still usable afterwards.
  std::atomic<index_t> total{0};
  cpu_backend::parallel_for(n, 1000, [&](index_t b, index_t e) { total += e - b; });
  CHECK(total == n);
}

TEST_CASE("a lazy expression in auto outlives the tensors it was built from", "[core][expr][lifetime]") {
  auto make_expr = [] {
    auto a = make<float, 2>({2, 3}, {1, 2, 3, 4, 5, 6});
    auto b = make<float, 1>({3}, {10, 20, 30});
    return exp(a * 0.0f) * b + a;  // a and b die here; the expression holds their buffers
  };
  auto e = make_expr();
  std::vector<float> junk(1 << 16, 123.f);  // allocations that would reuse freed memory
  auto other = make<float, 1>({junk.size()}, junk);
  Tensor<float, DynShape<2>> y = e;
  CHECK(y.to_vector() == std::vector<float>{11, 22, 33, 14, 25, 36});
  // Evaluating twice gives the same values (the expression is not consumed).
  CHECK(eval(e).to_vector() == y.to_vector());
  // Lazy: the values are read when the expression is evaluated, not when it is built.
  auto x = make<float, 1>({3}, {1, 2, 3});
  auto lazy = x * 2.0f;
  x(0) = 50;
  CHECK(eval(lazy).to_vector() == std::vector<float>{100, 4, 6});
  // The expression shares the operand's buffer (no copy was made).
  auto z = make<float, 1>({3}, {1, 2, 3});
  const long before = z.buffer().use_count();
  {
    auto held = z + z;
    CHECK(z.buffer().use_count() == before + 2);
  }
  CHECK(z.buffer().use_count() == before);
}

TEST_CASE("assign writes an expression into an existing tensor", "[core][expr][assign]") {
  auto w = make<float, 2>({2, 3}, {1, 2, 3, 4, 5, 6});
  auto g = make<float, 2>({2, 3}, {1, 1, 1, 2, 2, 2});
  float* before = w.data();
  assign(w, w - 0.5f * g);  // in place: reads and writes the same buffer
  CHECK(w.data() == before);
  CHECK(w.to_vector() == std::vector<float>{0.5f, 1.5f, 2.5f, 3, 4, 5});
  auto bias = make<float, 1>({3}, {1, 2, 3});
  assign(w, g * bias);  // broadcast source
  CHECK(w.to_vector() == std::vector<float>{1, 2, 3, 2, 4, 6});
  // The destination does not broadcast: the expression must have the destination's extents.
  auto row = make<float, 2>({1, 3}, {1, 2, 3});
  CHECK_THROWS_AS(assign(w, row * 2.0f), ShapeError);
  CHECK_THROWS_WITH(assign(w, row * 2.0f), Catch::Contains("assign") && Catch::Contains("[2, 3]") && Catch::Contains("[1, 3]"));
  // Not recorded, even under a tape with operands that require gradients.
  g.set_requires_grad();
  autograd::Tape tape;
  assign(w, w + g);
  CHECK(tape.size() == 0);
  CHECK(w.to_vector() == std::vector<float>{2, 3, 4, 4, 6, 8});
}

// ---- printing -----------------------------------------------------------------------------------------
TEST_CASE("tensors print through fmt", "[core][format]") {
  auto t = Tensor<float, Shape<2, 3>>::from_host({}, {1, 2, 3, 4, 5, 6});
  CHECK(fmt::format("{}", t) == "tensor(float32, cpu, [2, 3]) [[1, 2, 3], [4, 5, 6]]");
  CHECK(to_string(t) == fmt::format("{}", t));
  auto d = make<double, 1>({2}, {0.5, -1.25});
  CHECK(fmt::format("{}", d) == "tensor(float64, cpu, [2]) [0.5, -1.25]");
  std::vector<float> v(10);
  std::iota(v.begin(), v.end(), 0.f);
  CHECK(fmt::format("{}", make<float, 1>({10}, v)) == "tensor(float32, cpu, [10]) [0, 1, 2, ..., 7, 8, 9]");
  std::vector<float> w(16);
  std::iota(w.begin(), w.end(), 0.f);
  CHECK(fmt::format("{}", make<float, 2>({8, 2}, w)) ==
        "tensor(float32, cpu, [8, 2]) [[0, 1], [2, 3], [4, 5], ..., [10, 11], [12, 13], [14, 15]]");
  CHECK(fmt::format("{}", Tensor<float, Shape<>>::full({}, 3.5f)) == "tensor(float32, cpu, []) 3.5");
  CHECK(fmt::format("{}", IndexTensor<Shape<3>>::from_host({}, {1, 2, 3})) == "tensor(int64, cpu, [3]) [1, 2, 3]");
  CHECK(fmt::format("{}", Tensor<float, DynShape<2>>()) == "tensor(float32, cpu, [0, 0]) <null>");
  CHECK(fmt::format("{}", make<float, 1>({1}, {1e-7f})) == "tensor(float32, cpu, [1]) [1e-07]");
}
