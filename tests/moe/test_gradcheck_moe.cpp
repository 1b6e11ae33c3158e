// Finite-difference gradient checks of the MoE / TTMM components (tests/support/gradcheck.hpp).
// Discrete choices (top-k picks, capacity, sparse selection) are constants of the function; random
// draws lie far from their switching points with overwhelming probability at h = 1e-6.

#include <memory>

#include "gradcheck.hpp"
#include "ttmoe/moe/aux_losses.hpp"
#include "ttmoe/moe/cosine_router.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/moe_layernorm.hpp"
#include "ttmoe/moe/sparse_softmax.hpp"

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {

/// Flattens and concatenates outputs so one check covers all of them.
template <class... Ts>
Tensor<double, DynShape<1>> flat_cat(const Ts&... ts) {
  std::vector<Tensor<double, DynShape<1>>> parts{ts.reshape(DynShape<1>(ts.numel()))...};
  return concat<0>(parts);
}

/// MoE-LayerNorm with the straight-through denominator frozen at the base point (README, self-check):
/// the first (recorded) call of a draw computes stopgrad(p_top); the finite-difference calls reuse it.
Output moe_ln(const Inputs& in, bool per_token, std::shared_ptr<Tensor<double, DynShape<2>>> denom) {
  moe::MoELayerNorm<double> m;
  auto x = in.get<3>(0);
  const index_t Dm = x.extent(2);
  auto rng = in.rng(7);
  std::vector<double> w(Dm), b(Dm);
  for (auto& v : w) v = rng.uniform(0.5, 1.5);
  for (auto& v : b) v = rng.uniform(-0.5, 0.5);
  m.weight = Tensor<double, DynShape<1>>::from_host(DynShape<1>(Dm), w);
  m.bias = Tensor<double, DynShape<1>>::from_host(DynShape<1>(Dm), b);
  m.experts.weight_delta = in.get<2>(1);
  m.experts.bias_delta = in.get<2>(2);
  m.router.weight = in.get<2>(3);
  m.router.bias = in.get<1>(4);
  m.per_token = per_token;
  if (autograd::is_recording()) {
    autograd::NoGrad ng;
    m.forward(x);
    *denom = gather<1>(m.probs, m.top_index);
  }
  m.coefficient_denominator = *denom;
  auto y = m.forward(x);
  auto bl = m.balance_loss();
  return flat_cat(y, m.probs, bl);
}

Shapes moe_ln_shapes(Rng& r) {
  const index_t B = r.ext(2, 4), T = r.ext(1, 4), D = r.ext(2, 6), E = r.ext(2, 4);
  return {{B, T, D}, {E, D}, {E, D}, {E, D}, {E}};
}

}  // namespace

GRADCHECK_CASE("moe_layernorm") {
  auto d1 = std::make_shared<Tensor<double, DynShape<2>>>();
  auto d2 = std::make_shared<Tensor<double, DynShape<2>>>();
  return Case()
      .variant("per_sample", moe_ln_shapes, [d1](const Inputs& in) { return moe_ln(in, false, d1); })
      .variant("per_token", moe_ln_shapes, [d2](const Inputs& in) { return moe_ln(in, true, d2); })
      .repeat(3);
}

GRADCHECK_CASE("cosine_router") {
  return Case()
      .constant_input(4)
      .range_of(5, -1, 1)
      .variant(
          "train",
          [](Rng& r) {
            const index_t N = r.ext(2, 6), D = r.ext(2, 5), H = r.ext(2, 5), E = r.ext(2, 4);
            return Shapes{{N, D}, {H, D}, {H}, {H, E}, {N, E}, {}};
          },
          [](const Inputs& in) -> Output {
            moe::CosineRouter<double> c;
            c.proj.weight = in.get<2>(1);
            c.proj.bias = in.get<1>(2);
            c.codebook = in.get<2>(3);
            c.log_scale = in.get<0>(5);
            auto o = c.forward(in.get<2>(0), in.get<2>(4));
            return flat_cat(o.logits, o.probs, o.gates);
          })
      .repeat(3);
}

GRADCHECK_CASE("moe_aux_losses") {
  auto f = [](index_t k) {
    return [k](const Inputs& in) -> Output { return moe::gmoe_aux_losses(in.get<2>(0), in.get<2>(1), k).l_aux; };
  };
  auto shapes = [](Rng& r) {
    const index_t N = r.ext(3, 8), E = r.ext(3, 5);
    return Shapes{{N, E}, {N, E}};
  };
  return Case().constant_input(1).variant("k1", shapes, f(1)).variant("k2", shapes, f(2)).repeat(3);
}

GRADCHECK_CASE("lora") {
  return Case()
      .constant_input(3)
      .constant_input(4)
      .variant(
          "rank3",
          [](Rng& r) {
            const index_t B = r.ext(1, 3), T = r.ext(1, 3), I = r.ext(2, 6), O = r.ext(2, 6), R = r.ext(1, 3);
            return Shapes{{B, T, I}, {R, I}, {O, R}, {O, I}, {O}};
          },
          [](const Inputs& in) -> Output {
            moe::LoRALinear<double> l;
            l.weight = in.get<2>(3);
            l.bias = in.get<1>(4);
            l.lora_A.weight = in.get<2>(1);
            l.lora_B.weight = in.get<2>(2);
            l.scaling = 2.0;
            return l.forward(in.get<3>(0));
          });
}

GRADCHECK_CASE("sparse_softmax") {
  return Case()
      .range(-0.6, 0.6)
      .variant(
          "weights",
          [](Rng& r) {
            const index_t Q = r.ext(1, 3), K = r.ext(3, 8), d = r.ext(2, 4);
            return Shapes{{Q, d}, {K, d}};
          },
          [](const Inputs& in) -> Output {
            moe::SparseSoftmaxConfig cfg{0.5, 0.05, 3};
            return moe::sparse_softmax_weights(in.get<2>(0), in.get<2>(1), cfg).weights;
          })
      .repeat(4);
}
