#pragma once
// A residual branch under stochastic depth, x + drop_path(branch(x)), that runs the branch on the
// samples drop_path keeps only. A dropped sample's branch output is multiplied by 0, so computing it
// (forward GEMMs, and the backward through them) is wasted work: at timm's linear rates (GMoE: 0 to
// 0.1 over 12 blocks) that is ~5% of a training step's block FLOPs. The kept samples are gathered
// as contiguous runs (narrow + concat: with few drops, a handful of block copies), and the branch
// output goes back with zeros for the dropped runs; every piece is an existing differentiable op.
// Only for branches that treat samples independently (attention, a per-token MLP): a MoE-FFN whose
// tokens compete for expert capacity across the batch must see every sample (nn::drop_path).

#include <utility>
#include <vector>

#include "ttmoe/nn/dropout.hpp"
#include "ttmoe/ops/indexing.hpp"

namespace ttmoe::nn {

/// x + drop_path(branch(x), p, training, rng), with `branch` (a callable on a tensor of x's rank,
/// returning one of the same extents) run on the kept samples of the leading axis only. Draws from
/// `rng` exactly what drop_path draws (one key, before the branch runs), so the values and gradients
/// are drop_path's and a seeded run makes the same decisions.
template <class T, class S, class D, class Branch>
Tensor<T, DynShape<S::rank>, D> residual_drop_path(const Tensor<T, S, D>& x, double p, bool training, Rng& rng,
                                                    Branch&& branch) {
  using Out = Tensor<T, DynShape<S::rank>, D>;
  const Out xd = x;
  if (!training || p <= 0.0) return Out(xd + Out(branch(xd)));
  const index_t batch = x.extent(0);
  const std::vector<bool> keep = drop_path_keep(batch, p, rng);
  // Runs of equal flags along the batch: [start, end) with their flag.
  struct Run {
    index_t start, end;
    bool kept;
  };
  std::vector<Run> runs;
  index_t kept_count = 0;
  for (index_t b = 0; b < batch; ++b) {
    const bool k = keep[static_cast<std::size_t>(b)];
    kept_count += k ? 1 : 0;
    if (runs.empty() || runs.back().kept != k) runs.push_back({b, b + 1, k});
    else runs.back().end = b + 1;
  }
  if (kept_count == 0) return xd;  // every branch dropped: the residual alone
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  if (kept_count == batch) return Out(xd + Out(branch(xd)) * scale);
  std::vector<Out> kept_parts;
  for (const Run& r : runs)
    if (r.kept) kept_parts.push_back(narrow<0>(xd, r.start, r.end - r.start));
  const bool one_kept_run = kept_parts.size() == 1;
  const Out xk = one_kept_run ? kept_parts[0] : Out(concat<0>(kept_parts));
  const Out yk = branch(xk);
  // The branch output in batch order, zeros where a sample was dropped.
  std::vector<Out> parts;
  index_t row = 0;  // next row of yk
  for (const Run& r : runs) {
    const index_t n = r.end - r.start;
    if (r.kept) {
      parts.push_back(one_kept_run ? yk : Out(narrow<0>(yk, row, n)));
      row += n;
    } else {
      auto e = yk.extents();
      e[0] = n;
      parts.push_back(Out::zeros(DynShape<S::rank>::from_extents(e)));
    }
  }
  return Out(xd + Out(concat<0>(parts)) * scale);
}

}  // namespace ttmoe::nn
