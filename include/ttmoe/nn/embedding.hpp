#pragma once
// nn.Embedding: rows of weight [V, D] picked by integer ids; index_select accumulates the gradient
// of repeated ids.

#include <cstdint>

#include <string>
#include <type_traits>

#include "ttmoe/core/error.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/io/bf16_matrix.hpp"
#include "ttmoe/nn/bf16_resident.hpp"
#include "ttmoe/nn/init.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// Token embedding table [V, D] (HF `embed_tokens.weight`); N(0, 1) init like torch.
template <class T = float, class D = cpu>
struct Embedding {
  Tensor<T, DynShape<2>, D> weight;  ///< [num_embeddings, dim]
  /// Inference-only BF16 table [num_embeddings, dim]; when defined, `weight` is undefined and the
  /// lookup widens rows from it (backend/cpu/embedding_bf16.hpp, CPU, float). A tied LM head
  /// reads the same bits. Recording such a lookup on a tape is an error naming the table.
  io::Bf16Matrix weight_bf16;

  Embedding() = default;
  Embedding(index_t num_embeddings, index_t dim, std::uint64_t seed = 0) : weight(DynShape<2>(num_embeddings, dim)) {
    normal_(weight, 1.0, seed);  // torch.nn.Embedding default init
    weight.set_requires_grad();
  }

  /// Makes `table` the embedding (inference only from then on) and frees the F32 weight; `name`
  /// (e.g. "model.embed_tokens") labels the table in later errors.
  void adopt_weight_bf16(io::Bf16Matrix table, std::string name) {
    if constexpr (!std::is_same_v<T, float> || !std::is_same_v<D, cpu>)
      throw ValueError("nn::Embedding " + name + ": a BF16-resident table needs float on the CPU");
    weight_bf16 = std::move(table);
    weight = Tensor<T, DynShape<2>, D>{};
    bf16_name_ = std::move(name);
  }

  /// ids of any rank R -> [ids..., dim].
  template <class SI>
  Tensor<T, DynShape<SI::rank + 1>, D> forward(const IndexTensor<SI, D>& ids) const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<D, cpu>)
      if (weight_bf16.defined()) {
        refuse_recording_bf16("nn::Embedding", bf16_name_);
        return embedding_bf16(ids, weight_bf16);
      }
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

  /// Visits the F32 table (skipped while undefined, i.e. while the table is BF16-resident).
  template <class V>
  void visit_parameters(V& v) {
    v("weight", weight);
  }

 private:
  std::string bf16_name_;  ///< the table's name in BF16 errors
};

}  // namespace ttmoe::nn
