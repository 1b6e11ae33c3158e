// Central-difference gradient checks (double) for LayerNorm, RMSNorm, attention, RoPE and
// PatchEmbed: independent of the PyTorch fixtures, so a shared mistake cannot hide. Each checks the
// gradient of L = sum(f(x) * w) (fixed random w) w.r.t. the input and every parameter.
// Tolerance: 1e-6 relative to max(1, |numeric|) with step 1e-6.

#include <random>

#include "layers_common.hpp"

using namespace ttmoe;

namespace {

template <class S>
Tensor<double, S> randn(const S& s, std::uint64_t seed) {
  Tensor<double, S> t(s);
  std::mt19937_64 g(seed);
  std::normal_distribution<double> n(0, 1);
  for (index_t i = 0; i < t.numel(); ++i) t.data()[i] = n(g);
  return t;
}

/// Compares autograd gradients of `loss()` w.r.t. each flat tensor in `leaves` with central differences.
template <class LossFn>
void gradcheck(LossFn loss, std::vector<Tensor<double, Shape<dyn>>> leaves, double eps = 1e-6, double tol = 1e-6) {
  for (auto& l : leaves) l.zero_grad();
  {
    autograd::Tape tape;
    auto L = loss();
    autograd::backward(tape, L);
  }
  std::vector<std::vector<double>> grads;
  for (auto& l : leaves) {
    REQUIRE(l.grad().defined());
    grads.push_back(l.grad().to_vector());
  }
  autograd::NoGrad ng;
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    double* p = leaves[k].data();
    for (index_t i = 0; i < leaves[k].numel(); ++i) {
      const double keep = p[i];
      p[i] = keep + eps;
      const double up = loss().item();
      p[i] = keep - eps;
      const double dn = loss().item();
      p[i] = keep;
      const double num = (up - dn) / (2 * eps);
      INFO("leaf " << k << " element " << i << ": autograd " << grads[k][i] << " numeric " << num);
      REQUIRE(std::abs(grads[k][i] - num) <= tol * std::max(1.0, std::abs(num)));
    }
  }
}

/// Flat views of a module's parameters plus extra leaves.
template <class M>
std::vector<Tensor<double, Shape<dyn>>> leaves_of(M& m, std::vector<Tensor<double, Shape<dyn>>> extra) {
  for (auto& p : nn::named_parameters<double>(m)) extra.push_back(p.flat);
  return extra;
}

}  // namespace

TEST_CASE("gradcheck: layernorm", "[gradcheck]") {
  nn::LayerNorm<double> ln(6);
  ln.weight = randn(DynShape<1>(6), 1).set_requires_grad();
  ln.bias = randn(DynShape<1>(6), 2).set_requires_grad();
  auto x = randn(DynShape<3>(2, 3, 6), 3).set_requires_grad();
  auto w = randn(DynShape<3>(2, 3, 6), 4);
  gradcheck([&] { return sum_all(ln(x) * w); }, leaves_of(ln, {x.flat_view()}));
}

TEST_CASE("gradcheck: rmsnorm", "[gradcheck]") {
  nn::RMSNorm<double> rn(5);
  rn.weight = randn(DynShape<1>(5), 1).set_requires_grad();
  auto x = randn(DynShape<2>(4, 5), 3).set_requires_grad();
  auto w = randn(DynShape<2>(4, 5), 4);
  gradcheck([&] { return sum_all(rn(x) * w); }, leaves_of(rn, {x.flat_view()}));
}

TEST_CASE("gradcheck: attention", "[gradcheck]") {
  nn::Attention<double> attn(8, 2, 7);
  auto x = randn(DynShape<3>(2, 3, 8), 3).set_requires_grad();
  auto w = randn(DynShape<3>(2, 3, 8), 4);
  gradcheck([&] { return sum_all(attn(x) * w); }, leaves_of(attn, {x.flat_view()}));
}

TEST_CASE("gradcheck: attention_gqa (llama)", "[gradcheck]") {
  nn::LlamaAttention<double> attn(8, 4, 2, 9);
  auto x = randn(DynShape<3>(1, 3, 8), 3).set_requires_grad();
  auto w = randn(DynShape<3>(1, 3, 8), 4);
  auto pos = IndexTensor<DynShape<1>>::from_host(DynShape<1>(3), {0, 5, 6});
  gradcheck([&] { return sum_all(attn(x, pos) * w); }, leaves_of(attn, {x.flat_view()}));
}

TEST_CASE("gradcheck: rope", "[gradcheck]") {
  auto x = randn(DynShape<4>(2, 2, 3, 4), 3).set_requires_grad();
  auto w = randn(DynShape<4>(2, 2, 3, 4), 4);
  auto pos = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 3), {0, 1, 2, 10, 11, 300});
  gradcheck([&] { return sum_all(nn::rope(x, pos) * w); }, {x.flat_view()});
}

TEST_CASE("gradcheck: patch_embed", "[gradcheck]") {
  nn::PatchEmbed<double> pe(2, 3, 2, 5);
  auto x = randn(DynShape<4>(2, 2, 4, 4), 3).set_requires_grad();
  auto w = randn(DynShape<3>(2, 4, 3), 4);
  gradcheck([&] { return sum_all(pe(x) * w); }, leaves_of(pe, {x.flat_view()}));
}
