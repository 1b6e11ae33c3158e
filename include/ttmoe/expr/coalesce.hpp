#pragma once
// Merges adjacent output dimensions that every operand walks contiguously (and drops extents of 1),
// so a same-shape expression over [8, 197, 768] runs as one flat loop and a bias broadcast over
// [B*T, D] as rows of D. The result keeps rank R: merged dimensions become leading extents of 1.

#include <array>

#include "ttmoe/core/config.hpp"

namespace ttmoe::expr {

namespace detail {
/// coalesce for a rank R >= 1.
template <std::size_t R, class K>
void coalesce_ranked(std::array<index_t, R>& ext, K& k) {
  // Gather every leaf's stride array.
  std::array<index_t, R>* strides[64];
  std::size_t nleaves = 0;
  k.visit_leaves([&](auto& leaf) {
    if (nleaves < 64) strides[nleaves] = &leaf.stride;
    ++nleaves;
  });
  if (nleaves > 64) return;  // absurdly large expression: evaluate uncoalesced (still correct)

  std::array<index_t, R> new_ext{};
  std::array<std::array<index_t, R>, 64> new_str{};
  std::size_t m = 0;  // number of kept dims
  for (std::size_t d = 0; d < R; ++d) {
    if (ext[d] == 1) continue;
    bool merge = m > 0;
    for (std::size_t l = 0; merge && l < nleaves; ++l)
      merge = new_str[l][m - 1] == (*strides[l])[d] * ext[d];
    if (merge) {
      new_ext[m - 1] *= ext[d];
      for (std::size_t l = 0; l < nleaves; ++l) new_str[l][m - 1] = (*strides[l])[d];
    } else {
      new_ext[m] = ext[d];
      for (std::size_t l = 0; l < nleaves; ++l) new_str[l][m] = (*strides[l])[d];
      ++m;
    }
  }
  // Right-align the kept dims; pad the front with extent 1.
  const std::size_t pad = R - m;
  for (std::size_t d = 0; d < R; ++d) ext[d] = d < pad ? 1 : new_ext[d - pad];
  for (std::size_t l = 0; l < nleaves; ++l)
    for (std::size_t d = 0; d < R; ++d) (*strides[l])[d] = d < pad ? 0 : new_str[l][d - pad];
  k.visit_leaves([&](auto& leaf) { leaf.inner_contiguous = leaf.stride[R - 1] == 1; });
}
}  // namespace detail

/// Coalesces `ext` (rank R) and the strides of every leaf of kernel `k` in place.
template <std::size_t R, class K>
void coalesce(std::array<index_t, R>& ext, K& k) {
  // Rank 0 has nothing to merge and its leaves stay contiguous (the kernels' default); skipping it also
  // keeps nvcc's #186 (`d < 0` with an unsigned bound) out of every rank-0 instantiation.
  if constexpr (R > 0) detail::coalesce_ranked(ext, k);
}

}  // namespace ttmoe::expr
