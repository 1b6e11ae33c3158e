#pragma once
// timm PatchEmbed: Conv2d(C, D, kernel P, stride P) then flatten(2).transpose(1, 2). Non-overlapping
// patches make the convolution one GEMM: x is unfolded to [B*N, C*P*P] (reshape + permute), and the
// conv weight [D, C, P, P] is viewed as [D, C*P*P] (the view routes its gradient back).

#include <cstdint>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/callable.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"

namespace ttmoe::nn {

/// Image to patch tokens; output [B, N, D] with patches in row-major grid order.
template <class T = float, class D = cpu>
struct PatchEmbed : Callable<PatchEmbed<T, D>> {
  struct Proj {
    Tensor<T, DynShape<4>, D> weight;  ///< [D, C, P, P]
    Tensor<T, DynShape<1>, D> bias;    ///< [D]
    template <class V>
    void visit_parameters(V& v) {
      v("weight", weight);
      v("bias", bias);
    }
  } proj;
  index_t patch = 16;

  PatchEmbed() = default;
  /// Conv2d-style init (Kaiming-uniform, fan_in = C*P*P).
  PatchEmbed(index_t in_chans, index_t embed_dim, index_t patch_size, std::uint64_t seed = 0) : patch(patch_size) {
    proj.weight = Tensor<T, DynShape<4>, D>(DynShape<4>(embed_dim, in_chans, patch_size, patch_size));
    proj.bias = Tensor<T, DynShape<1>, D>(DynShape<1>(embed_dim));
    const double b = kaiming_uniform_bound(in_chans * patch_size * patch_size);
    uniform_(proj.weight, b, seed);
    uniform_(proj.bias, b, seed ^ 0x9E3779B97F4A7C15ull);
    proj.weight.set_requires_grad();
    proj.bias.set_requires_grad();
  }

  /// x [B, C, H, W] (H, W multiples of P) -> [B, (H/P)*(W/P), D].
  template <class S>
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, S, D>& x) const {
    static_assert(S::rank == 4, "PatchEmbed: x is [B, C, H, W]");
    const index_t B = x.extent(0), C = x.extent(1), H = x.extent(2), W = x.extent(3), P = patch;
    if (H % P || W % P || C != proj.weight.extent(1))
      throw ShapeError("PatchEmbed: input " + x.shape().to_string() + " does not fit weight " +
                       proj.weight.shape().to_string());
    const index_t gh = H / P, gw = W / P, Dm = proj.weight.extent(0);
    auto x6 = x.reshape(DynShape<6>(B, C, gh, P, gw, P));
    auto cols = permute<0, 2, 4, 1, 3, 5>(x6).reshape(DynShape<2>(B * gh * gw, C * P * P));
    auto w2 = proj.weight.reshape(DynShape<2>(Dm, C * P * P));
    Tensor<T, DynShape<2>, D> y = matmul<false, true>(cols, w2) + proj.bias;
    return y.reshape(DynShape<3>(B, gh * gw, Dm));
  }

  template <class V>
  void visit_parameters(V& v) {
    v.sub("proj", proj);
  }
};

}  // namespace ttmoe::nn
