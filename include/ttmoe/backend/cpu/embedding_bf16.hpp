#pragma once
// Token-embedding lookup from a BF16-resident table (io/bf16_matrix.hpp, issue #14): each id's row
// is widened to F32 as it is copied out. A tied Llama model then keeps ONE BF16 table that serves
// both the lookup and the LM head (linear_bf16.hpp), instead of an F32 copy twice its size.

#include <array>
#include <cstdint>
#include <string>

#include "ttmoe/core/error.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/io/bf16_matrix.hpp"

namespace ttmoe {

/// ids of any rank -> [ids..., table.cols] floats, row ids[...] of `table`; an id outside
/// [0, table.rows) is a ValueError naming it. Found by argument-dependent lookup from nn::Embedding.
template <class SI>
Tensor<float, DynShape<SI::rank + 1>, cpu> embedding_bf16(const Tensor<std::int64_t, SI, cpu>& ids, const io::Bf16Matrix& table) {
  std::array<index_t, SI::rank + 1> e{};
  const auto ei = ids.extents();
  for (std::size_t i = 0; i < SI::rank; ++i) e[i] = ei[i];
  e[SI::rank] = table.cols;
  Tensor<float, DynShape<SI::rank + 1>, cpu> out(DynShape<SI::rank + 1>::from_extents(e, "embedding_bf16"));
  const auto* id = ids.data();  // tensors are contiguous row-major
  float* y = out.data();
  for (index_t n = 0; n < ids.numel(); ++n) {
    if (id[n] < 0 || index_t(id[n]) >= table.rows)
      throw ValueError("embedding_bf16: id " + std::to_string(id[n]) + " is outside the table's " +
                       std::to_string(table.rows) + " rows");
    const std::uint16_t* row = table.bits + index_t(id[n]) * table.cols;
    for (index_t k = 0; k < table.cols; ++k) y[n * table.cols + k] = io::bf16_to_float(row[k]);
  }
  return out;
}

}  // namespace ttmoe
