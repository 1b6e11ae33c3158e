#pragma once
// gated_combine(parts, part, row, gates): a mixture of experts' combine, y[i, :] = sum over the picks
// q = i k + j of gates[i, j] * parts[part[q]][row[q], :] (parts: each expert's output rows; part[q] =
// -1 for a pick the capacity limit dropped), as ONE recorded op. Why: stacking the experts' outputs
// (concat), reading the picks back in token order (index_select) and multiplying by the gates wrote
// and re-read two [N k, D] copies forward and took four passes backward (the product's VJP, the gates'
// row sums, the scatter's zero fill and adds, the split of the stack); on a backend with
// GatedRowsBackend it is one pass each way, and the VJP stores each part's gradient row by row with
// no zero fill, since every row of every part is read by exactly one pick.
// VJP: d parts[part[q]][row[q], :] = gates[q] g[q / k, :], d gates[q] = g[q / k, :] . parts[part[q]][row[q], :].

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/record.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

namespace detail {
/// Throws ValueError unless part and row hold N * k entries, each kept pick names a row of its part,
/// and every row of every part is read by exactly one pick; ShapeError unless the parts are
/// [rows, width] with one width and gates is [N, k].
template <class T, class D>
void check_gated_combine(const std::vector<Tensor<T, DynShape<2>, D>>& parts, const std::vector<std::int64_t>& part,
                         const std::vector<std::int64_t>& row, index_t picks, index_t width) {
  if (index_t(part.size()) != picks || index_t(row.size()) != picks)
    throw ValueError("gated_combine: the gates need " + std::to_string(picks) + " picks, got " +
                     std::to_string(part.size()) + " parts and " + std::to_string(row.size()) + " rows");
  std::vector<std::vector<char>> read(parts.size());
  for (std::size_t p = 0; p < parts.size(); ++p) {
    if (parts[p].extent(1) != width)
      throw ShapeError("gated_combine: part " + std::to_string(p) + " " + parts[p].shape().to_string() +
                       " is not " + std::to_string(width) + " wide like part 0");
    read[p].assign(std::size_t(parts[p].extent(0)), 0);
  }
  for (std::size_t q = 0; q < part.size(); ++q) {
    const std::int64_t p = part[q];
    if (p == -1) continue;
    if (p < -1 || p >= std::int64_t(parts.size()) || row[q] < 0 || row[q] >= std::int64_t(read[std::size_t(p)].size()))
      throw ValueError("gated_combine: pick " + std::to_string(q) + " reads row " + std::to_string(row[q]) +
                       " of part " + std::to_string(p) + ", which does not exist (" + std::to_string(parts.size()) +
                       " parts)");
    if (read[std::size_t(p)][std::size_t(row[q])]++)
      throw ValueError("gated_combine: row " + std::to_string(row[q]) + " of part " + std::to_string(p) +
                       " is read by more than one pick");
  }
  for (std::size_t p = 0; p < parts.size(); ++p)
    for (std::size_t r = 0; r < read[p].size(); ++r)
      if (!read[p][r])
        throw ValueError("gated_combine: row " + std::to_string(r) + " of part " + std::to_string(p) +
                         " is read by no pick (every row must be read once)");
}
}  // namespace detail

/// y [N, D] = sum_j gates[:, j] * parts[part[q]][row[q], :] with q = n k + j, for gates [N, k], parts
/// [rows_p, D] and picks in (token, pick) order, part[q] = -1 for a dropped pick (adds nothing).
/// Every row of every part must be read by exactly one pick (an MoE layer's experts each hold their
/// kept picks once). Throws ValueError / ShapeError naming the first pick or part that breaks this.
/// A defined `residual` [N, D] is added in the same pass (r + y: a block's skip connection; its
/// gradient is the output's, handed on without a copy where possible).
template <class T, class D>
Tensor<T, DynShape<2>, D> gated_combine(const std::vector<Tensor<T, DynShape<2>, D>>& parts,
                                        const std::vector<std::int64_t>& part, const std::vector<std::int64_t>& row,
                                        const Tensor<T, DynShape<2>, D>& gates,
                                        const Tensor<T, DynShape<2>, D>& residual = {}) {
  if (parts.empty()) throw ValueError("gated_combine: no parts");
  const index_t N = gates.extent(0), k = gates.extent(1), width = parts[0].extent(1);
  detail::check_gated_combine(parts, part, row, N * k, width);
  if (residual.defined() && (residual.extent(0) != N || residual.extent(1) != width))
    throw ShapeError("gated_combine: the residual " + residual.shape().to_string() + " is not [" + std::to_string(N) +
                     ", " + std::to_string(width) + "]");
  if constexpr (!GatedRowsBackend<D, T>) {
    // The composition: the parts stacked with one zero row that dropped picks read, the picks read back
    // in (token, pick) order, times the gates, summed over the picks.
    std::vector<Tensor<T, DynShape<2>, D>> stack = parts;
    std::vector<std::int64_t> offset(parts.size() + 1, 0);
    for (std::size_t p = 0; p < parts.size(); ++p) offset[p + 1] = offset[p] + parts[p].extent(0);
    stack.push_back(Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(1, width)));
    std::vector<std::int64_t> src(part.size());
    for (std::size_t q = 0; q < part.size(); ++q)
      src[q] = part[q] < 0 ? offset.back() : offset[std::size_t(part[q])] + row[q];
    auto picked = index_select(concat<0>(stack), IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(N * k), src));
    Tensor<T, DynShape<2>, D> y;
    if (k == 1)
      y = Tensor<T, DynShape<2>, D>(picked * gates);
    else
      y = sum<1>(picked.reshape(DynShape<3>(N, k, width)) * gates.reshape(DynShape<3>(N, k, 1)));
    return residual.defined() ? Tensor<T, DynShape<2>, D>(residual + y) : y;
  } else {
    const auto part_t = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(N * k), part);
    const auto row_t = IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(N * k), row);
    std::vector<const T*> in(parts.size());
    bool parts_need_grad = false;
    for (std::size_t p = 0; p < parts.size(); ++p) {
      in[p] = parts[p].data();
      parts_need_grad = parts_need_grad || parts[p].requires_grad();
    }
    Tensor<T, DynShape<2>, D> out(DynShape<2>(N, width));
    Backend<D>::gated_rows(in.data(), part_t.data(), row_t.data(), gates.data(), residual.defined() ? residual.data() : nullptr,
                           out.data(), width, N, k);
    if (autograd::is_recording() && (parts_need_grad || gates.requires_grad() || residual.requires_grad())) {
      std::vector<std::shared_ptr<autograd::GradMeta<T, D>>> metas(parts.size());
      for (std::size_t p = 0; p < parts.size(); ++p) metas[p] = parts[p].meta();
      auto mg = gates.meta();
      auto mr = residual.defined() ? residual.meta() : nullptr;
      // The parts' values are read for the gates' gradient, the gates' for the parts'.
      std::vector<Tensor<T, DynShape<2>, D>> values;
      if (mg)
        for (const auto& x : parts) values.push_back(x.detach());
      const auto gate_values = parts_need_grad ? gates.detach() : Tensor<T, DynShape<2>, D>();
      record_with_output("gated_combine", out, [=](const T* g, auto& o) {
        std::vector<const T*> x(values.size());
        for (std::size_t p = 0; p < values.size(); ++p) x[p] = values[p].data();
        std::vector<T*> dx(metas.size(), nullptr);
        const auto add = std::make_unique<bool[]>(metas.size());  // all false
        for (std::size_t p = 0; p < metas.size(); ++p)
          if (metas[p]) {
            const auto t = metas[p]->target();
            dx[p] = t.data;
            add[p] = !t.fresh;
          }
        const auto tg = mg ? mg->target() : autograd::GradTarget<T>{nullptr, false};
        Backend<D>::gated_rows_vjp(g, mg ? x.data() : nullptr, part_t.data(), row_t.data(),
                                   parts_need_grad ? gate_values.data() : nullptr, parts_need_grad ? dx.data() : nullptr,
                                   add.get(), tg.data, !tg.fresh, width, N, k);
        if (mr) pass_gradient(*mr, o, g, N * width);  // last: the residual may take g's buffer over
      });
    }
    return out;
  }
}

}  // namespace ttmoe::moe
