#pragma once
// Comparing ttmoe with the reference fixtures (fixture.hpp loads them): relative errors, checks with a
// clear message, parameters loaded by dotted name, and the DATA-DRIVEN module parity of the layers:
//
//   TEST_CASE("parity: layernorm") {
//     module_parity("layernorm",
//                   []<class T>(const Fixture& f) { return nn::LayerNorm<T>(f.shape("param.weight")[0], T(f.meta_double("eps"))); },
//                   unary<3>);
//   }
//
// module_parity builds the module with `make` in double and in float (Catch sections), loads every
// `param.<name>`, runs `forward` under a tape (inputs and outputs through a ParityRun, which checks
// `out.<name>` and adds sum(out * upstream.<name>) for each metadata `loss_outputs` name), back-propagates
// that loss and compares `grad.in.<name>` of every float input and `grad.param.<name>` of the module.
// Set TTMOE_PARITY_VERBOSE=1 to print every comparison's error (for quoting figures in reports).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "fixture.hpp"
#include "ttmoe/nn/module.hpp"

namespace ttmoe::test {

/// Largest |a - b| / max(1, |b|) over two equally long value lists (b the reference); NaN matches NaN
/// only (a NaN on one side gives infinity, so it can never pass a tolerance).
template <class TA, class TB>
double max_rel_error(const std::vector<TA>& a, const std::vector<TB>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = static_cast<double>(a[i]), y = static_cast<double>(b[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return worst;
}

/// max_rel_error of two tensors' values.
template <class TA, class SA, class TB, class SB>
double max_rel_error(const Tensor<TA, SA>& a, const Tensor<TB, SB>& b) {
  return max_rel_error(a.to_vector(), b.to_vector());
}

/// Normwise relative error max_i |a_i - b_i| / max_i |b_i| (b is the reference): for whole-model
/// logits, whose small entries carry no meaning of their own.
template <class TA, class SA, class TB, class SB>
double normwise_rel_error(const Tensor<TA, SA>& a, const Tensor<TB, SB>& b) {
  REQUIRE(a.numel() == b.numel());
  const auto va = a.to_vector();
  const auto vb = b.to_vector();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, std::abs(double(va[i]) - double(vb[i])));
    scale = std::max(scale, std::abs(double(vb[i])));
  }
  return std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff / std::max(scale, 1e-30);
}

/// REQUIREs that values `actual` with extents `shape` match fixture tensor `key` within `tol`
/// (relative to max(1, |ref|)); the error is printed when TTMOE_PARITY_VERBOSE is set.
template <class T>
void check_close(const Fixture& f, const std::string& key, const std::vector<index_t>& shape, const std::vector<T>& actual,
                 double tol) {
  INFO(f.name() << ": " << key);
  REQUIRE(f.has(key));
  REQUIRE(shape == f.shape(key));
  const double err = max_rel_error(actual, f.flat<double>(key));
  const std::string component = f.name() + (std::is_same_v<T, double> ? " [double]" : " [float]");
  if (std::getenv("TTMOE_PARITY_VERBOSE"))
    std::fprintf(stderr, "[parity] %-34s %-36s max_rel_err %.3e (tol %.0e)\n", component.c_str(), key.c_str(), err, tol);
  INFO("max relative error " << err << " (tolerance " << tol << ")");
  REQUIRE(err <= tol);
}

/// check_close of a tensor (it must be defined: an output or a gradient that was never computed fails).
template <class T, class S, class D>
void check_close(const Fixture& f, const std::string& key, const Tensor<T, S, D>& actual, double tol) {
  INFO(f.name() << ": " << key << " is defined");
  REQUIRE(actual.defined());
  const auto e = actual.extents();
  check_close<T>(f, key, std::vector<index_t>(e.begin(), e.end()), actual.to_vector(), tol);
}

/// Integer outputs (picks, slots, counts) must match fixture tensor `key` exactly.
template <class S>
void require_equal_ints(const Fixture& f, const std::string& key, const Tensor<std::int64_t, S>& actual) {
  INFO(f.name() << ": " << key);
  REQUIRE(actual.to_vector() == f.flat<std::int64_t>(key));
}

/// The gradient of `t`, or zeros when nothing reached it (an unused expert).
template <class T, class S>
Tensor<T, S> grad_or_zero(const Tensor<T, S>& t) {
  auto g = t.grad();
  return g.defined() ? g : Tensor<T, S>::zeros(t.shape());
}

namespace detail {
/// Stands for nn's parameter visitors in HasParameters (declared only: never called).
struct AnyParameterVisitor {
  template <class Tn>
  void operator()(const std::string& name, Tn& tensor);
  template <class M>
  void sub(const std::string& name, M& module);
};
}  // namespace detail

/// A type whose parameters the nn visitors can walk (it has visit_parameters).
template <class M>
concept HasParameters = requires(M& m, detail::AnyParameterVisitor& v) { m.visit_parameters(v); };

/// Copies every `param.<name>` of the fixture into the module's parameter of the same dotted name (each
/// must exist with the same shape).
template <class T, class M>
void load_params(const Fixture& f, M& module) {
  for (auto& p : nn::named_parameters<T>(module)) {
    const std::string key = "param." + p.name;
    INFO(f.name() << ": loading " << key);
    REQUIRE(f.has(key));
    REQUIRE(f.shape(key) == p.shape);
    const auto v = f.flat<T>(key);
    std::copy(v.begin(), v.end(), p.flat.data());
  }
}

/// Compares every `grad.param.<name>` the fixture holds with the module's parameter gradients.
template <class T, class M>
void check_param_grads(const Fixture& f, M& module, double tol) {
  for (auto& p : nn::named_parameters<T>(module)) {
    const std::string key = "grad.param." + p.name;
    if (!f.has(key)) continue;  // e.g. a frozen parameter: the reference has no gradient either
    check_close<T>(f, key, p.shape, p.flat.grad().defined() ? p.flat.grad().to_vector() : std::vector<T>{}, tol);
  }
}

/// One forward of a module parity run in precision T: hands out the fixture's inputs, checks the
/// outputs and builds the fixture loss; after the backward it checks the inputs' gradients.
template <class T>
class ParityRun {
 public:
  /// The precision this run computes in.
  using value_type = T;
  ParityRun(const Fixture& f, double out_tol) : f_(f), out_tol_(out_tol) {}

  /// The fixture (sizes, metadata).
  const Fixture& fixture() const { return f_; }

  /// Input `in.<name>` as a leaf that requires grad; its gradient is compared with `grad.in.<name>`.
  template <std::size_t R>
  Tensor<T, DynShape<R>> input(const std::string& name) {
    auto x = leaf<R, T>(f_, "in." + name);
    grad_checks_.push_back([this, x, name](double tol) { check_close(f_, "grad.in." + name, x.grad(), tol); });
    return x;
  }
  /// Integer input `in.<name>` (no gradient).
  template <std::size_t R>
  IndexTensor<DynShape<R>> indices(const std::string& name) const {
    return f_.get<R, std::int64_t>("in." + name);
  }
  /// Checks output `out.<name>`; when `name` is one of the fixture's loss outputs, adds
  /// sum(out * upstream.<name>) to the loss.
  template <class S>
  void output(const std::string& name, const Tensor<T, S>& y) {
    check_close(f_, "out." + name, y, out_tol_);
    const auto outs = f_.loss_outputs();
    if (std::find(outs.begin(), outs.end(), name) == outs.end()) return;
    Tensor<T, Shape<>> term = upstream_term(f_, name, y);
    if (loss_.defined()) {
      Tensor<T, Shape<>> sum = loss_ + term;
      loss_ = sum;
    } else {
      loss_ = term;
    }
    in_loss_.push_back(name);
  }
  /// The fixture loss; every name of `loss_outputs` must have been given to output() exactly once.
  const Tensor<T, Shape<>>& loss() const {
    auto want = f_.loss_outputs(), got = in_loss_;
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    INFO(f_.name() << ": the forward must produce every loss output of the fixture");
    REQUIRE(got == want);
    return loss_;
  }
  /// Compares every input's gradient with the fixture (after the backward).
  void check_input_grads(double tol) const {
    for (const auto& check : grad_checks_) check(tol);
  }

 private:
  const Fixture& f_;
  double out_tol_;
  Tensor<T, Shape<>> loss_;
  std::vector<std::string> in_loss_;
  std::vector<std::function<void(double)>> grad_checks_;
};

/// `run.input<R>(name)` without the `template` keyword inside generic lambdas.
template <std::size_t R, class T>
Tensor<T, DynShape<R>> input(ParityRun<T>& run, const std::string& name) {
  return run.template input<R>(name);
}
/// `run.indices<R>(name)` without the `template` keyword inside generic lambdas.
template <std::size_t R, class T>
IndexTensor<DynShape<R>> indices(const ParityRun<T>& run, const std::string& name) {
  return run.template indices<R>(name);
}

/// The forward of a one-input module: out.y = m(in.x), in.x of rank R.
template <std::size_t R>
struct UnaryForward {
  template <class M, class T>
  void operator()(M& m, ParityRun<T>& run) const {
    run.output("y", m(input<R>(run, "x")));
  }
};
/// module_parity's forward for modules called as y = m(x) with x of rank R.
template <std::size_t R>
inline constexpr UnaryForward<R> unary{};

/// What a parity case "builds" when it tests a function rather than a module (no parameters).
struct Functional {};
/// module_parity's `make` for functions: builds a Functional.
inline constexpr auto functional = []<class T>(const Fixture&) { return Functional{}; };

/// Tolerances relative to max(1, |ref|): 1e-10 in double (tests/reference/README.md); in float 1e-4,
/// gradients through attention's softmax 1e-3 as the README suggests.
struct ParityTolerance {
  double double_all = 1e-10;
  double float_out = 1e-4;
  double float_grad = 1e-4;
};

namespace detail {
template <class T, class Make, class Forward>
void module_parity_in(const std::string& fixture, Make& make, Forward& forward, double out_tol, double grad_tol) {
  const Fixture f(fixture);
  auto m = make.template operator()<T>(f);
  if constexpr (HasParameters<decltype(m)>) load_params<T>(f, m);
  ParityRun<T> run(f, out_tol);
  {
    autograd::Tape tape;
    forward(m, run);
    autograd::backward(tape, run.loss());
  }
  run.check_input_grads(grad_tol);
  if constexpr (HasParameters<decltype(m)>) check_param_grads<T>(f, m, grad_tol);
}
}  // namespace detail

/// Parity of one module (or function) with fixture `fixture`, in double and in float (Catch sections
/// "double" / "float"): `make.template operator()<T>(f)` builds it for precision T from the fixture's
/// sizes and metadata, `forward(m, run)` calls it through the ParityRun (see the top of this file).
template <class Make, class Forward>
void module_parity(const std::string& fixture, Make make, Forward forward, ParityTolerance tol = {}) {
  SECTION("double") { detail::module_parity_in<double>(fixture, make, forward, tol.double_all, tol.double_all); }
  SECTION("float") { detail::module_parity_in<float>(fixture, make, forward, tol.float_out, tol.float_grad); }
}

}  // namespace ttmoe::test
