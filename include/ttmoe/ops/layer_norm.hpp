#pragma once
// LayerNorm over the last axis as ONE differentiable op on any device, with affine parameters that
// may differ per group of consecutive rows: row n uses gamma/beta row n / rows_per_group. A plain
// LayerNorm is one group; MoETTA's MoE-LayerNorm is one group per sample (rows_per_group = tokens)
// or per token (rows_per_group = 1).
//
// Composed from core ops, LayerNorm takes ~6 passes over [N, D] and keeps several [N, D]
// intermediates for its backward; as one op the forward is one sweep per row (Backend::layer_norm)
// and the VJP keeps only a handle on x (which the caller holds anyway: in a pre-norm transformer it
// is the residual stream) plus per-row mean and rstd, recomputing xhat when it runs.

#include <string>

#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/record.hpp"

namespace ttmoe {

/// y = (x - mean) * rstd * gamma[g] + beta[g] over the last axis of x (biased variance,
/// rstd = 1 / sqrt(var + eps)), where g = row / rows_per_group and gamma / beta hold one row of
/// D values per group (any shape with that many elements, e.g. [D] for one group or [G, D]).
/// Either may be undefined (no scale / no shift). The output keeps x's shape type. Records one
/// VJP named `name` giving dx and, only for the operands that require grad, dgamma / dbeta.
template <class T, ShapeType S, class D, ShapeType SW>
Tensor<T, S, D> layer_norm_rows(const Tensor<T, S, D>& x, const Tensor<T, SW, D>& gamma, const Tensor<T, SW, D>& beta,
                                index_t rows_per_group, T eps, const char* name = "layer_norm") {
  static_assert(S::rank >= 1, "ttmoe: layer_norm normalises the last axis of a tensor of rank >= 1");
  const index_t Dm = x.extent(S::rank - 1);
  const index_t N = Dm ? x.numel() / Dm : 0;
  auto shapes = [&] {
    return "x " + x.shape().to_string() + ", gamma " + (gamma.defined() ? gamma.shape().to_string() : "-") +
           ", beta " + (beta.defined() ? beta.shape().to_string() : "-") + ", " + std::to_string(rows_per_group) +
           " rows per group";
  };
  if (rows_per_group == 0 || N % rows_per_group != 0)
    throw ShapeError(std::string(name) + ": the rows of x do not split into groups: " + shapes());
  const index_t G = N / rows_per_group;
  if ((gamma.defined() && gamma.numel() != G * Dm) || (beta.defined() && beta.numel() != G * Dm))
    throw ShapeError(std::string(name) + ": affine parameters need " + std::to_string(G) + " x " +
                     std::to_string(Dm) + " values: " + shapes());
  Tensor<T, S, D> y(x.shape());
  const bool rec = should_record(x, gamma, beta);
  // Per-row (mean, rstd) are kept only when a backward will read them.
  Tensor<T, DynShape<2>, D> stats = rec ? Tensor<T, DynShape<2>, D>(DynShape<2>(N, 2)) : Tensor<T, DynShape<2>, D>();
  const T* gp = gamma.defined() ? gamma.data() : nullptr;
  const T* bp = beta.defined() ? beta.data() : nullptr;
  if (N > 0)
    Backend<D>::layer_norm(x.data(), y.data(), rec ? stats.data() : nullptr, gp, bp, N, Dm, rows_per_group, eps);
  if (rec) {
    auto mx = x.requires_grad() ? x.meta() : nullptr;
    auto mg = gamma.defined() && gamma.requires_grad() ? gamma.meta() : nullptr;
    auto mb = beta.defined() && beta.requires_grad() ? beta.meta() : nullptr;
    Tensor<T, S, D> xs = x;  // handle only: x's storage is what the VJP re-normalises
    Tensor<T, SW, D> gs = gamma;
    record(name, y, [=](const T* go) {
      if (N == 0) return;
      Backend<D>::layer_norm_backward(xs.data(), go, stats.data(), gs.defined() ? gs.data() : nullptr,
                                      mx ? mx->accumulate_target() : nullptr, mg ? mg->accumulate_target() : nullptr,
                                      mb ? mb->accumulate_target() : nullptr, N, Dm, rows_per_group);
    });
  }
  return y;
}

}  // namespace ttmoe
