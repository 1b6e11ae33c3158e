// Gradient checks of the index-driven ops and views, and self-tests of the harness itself. See
// tests/support/gradcheck.hpp (the coverage test over every registered case is test_gradcheck_coverage.cpp).

#include <gradcheck.hpp>

using namespace ttmoe;
using namespace ttmoe::gradcheck;

// ---- indexing ------------------------------------------------------------------------------------
GRADCHECK_CASE("index_select") {
  // Random indices repeat rows (the VJP must accumulate) and skip others (zero gradient).
  return Case()
      .variant("rows of [n,d]", [](Rng& r) { return Shapes{{r.ext(1, 6), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 auto rng = in.rng();
                 const index_t m = 1 + index_t(rng.next() % 8);
                 return index_select(x, random_indices<1>(rng, {m}, x.extent(0)));
               })
      .variant("rows of [n,a,b] (static index length 5)", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 3), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<3>(0);
                 auto rng = in.rng();
                 auto idx = random_indices<1>(rng, {5}, x.extent(0)).as<Shape<5>>();
                 return index_select(x, idx);
               });
}
GRADCHECK_CASE("gather") {
  return Case()
      .variant("gather<1> [n,c] (cross-entropy pattern)", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<2>(0);
                 auto rng = in.rng();
                 return gather<1>(x, random_indices<2>(rng, {x.extent(0), 1 + rng.next() % 6}, x.extent(1)));
               })
      .variant("gather<0> [n,a,b]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 3), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<3>(0);
                 auto rng = in.rng();
                 return gather<0>(x, random_indices<3>(rng, {1 + rng.next() % 5, x.extent(1), x.extent(2)}, x.extent(0)));
               })
      .variant("gather<1> [a,n,b] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<3>(0);
                 auto rng = in.rng();
                 return gather<1>(x, random_indices<3>(rng, {x.extent(0), 1 + rng.next() % 5, x.extent(2)}, x.extent(1)));
               })
      .variant("gather<-1> [a,b,n]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<3>(0);
                 auto rng = in.rng();
                 return gather<-1>(x, random_indices<3>(rng, {x.extent(0), x.extent(1), 1 + rng.next() % 5}, x.extent(2)));
               });
}
GRADCHECK_CASE("scatter_add") {
  // Both the base and the source need gradients; indices collide.
  return Case()
      .variant("scatter_add<0> base [n,d], src [m,d]", [](Rng& r) { auto d = r.ext(1, 6); return Shapes{{r.ext(1, 5), d}, {r.ext(1, 7), d}}; },
               [](const Inputs& in) -> Output {
                 auto base = in.get<2>(0);
                 auto src = in.get<2>(1);
                 auto rng = in.rng();
                 return scatter_add<0>(base, random_indices<2>(rng, src.extents(), base.extent(0)), src);
               })
      .variant("scatter_add<1> base [a,n,b], src [a,m,b]",
               [](Rng& r) { auto a = r.ext(1, 3), b = r.ext(1, 3); return Shapes{{a, r.ext(1, 4), b}, {a, r.ext(1, 5), b}}; },
               [](const Inputs& in) -> Output {
                 auto base = in.get<3>(0);
                 auto src = in.get<3>(1);
                 auto rng = in.rng();
                 return scatter_add<1>(base, random_indices<3>(rng, src.extents(), base.extent(1)), src);
               })
      .variant("scatter_add<-1> of a computed source", [](Rng& r) { auto a = r.ext(1, 4); return Shapes{{a, r.ext(1, 6)}, {a, r.ext(1, 6)}}; },
               [](const Inputs& in) -> Output {
                 auto base = in.get<2>(0);
                 Tensor<double, DynShape<2>> src = tanh(in.get<2>(1));
                 auto rng = in.rng();
                 return scatter_add<-1>(base, random_indices<2>(rng, src.extents(), base.extent(1)), src);
               });
}
GRADCHECK_CASE("concat") {
  return Case()
      .variant("concat<0> of three [?,d]", [](Rng& r) { auto d = r.ext(1, 6); return Shapes{{r.ext(1, 3), d}, {r.ext(1, 3), d}, {r.ext(1, 3), d}}; },
               [](const Inputs& in) -> Output { return concat<0>(std::vector{in.get<2>(0), in.get<2>(1), in.get<2>(2)}); })
      .variant("concat<1> with a repeated part", [](Rng& r) { auto n = r.ext(1, 4); return Shapes{{n, r.ext(1, 4)}, {n, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return concat<1>(std::vector{in.get<2>(0), in.get<2>(1), in.get<2>(0)}); })
      .variant("concat<-1> rank 3", [](Rng& r) { auto a = r.ext(1, 3), b = r.ext(1, 3); return Shapes{{a, b, r.ext(1, 4)}, {a, b, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return concat<-1>(std::vector{in.get<3>(0), in.get<3>(1)}); });
}
GRADCHECK_CASE("concat with a frozen part") {
  return Case().constant_input(1).variant(
      "concat<1>(x, frozen, y)", [](Rng& r) { auto n = r.ext(1, 4); return Shapes{{n, r.ext(1, 4)}, {n, r.ext(1, 4)}, {n, r.ext(1, 3)}}; },
      [](const Inputs& in) -> Output { return concat<1>(std::vector{in.get<2>(0), in.get<2>(1), in.get<2>(2)}); });
}
GRADCHECK_CASE("narrow") {
  return Case()
      .variant("narrow<0> [n,d]", [](Rng& r) { return Shapes{{r.ext(3, 6), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<2>(0); return narrow<0>(x, 1, x.extent(0) - 2); })
      .variant("narrow<1> [a,n,b] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(3, 6), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<3>(0); return narrow<1>(x, 2, x.extent(1) - 2); })
      .variant("narrow<-1> [a,n]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(2, 9)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<2>(0); return narrow<-1>(x, 0, x.extent(1) - 1); });
}
GRADCHECK_CASE("permute") {
  return Case()
      .variant("permute<2,0,1>", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return permute<2, 0, 1>(in.get<3>(0)); })
      .variant("permute<1,0,2>", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return permute<1, 0, 2>(in.get<3>(0)); })
      .variant("permute<3,1,0,2> rank 4", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(1, 3), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return permute<3, 1, 0, 2>(in.get<4>(0)); });
}
GRADCHECK_CASE("transpose") {
  return Case()
      .variant("transpose [m,n]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 6)}}; },
               [](const Inputs& in) -> Output { return transpose(in.get<2>(0)); })
      .variant("transpose [b,m,n] (static)", [](Rng& r) { return Shapes{{r.ext(1, 3), 3, r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return transpose(in.get_as<Shape<dyn, 3, dyn>>(0)); });
}
GRADCHECK_CASE("topk") {
  // Ties would switch which element is selected (and the order of the selected ones).
  return Case()
      .kink(ties_within(0))
      .variant("topk values [n] k random", [](Rng& r) { return Shapes{{r.ext(1, 12)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<1>(0);
                 auto rng = in.rng();
                 return topk(x, 1 + rng.next() % x.extent(0)).first;
               })
      .variant("topk values [a,b,n]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(2, 7)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<3>(0); return topk(x, 2).first; });
}

// ---- views and copies ------------------------------------------------------------------------------
GRADCHECK_CASE("slice") {
  return Case()
      .variant("rows [1, n-1) of [n,d]", [](Rng& r) { return Shapes{{r.ext(2, 6), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<2>(0); return x.slice(1, x.extent(0)); })
      .variant("slice of a slice, then an expression", [](Rng& r) { return Shapes{{r.ext(4, 7), r.ext(1, 3), r.ext(1, 3)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<3>(0);
                 auto s = x.slice(1, x.extent(0) - 1).slice(1, 2);
                 return s * x.slice(0, 1);  // overlapping views of one leaf
               })
      .variant("slice of a static shape", [](Rng&) { return Shapes{{4, 3}}; },
               [](const Inputs& in) -> Output { return in.get_as<Shape<4, 3>>(0).slice(2, 4); });
}
GRADCHECK_CASE("reshape") {
  return Case()
      .variant("[a,b] -> [a*b]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 6)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<2>(0); return x.reshape(Shape<dyn>(x.numel())); })
      .variant("[2,3,?] -> Shape<6,?> then mixed with the original", [](Rng& r) { return Shapes{{2, 3, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output {
                 auto x = in.get<3>(0);
                 auto v = x.reshape(Shape<6, dyn>(x.extent(2)));
                 return v * 2.0 + sum<0>(x).reshape(Shape<1, dyn>(3 * x.extent(2))).reshape(Shape<dyn>(3 * x.extent(2)))
                                      .reshape(Shape<3, dyn>(x.extent(2))).slice(0, 1);
               });
}
GRADCHECK_CASE("clone") {
  return Case()
      .variant("clone [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 6)}}; },
               [](const Inputs& in) -> Output { return in.get<2>(0).clone(); })
      .variant("clone * original", [](Rng& r) { return Shapes{{r.ext(1, 12)}}; },
               [](const Inputs& in) -> Output { auto x = in.get<1>(0); return x.clone() * x; });
}

// ---- self-tests of the harness ------------------------------------------------------------------------
TEST_CASE("gradcheck harness detects a wrong gradient", "[gradcheck][harness]") {
  // x * detach(x): autograd sees d/dx = x, the true derivative of x^2 is 2x.
  Case c = Case().variant("x * detach(x)", [](Rng& r) { return Shapes{{r.ext(2, 6)}}; },
                          [](const Inputs& in) -> Output { auto x = in.get<1>(0); return x * x.detach(); });
  const Result r = run_case("self-test wrong", c);
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.message, Catch::Contains("autograd") && Catch::Contains("finite difference") &&
                            Catch::Contains("max abs err"));
  CHECK(r.max_abs_err > 0.01);

  // The same function written correctly passes, and reports tiny errors.
  Case good = Case().variant("x * x", [](Rng& r) { return Shapes{{r.ext(2, 6)}}; },
                             [](const Inputs& in) -> Output { auto x = in.get<1>(0); return x * x; });
  const Result g = run_case("self-test right", good);
  CHECK(g.ok);
  CHECK(g.max_abs_err < 1e-7);
  CHECK(g.checked >= 4);
}

TEST_CASE("gradcheck harness avoids declared kinks by re-drawing", "[gradcheck][harness]") {
  auto relu_case = [] {
    return Case().variant("relu [30]", [](Rng&) { return Shapes{{30}}; },
                          [](const Inputs& in) -> Output { return relu(in.get<1>(0)); });
  };
  // Every value within h of the kink: finite differences straddle it, so without the kink
  // declaration the check fails...
  const Result straddle = run_case("self-test straddle", relu_case().range(-0.01, 0.01).step(0.02));
  CHECK_FALSE(straddle.ok);
  // ... and with it, no admissible draw exists (each element must be 3h away), which is reported.
  const Result impossible = run_case("self-test impossible", relu_case().range(-0.01, 0.01).step(0.02).kink(kink_at(0, 0.0)));
  CHECK_FALSE(impossible.ok);
  CHECK_THAT(impossible.message, Catch::Contains("kinks"));
  // A wide range with a large step needs re-draws; every accepted draw passes.
  Case c = relu_case().range(-1, 1).step(0.02).kink(kink_at(0, 0.0)).repeat(3);
  c.atol = 1e-6;
  const Result ok = run_case("self-test redraw", c);
  CHECK(ok.ok);
  CHECK(ok.redraws > 0);
  // Same for ties: max over 10 values in [0, 1) with h = 0.01 must re-draw until gaps exceed 0.03.
  Case ties = Case().range(0, 1).step(0.01).kink(ties_within(0)).variant(
      "max<0> [10]", [](Rng&) { return Shapes{{10}}; }, [](const Inputs& in) -> Output { return max<0>(in.get<1>(0)); });
  const Result t = run_case("self-test ties", ties);
  CHECK(t.ok);
  CHECK(t.redraws > 0);
}

TEST_CASE("gradcheck harness contracts with a random upstream, not a plain sum", "[gradcheck][harness]") {
  // softmax rows sum to 1: under a plain sum every gradient would be 0 and a wrong softmax VJP
  // that returned zeros would pass. With a random upstream the gradient is non-zero.
  Case c = Case().variant("softmax", [](Rng&) { return Shapes{{3, 5}}; },
                          [](const Inputs& in) -> Output { return softmax(in.get<2>(0)); });
  const Result r = run_case("self-test upstream", c);
  CHECK(r.ok);
  CHECK(r.max_rel_err < 1e-5);
  // A "VJP" that drops the gradient entirely (detach) must therefore fail.
  Case dropped = Case().variant("softmax of detached x plus x * 0", [](Rng&) { return Shapes{{3, 5}}; },
                                [](const Inputs& in) -> Output {
                                  auto x = in.get<2>(0);
                                  return softmax(x.detach()) + x * 0.0;
                                });
  // ...unless the true gradient is zero: here it is not, since softmax(x) depends on x.
  Case truth = Case().variant("softmax(x) + x * 0", [](Rng&) { return Shapes{{3, 5}}; },
                              [](const Inputs& in) -> Output {
                                auto x = in.get<2>(0);
                                return softmax(x) + x * 0.0;
                              });
  CHECK(run_case("self-test truth", truth).ok);
  // The detached version gives a zero gradient but the finite difference of softmax(x) is not 0.
  const Result d = run_case("self-test dropped", dropped);
  CHECK_FALSE(d.ok);
}
