// Optimiser parity with torch.optim (fixtures sgd / adam / adamw: three steps on one [3, 5]
// parameter with given gradients), the skip-without-grad rule, and a state save/load round trip.
// Tolerance: 1e-13 relative in double (README), 1e-5 in float.

#include "parity.hpp"
#include "ttmoe/nn/nn.hpp"

using namespace ttmoe;
using namespace ttmoe::test;

namespace {

/// A one-parameter module for driving optimisers directly.
template <class T>
struct OneParam {
  Tensor<T, DynShape<2>> p;
  template <class V>
  void visit_parameters(V& v) {
    v("p", p);
  }
};

/// Makes p.grad() equal to `g` through the public autograd API: d/dp sum(p * g) = g.
template <class T>
void set_grad(OneParam<T>& m, const Tensor<T, DynShape<2>>& g) {
  m.p.zero_grad();
  autograd::Tape tape;
  autograd::backward(tape, sum_all(m.p * g));
}

template <class T>
double otol() {
  return std::is_same_v<T, double> ? 1e-13 : 1e-5;
}

template <class T, class Opt>
void run_steps(const Fixture& f, OneParam<T>& m, Opt& opt) {
  for (int s = 0; s < 3; ++s) {
    set_grad(m, f.get<2, T>("in.grad." + std::to_string(s)));
    opt.step();
    check_close(f, "out.param." + std::to_string(s + 1), m.p, otol<T>());
  }
}

template <class T>
void sgd_case() {
  Fixture f("sgd");
  OneParam<T> m{f.get<2, T>("in.param0")};
  m.p.set_requires_grad();
  nn::SGD<T> opt(nn::trainable_parameters<T>(m),
                 {.lr = f.meta_double("lr"), .momentum = f.meta_double("momentum"),
                  .dampening = f.meta_double("dampening"), .weight_decay = f.meta_double("weight_decay")});
  run_steps(f, m, opt);
  auto st = opt.state_dict();
  check_close<T>(f, "out.momentum_buffer", f.shape("out.momentum_buffer"), st.at("p.momentum_buffer"), otol<T>());
}

template <class T>
void adam_case(const std::string& name, bool decoupled) {
  Fixture f(name);
  OneParam<T> m{f.get<2, T>("in.param0")};
  m.p.set_requires_grad();
  typename nn::Adam<T>::Options o{.lr = f.meta_double("lr"), .beta1 = 0.9, .beta2 = 0.999, .eps = f.meta_double("eps"),
                                  .weight_decay = f.meta_double("weight_decay"), .decoupled = false};
  REQUIRE(f.meta("betas") == "[0.9, 0.999]");
  auto opt = decoupled ? nn::AdamW<T>(nn::trainable_parameters<T>(m), o) : nn::Adam<T>(nn::trainable_parameters<T>(m), o);
  run_steps(f, m, opt);
  auto st = opt.state_dict();
  REQUIRE(st.step == 3);
  check_close<T>(f, "out.exp_avg", f.shape("out.exp_avg"), st.at("p.exp_avg"), otol<T>());
  check_close<T>(f, "out.exp_avg_sq", f.shape("out.exp_avg_sq"), st.at("p.exp_avg_sq"), otol<T>());
}
template <class T>
void adam_plain() { adam_case<T>("adam", false); }
template <class T>
void adamw_plain() { adam_case<T>("adamw", true); }

}  // namespace

TEST_CASE("parity: sgd") {
  SECTION("double") { sgd_case<double>(); }
  SECTION("float") { sgd_case<float>(); }
}
TEST_CASE("parity: adam") {
  SECTION("double") { adam_plain<double>(); }
  SECTION("float") { adam_plain<float>(); }
}
TEST_CASE("parity: adamw") {
  SECTION("double") { adamw_plain<double>(); }
  SECTION("float") { adamw_plain<float>(); }
}

// Saving after step 1 and loading into a fresh optimiser must continue exactly like the original.
TEST_CASE("optim: state_dict round trip (sgd, adamw)") {
  auto g = Tensor<double, DynShape<2>>::from_host(DynShape<2>(2, 2), {0.5, -1.0, 2.0, 0.25});
  auto p0 = Tensor<double, DynShape<2>>::from_host(DynShape<2>(2, 2), {1.0, 2.0, -3.0, 4.0});
  auto run = [&](auto make) {
    OneParam<double> a{p0.clone()}, b{p0.clone()};
    a.p.set_requires_grad();
    b.p.set_requires_grad();
    auto oa = make(a);
    set_grad(a, g);
    oa.step();
    auto ob = make(b);
    std::copy(a.p.data(), a.p.data() + 4, b.p.data());
    ob.load_state_dict(oa.state_dict());
    REQUIRE(ob.steps() == 1);
    set_grad(a, g);
    set_grad(b, g);
    oa.step();
    ob.step();
    REQUIRE(a.p.to_vector() == b.p.to_vector());
  };
  run([](auto& m) { return nn::SGD<double>(nn::trainable_parameters<double>(m), {.lr = 0.1, .momentum = 0.9}); });
  run([](auto& m) { return nn::AdamW<double>(nn::trainable_parameters<double>(m), {.lr = 0.01, .weight_decay = 0.1}); });
}

// Parameters without a gradient (frozen, or unused this step) are left untouched.
TEST_CASE("optim: skips parameters without grad") {
  OneParam<double> m{Tensor<double, DynShape<2>>::full(DynShape<2>(2, 2), 1.0)};
  m.p.set_requires_grad();
  nn::Adam<double> opt(nn::trainable_parameters<double>(m), {.lr = 0.1});
  opt.step();
  REQUIRE(m.p.to_vector() == std::vector<double>(4, 1.0));
  REQUIRE(opt.state_dict().tensors.empty());
}
