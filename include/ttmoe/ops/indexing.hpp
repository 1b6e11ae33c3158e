#pragma once
// Index-driven ops, each with its VJP: index_select (rows by index: embeddings), gather and
// scatter_add along an axis, concat, narrow (a copied slice along any axis), transpose of the last
// two axes and general permute, one_hot, top-k along the last axis. Indices are int64 tensors and
// are range-checked on the host before use.

#include <cstdint>
#include <string>
#include <vector>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe {

/// Index tensors are int64, like PyTorch's.
template <ShapeType S, class D = cpu>
using IndexTensor = Tensor<std::int64_t, S, D>;

namespace detail {
template <class S, class D>
void check_indices(const IndexTensor<S, D>& idx, index_t bound, const char* op) {
  const auto v = idx.to_vector();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || static_cast<index_t>(v[i]) >= bound)
      throw ValueError(std::string(op) + ": index " + std::to_string(v[i]) + " at position " + std::to_string(i) +
                       " is outside [0, " + std::to_string(bound) + ")");
}
/// Checks an index along axis A of `data` (gather, scatter_add): the index has data's extents on every
/// other axis and its values lie in [0, data's extent along A). The error names the op, the data's
/// role in it and the axis ("gather: input [..] and index [..] differ outside the gather axis").
template <std::size_t A, class TD, class SI, class D>
void check_axis_index(const TD& data, const IndexTensor<SI, D>& idx, const char* op, const char* data_role,
                      const char* axis_role) {
  const auto ed = data.extents(), ei = idx.extents();
  for (std::size_t d = 0; d < ed.size(); ++d)
    if (d != A && ed[d] != ei[d])
      throw ShapeError(std::string(op) + ": " + data_role + " " + data.shape().to_string() + " and index " +
                       idx.shape().to_string() + " differ outside the " + axis_role + " axis");
  check_indices(idx, ed[A], op);
}
}  // namespace detail

/// Repeats each index `row` times (index per element of a row) — the layout gather_axis reads.
template <ShapeType SI, class D>
IndexTensor<DynShape<1>, D> broadcast_rows(const IndexTensor<SI, D>& idx, index_t row) {
  const auto v = idx.to_vector();
  std::vector<std::int64_t> full(v.size() * row);
  for (std::size_t i = 0; i < v.size(); ++i)
    for (index_t k = 0; k < row; ++k) full[i * row + k] = v[i];
  return IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(full.size()), full);
}

/// out[i, ...] = x[idx[i], ...]: selects rows of the leading axis (embedding lookup).
template <class T, ShapeType S, class D, ShapeType SI>
auto index_select(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& idx) {
  static_assert(SI::rank == 1, "ttmoe: index_select takes a rank-1 index tensor");
  detail::check_indices(idx, x.extent(0), "index_select");
  using SO = shape_set_t<S, 0, SI::static_extents[0]>;
  auto e = x.extents();
  const index_t row = x.extent(0) == 0 ? 0 : x.numel() / x.extent(0), m = idx.extent(0);
  e[0] = m;
  Tensor<T, SO, D> out(SO::from_extents(e, "index_select"));
  if constexpr (RowGatherBackend<D, T>) {
    // Whole rows by the [m] index itself: no per-element index (m x row int64s) to build and keep.
    Backend<D>::gather_rows(x.data(), idx.data(), out.data(), row, m);
    if (should_record(x)) {
      auto mx = x.meta();
      record("index_select", out, [mx, idx, row, m](const T* g) {
        Backend<D>::scatter_add_rows(mx->accumulate_target(), g, idx.data(), row, m);
      });
    }
  } else {
    Backend<D>::gather_axis(x.data(), broadcast_rows(idx, row).data(), out.data(), 1, x.extent(0), row, m);
    if (should_record(x)) {
      auto mx = x.meta();
      const index_t n = x.extent(0);
      auto full_idx = broadcast_rows(idx, row);
      record("index_select", out, [mx, full_idx, n, row, m](const T* g) {
        Backend<D>::scatter_add_axis(mx->accumulate_target(), g, full_idx.data(), 1, n, row, m);
      });
    }
  }
  return out;
}

/// torch.gather: out[.., j, ..] = x[.., idx[.., j, ..], ..] along Axis; idx has x's rank and matches
/// x's extents except along Axis.
template <int Axis, class T, ShapeType S, class D, ShapeType SI>
auto gather(const Tensor<T, S, D>& x, const IndexTensor<SI, D>& idx) {
  static_assert(SI::rank == S::rank, "ttmoe: gather needs an index tensor of the input's rank");
  constexpr std::size_t A = axis_v<Axis, S::rank>;
  detail::check_axis_index<A>(x, idx, "gather", "input", "gather");
  const auto ex = x.extents(), ei = idx.extents();
  Tensor<T, SI, D> out(idx.shape());
  const index_t outer = extent_product(ex, 0, A), inner = extent_product(ex, A + 1, S::rank);
  const index_t n = ex[A], m = ei[A];
  Backend<D>::gather_axis(x.data(), idx.data(), out.data(), outer, n, inner, m);
  if (should_record(x)) {
    auto mx = x.meta();
    record("gather", out, [mx, idx, outer, n, inner, m](const T* g) {
      Backend<D>::scatter_add_axis(mx->accumulate_target(), g, idx.data(), outer, n, inner, m);
    });
  }
  return out;
}

/// out = base + scatter of src along Axis at idx (torch.Tensor.scatter_add): out[.., idx[.., j, ..], ..] += src[.., j, ..].
template <int Axis, class T, ShapeType S, class D, ShapeType SI, ShapeType SS>
auto scatter_add(const Tensor<T, S, D>& base, const IndexTensor<SI, D>& idx, const Tensor<T, SS, D>& src) {
  constexpr std::size_t A = axis_v<Axis, S::rank>;
  const auto eb = base.extents(), ei = idx.extents();
  if (src.extents() != ei) throw ShapeError("scatter_add: index " + idx.shape().to_string() + " and source " + src.shape().to_string() + " differ");
  detail::check_axis_index<A>(base, idx, "scatter_add", "base", "scatter");
  Tensor<T, S, D> out(base.shape());
  D::template copy<T>(out.data(), base.data(), base.numel());
  const index_t outer = extent_product(eb, 0, A), inner = extent_product(eb, A + 1, S::rank);
  const index_t n = eb[A], m = ei[A];
  Backend<D>::scatter_add_axis(out.data(), src.data(), idx.data(), outer, n, inner, m);
  if (should_record(base, src)) {
    auto mb = base.meta(), ms = src.meta();
    const index_t nb = base.numel(), ns = src.numel();
    record("scatter_add", out, [mb, ms, idx, outer, n, inner, m, nb, ns](const T* g) {
      if (mb) Backend<D>::add_inplace(mb->accumulate_target(), g, nb);
      if (ms) {
        auto tmp = make_buffer<T, D>(ns);
        Backend<D>::gather_axis(g, idx.data(), tmp->data(), outer, n, inner, m);
        Backend<D>::add_inplace(ms->accumulate_target(), tmp->data(), ns);
      }
    });
  }
  return out;
}

/// Concatenates tensors of equal rank along Axis (other extents must match).
template <int Axis, class T, ShapeType S, class D>
auto concat(const std::vector<Tensor<T, S, D>>& parts) {
  constexpr std::size_t A = axis_v<Axis, S::rank>;
  using SO = shape_set_t<S, A, dyn>;
  if (parts.empty()) throw ValueError("concat: no tensors");
  auto e = parts[0].extents();
  index_t total = 0;
  for (const auto& p : parts) {
    auto ep = p.extents();
    for (std::size_t d = 0; d < S::rank; ++d)
      if (d != A && ep[d] != e[d])
        throw ShapeError("concat: shapes " + parts[0].shape().to_string() + " and " + p.shape().to_string() +
                         " differ outside the concatenation axis");
    total += ep[A];
  }
  e[A] = total;
  Tensor<T, SO, D> out(SO::from_extents(e, "concat"));
  const index_t outer = extent_product(e, 0, A), inner = extent_product(e, A + 1, S::rank);
  index_t offset = 0;
  std::vector<std::pair<std::shared_ptr<typename Tensor<T, S, D>::Meta>, std::array<index_t, 2>>> metas;
  for (const auto& p : parts) {
    const index_t len = p.extent(A) * inner;
    Backend<D>::copy_blocks(out.data() + offset, total * inner, p.data(), len, outer, len, false);
    if (p.requires_grad()) metas.push_back({p.meta(), {offset, len}});
    offset += len;
  }
  if (autograd::is_recording() && !metas.empty()) {
    record("concat", out, [metas, outer, total, inner](const T* g) {
      for (const auto& [m, ol] : metas)
        Backend<D>::copy_blocks(m->accumulate_target(), ol[1], g + ol[0], total * inner, outer, ol[1], true);
    });
  }
  return out;
}

/// Copy of x[.., start:start+length, ..] along Axis.
template <int Axis, class T, ShapeType S, class D>
auto narrow(const Tensor<T, S, D>& x, index_t start, index_t length) {
  constexpr std::size_t A = axis_v<Axis, S::rank>;
  using SO = shape_set_t<S, A, dyn>;
  auto e = x.extents();
  if (start + length > e[A])
    throw ValueError("narrow: range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                     ") beyond extent " + std::to_string(e[A]) + " of axis " + std::to_string(A) + " in " +
                     x.shape().to_string());
  const index_t outer = extent_product(e, 0, A), inner = extent_product(e, A + 1, S::rank), n = e[A];
  e[A] = length;
  Tensor<T, SO, D> out(SO::from_extents(e, "narrow"));
  Backend<D>::copy_blocks(out.data(), length * inner, x.data() + start * inner, n * inner, outer, length * inner, false);
  if (should_record(x)) {
    auto m = x.meta();
    record("narrow", out, [m, outer, inner, n, start, length](const T* g) {
      Backend<D>::copy_blocks(m->accumulate_target() + start * inner, n * inner, g, length * inner, outer,
                              length * inner, true);
    });
  }
  return out;
}

namespace detail {
template <class S, std::size_t... P>
struct permute_holder {
  static constexpr std::array<index_t, S::rank> value{S::static_extents[P]...};
};
}  // namespace detail

/// Permutes axes: out extent d is x's extent P[d] (a copy).
template <std::size_t... P, class T, ShapeType S, class D>
auto permute(const Tensor<T, S, D>& x) {
  static_assert(sizeof...(P) == S::rank, "ttmoe: permute needs one entry per axis");
  using SO = shape_from_array_t<detail::permute_holder<S, P...>>;
  constexpr std::array<std::size_t, S::rank> perm{P...};
  const auto e = x.extents();
  std::array<index_t, S::rank> eo{};
  for (std::size_t d = 0; d < S::rank; ++d) eo[d] = e[perm[d]];
  Tensor<T, SO, D> out(SO::from_extents(eo, "permute"));
  Backend<D>::permute(x.data(), out.data(), e, perm, false);
  if (should_record(x)) {
    std::array<std::size_t, S::rank> inv{};
    for (std::size_t d = 0; d < S::rank; ++d) inv[perm[d]] = d;
    auto m = x.meta();
    record("permute", out, [m, eo, inv](const T* g) {
      Backend<D>::permute(g, m->accumulate_target(), eo, inv, true);
    });
  }
  return out;
}

namespace detail {
template <class S, class Seq>
struct transpose_last2_impl;
template <class S, std::size_t... I>
struct transpose_last2_impl<S, std::index_sequence<I...>> {
  template <class T, class D>
  static auto run(const Tensor<T, S, D>& x) {
    constexpr std::size_t R = S::rank;
    return permute<(I + 2 < R ? I : (I == R - 2 ? R - 1 : R - 2))...>(x);
  }
};
}  // namespace detail

/// Swaps the last two axes (a copy).
template <class T, ShapeType S, class D>
auto transpose(const Tensor<T, S, D>& x) {
  static_assert(S::rank >= 2, "ttmoe: transpose needs rank >= 2");
  return detail::transpose_last2_impl<S, std::make_index_sequence<S::rank>>::run(x);
}

/// one_hot(idx, C): float tensor [.., C] with 1 at each index (not differentiable).
template <class T = float, ShapeType SI, class D>
auto one_hot(const IndexTensor<SI, D>& idx, index_t num_classes) {
  detail::check_indices(idx, num_classes, "one_hot");
  constexpr std::size_t R = SI::rank + 1;
  std::array<index_t, R> e{};
  for (std::size_t d = 0; d < SI::rank; ++d) e[d] = idx.extent(d);
  e[R - 1] = num_classes;
  using ST = DynShape<R>;
  std::vector<T> host(extent_product(e, 0, R), T(0));
  const auto v = idx.to_vector();
  for (std::size_t i = 0; i < v.size(); ++i) host[i * num_classes + static_cast<index_t>(v[i])] = T(1);
  return Tensor<T, ST, D>::from_host(ST::from_extents(e), host);
}

/// The k largest values along the last axis (descending, ties by lower index) and their indices.
/// Values are differentiable (the gradient goes back to the selected positions).
template <class T, ShapeType S, class D>
auto topk(const Tensor<T, S, D>& x, index_t k) {
  constexpr std::size_t R = S::rank;
  using SO = shape_set_t<S, R - 1, dyn>;
  const index_t n = x.extent(R - 1);
  if (k > n) throw ValueError("topk: k = " + std::to_string(k) + " exceeds the last extent of " + x.shape().to_string());
  auto e = x.extents();
  const index_t rows = n == 0 ? 0 : x.numel() / n;
  e[R - 1] = k;
  Tensor<T, SO, D> values(SO::from_extents(e, "topk"));
  IndexTensor<SO, D> indices(values.shape());
  Backend<D>::topk(x.data(), values.data(), indices.data(), rows, n, k);
  if (should_record(x)) {
    auto m = x.meta();
    record("topk", values, [m, indices, rows, n, k](const T* g) {
      Backend<D>::scatter_add_axis(m->accumulate_target(), g, indices.data(), rows, n, 1, k);
    });
  }
  return std::pair{values, indices};
}

}  // namespace ttmoe
