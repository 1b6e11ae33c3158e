#pragma once
// nn.Embedding: rows of weight [V, D] picked by integer ids; index_select accumulates the gradient
// of repeated ids.

#include <cstdint>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// Token embedding table [V, D] (HF `embed_tokens.weight`); N(0, 1) init like torch.
template <class T = float, class D = cpu>
struct Embedding {
  Tensor<T, DynShape<2>, D> weight;  ///< [num_embeddings, dim]

  Embedding() = default;
  Embedding(index_t num_embeddings, index_t dim, std::uint64_t seed = 0) : weight(DynShape<2>(num_embeddings, dim)) {
    normal_(weight, 1.0, seed);  // torch.nn.Embedding default init
    weight.set_requires_grad();
  }

  /// ids of any rank R -> [ids..., dim].
  template <class SI>
  Tensor<T, DynShape<SI::rank + 1>, D> forward(const IndexTensor<SI, D>& ids) const {
    auto flat = ids.reshape(DynShape<1>(ids.numel()));
    auto rows = index_select(weight, flat);
    std::array<index_t, SI::rank + 1> e{};
    const auto ei = ids.extents();
    for (std::size_t i = 0; i < SI::rank; ++i) e[i] = ei[i];
    e[SI::rank] = weight.extent(1);
    return rows.reshape(DynShape<SI::rank + 1>::from_extents(e));
  }
  template <class SI>
  auto operator()(const IndexTensor<SI, D>& ids) const {
    return forward(ids);
  }

  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
  }
};

}  // namespace ttmoe::nn
