#pragma once
// dispatch_rows(x, rows, part, row, k): a mixture of experts' dispatch, each expert's tokens gathered
// from x [N, D] into an [n_e, D] batch of its own, recorded as ONE node whose VJP adds every batch's
// gradient back into x's in one pass over the tokens: token n adds, for each of its k picks that an
// expert kept, that row of the expert's gradient (the combine's kernel, gated_rows, with unit gates).
// Why: an index_select per expert recorded one scatter per expert, each a pass over x's gradient
// (six per GMoE layer), the first after a zero fill of it. Backends without GatedRowsBackend get one
// index_select per expert, with the same results.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/core/recording.hpp"
#include "ttmoe/core/tensor.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::moe {

namespace detail {
/// dispatch_rows' node: the experts' batch gradients summed back into x's, one pass over the tokens.
template <class T, class D>
class DispatchRowsNode final : public autograd::Node {
 public:
  DispatchRowsNode(std::shared_ptr<autograd::GradMeta<T, D>> x, std::vector<std::shared_ptr<autograd::GradMeta<T, D>>> outs,
                   IndexTensor<DynShape<1>, D> part, IndexTensor<DynShape<1>, D> row, index_t n, index_t k, index_t width)
      : x_(std::move(x)), outs_(std::move(outs)), part_(std::move(part)), row_(std::move(row)), n_(n), k_(k), width_(width) {}
  void run() override {
    std::vector<const T*> g(outs_.size(), nullptr);  // experts without tokens or gradient add nothing
    bool any = false;
    for (std::size_t e = 0; e < outs_.size(); ++e)
      if (outs_[e] && outs_[e]->has_grad()) {
        g[e] = static_cast<const T*>(outs_[e]->grad_buffer()->data());
        any = true;
      }
    if (any) {
      const auto t = x_->target();
      Backend<D>::gated_rows(g.data(), part_.data(), row_.data(), static_cast<const T*>(nullptr),
                             t.fresh ? nullptr : t.data, t.data, width_, n_, k_);
    }
    for (auto& o : outs_)
      if (o && !o->retains_grad()) o->reset_grad();
  }
  const char* name() const noexcept override { return "dispatch_rows"; }

 private:
  std::shared_ptr<autograd::GradMeta<T, D>> x_;
  std::vector<std::shared_ptr<autograd::GradMeta<T, D>>> outs_;
  IndexTensor<DynShape<1>, D> part_, row_;
  index_t n_, k_, width_;
};
}  // namespace detail

/// Expert e's batch x[rows[e], :] for every e (undefined for an expert without rows). `part` and
/// `row` (N * k entries, pick q = n k + j of token n) say where each pick went: part[q] the expert
/// (-1: dropped), row[q] its row in that expert's batch; they must agree with `rows` (rows[part[q]]
/// [row[q]] = n, checked: ValueError naming the pick).
template <class T, class D>
std::vector<Tensor<T, DynShape<2>, D>> dispatch_rows(const Tensor<T, DynShape<2>, D>& x,
                                                     const std::vector<std::vector<std::int64_t>>& rows,
                                                     const std::vector<std::int64_t>& part,
                                                     const std::vector<std::int64_t>& row, index_t k) {
  const index_t N = x.extent(0), width = x.extent(1), E = index_t(rows.size());
  if (k < 1 || index_t(part.size()) != N * k || row.size() != part.size())
    throw ValueError("dispatch_rows: " + std::to_string(N) + " tokens x " + std::to_string(k) + " picks need as many " +
                     "parts and rows, got " + std::to_string(part.size()) + " and " + std::to_string(row.size()));
  std::size_t kept = 0;
  for (std::size_t q = 0; q < part.size(); ++q) {
    if (part[q] == -1) continue;
    const bool fits = part[q] >= 0 && part[q] < std::int64_t(E) && row[q] >= 0 &&
                      row[q] < std::int64_t(rows[std::size_t(part[q])].size());
    if (!fits || rows[std::size_t(part[q])][std::size_t(row[q])] != std::int64_t(q / std::size_t(k)))
      throw ValueError("dispatch_rows: pick " + std::to_string(q) + " (expert " + std::to_string(part[q]) + ", row " +
                       std::to_string(row[q]) + ") is not token " + std::to_string(q / std::size_t(k)) +
                       "'s place in its expert's rows");
    ++kept;
  }
  std::size_t listed = 0;
  for (const auto& r : rows) listed += r.size();
  if (listed != kept)
    throw ValueError("dispatch_rows: the experts list " + std::to_string(listed) + " rows but " + std::to_string(kept) +
                     " picks are kept");
  std::vector<Tensor<T, DynShape<2>, D>> out(rows.size());
  if constexpr (!GatedRowsBackend<D, T>) {
    for (std::size_t e = 0; e < rows.size(); ++e)
      if (!rows[e].empty())
        out[e] = index_select(x, IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(index_t(rows[e].size())), rows[e]));
    return out;
  } else {
    {
      autograd::NoGrad ng;  // one node for all the gathers: below
      for (std::size_t e = 0; e < rows.size(); ++e)
        if (!rows[e].empty())
          out[e] = index_select(x, IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(index_t(rows[e].size())), rows[e]));
    }
    if (should_record(x)) {
      std::vector<std::shared_ptr<autograd::GradMeta<T, D>>> metas(out.size());
      for (std::size_t e = 0; e < out.size(); ++e)
        if (out[e].defined()) metas[e] = out[e].make_output_meta();
      autograd::active_recorder()->push_node(std::make_unique<detail::DispatchRowsNode<T, D>>(
          x.meta(), std::move(metas), IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(N * k), part),
          IndexTensor<DynShape<1>, D>::from_host(DynShape<1>(N * k), row), N, k, width));
    }
    return out;
  }
}

}  // namespace ttmoe::moe
