#pragma once
// Feed-forward blocks: Llama's SwiGLU MLP and timm's ViT Mlp (fc1 -> GELU -> fc2).

#include <array>
#include <cstdint>

#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/linear_group.hpp"
#include "ttmoe/ops/mlp.hpp"

namespace ttmoe::nn {

/// Activation choice for Mlp; timm ViT uses exact (erf) GELU.
enum class Activation { gelu, gelu_tanh, silu, relu };

/// Calls f with a value of the elementwise functor `act` names (op::gelu, op::gelu_tanh, ...).
template <class F>
decltype(auto) visit_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::gelu_tanh: return f(op::gelu_tanh{});
    case Activation::silu: return f(op::silu{});
    case Activation::relu: return f(op::relu{});
    case Activation::gelu: break;
  }
  return f(op::gelu{});
}

/// Applies `act` elementwise (a fused expression, evaluated).
template <class T, class S, class D>
Tensor<T, S, D> activate(Activation act, const Tensor<T, S, D>& x) {
  return visit_activation(act, [&]<class Act>(Act) { return Tensor<T, S, D>(expr::make_expr<Act>(x)); });
}

/// Llama MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
template <class T = float, class D = cpu>
struct SwiGLUMLP : Callable<SwiGLUMLP<T, D>> {
  Linear<T, D> gate_proj, up_proj, down_proj;

  SwiGLUMLP() = default;
  SwiGLUMLP(index_t dim, index_t hidden, std::uint64_t seed = 0)
      : gate_proj(dim, hidden, false, seed), up_proj(dim, hidden, false, seed + 1), down_proj(hidden, dim, false, seed + 2) {}

  template <class S>
  auto forward(const Tensor<T, S, D>& x) const {
    return down_proj(gated(x));
  }
  /// silu(gate_proj(x)) * up_proj(x), the two projections' adapters sharing one low-rank product
  /// with x (nn/linear_group.hpp).
  template <class S>
  Tensor<T, DynShape<S::rank>, D> gated(const Tensor<T, S, D>& x) const {
    auto [g, u] = linear_group(x, std::array<const Linear<T, D>*, 2>{&gate_proj, &up_proj});
    return silu(g) * u;
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("gate_proj", gate_proj);
    v.sub("up_proj", up_proj);
    v.sub("down_proj", down_proj);
  }
};

/// timm ViT Mlp: fc2(act(fc1(x))), with biases.
template <class T = float, class D = cpu>
struct Mlp : Callable<Mlp<T, D>> {
  Linear<T, D> fc1, fc2;
  Activation act = Activation::gelu;

  Mlp() = default;
  Mlp(index_t dim, index_t hidden, Activation act_ = Activation::gelu, std::uint64_t seed = 0)
      : fc1(dim, hidden, true, seed), fc2(hidden, dim, true, seed + 1), act(act_) {}

  template <class S>
  auto forward(const Tensor<T, S, D>& x) const {
    return fc2(activate(act, fc1(x)));
  }
  /// residual + fc2(act(fc1(x))) as one op (ops/mlp.hpp): the activation and the residual ride on
  /// the GEMMs' stores, forward and backward.
  template <class S, class R>
  Tensor<T, DynShape<S::rank>, D> forward(const Tensor<T, S, D>& x, const Tensor<T, R, D>& residual) const {
    return visit_activation(act, [&]<class Act>(Act) {
      return fused_mlp<Act>(x, fc1.weight, fc1.bias, fc2.weight, fc2.bias, residual);
    });
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("fc1", fc1);
    v.sub("fc2", fc2);
  }
};

}  // namespace ttmoe::nn
