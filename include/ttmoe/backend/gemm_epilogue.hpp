#pragma once
// What a GEMM can do to its output as it writes it, so that the elementwise work around a linear
// layer never takes a pass over the activation of its own:
// - a bias row (nn.Linear's b) and a residual matrix (the transformer's `x + f(x)`) added;
// - an activation applied (fc1 -> GELU), keeping the pre-activation beside it when a backward needs it;
// - an activation's VJP applied to a gradient GEMM's result (fc2's input gradient times GELU'(pre)).
// A backend offers it as `Backend<D>::gemm_epilogue<Act>(...)` (the CPU's: backend/cpu/gemm.hpp); ops
// compose the same computation from separate ops on backends without it (ops/linear.hpp says how).
//
// The activation is a type: one of the expression library's unary functors (op::gelu, op::silu, ...)
// whose `vjp` reads only the input, or void for none.

#include "ttmoe/core/device.hpp"

namespace ttmoe {

/// The optional extras of a GEMM's store (every pointer null: a plain GEMM). Elements are indexed
/// like C's (row m, column n) with each matrix's own leading dimension. Bias and residual need
/// beta = 0; with an activation type Act either
/// - `act_input` is set: C = Act'(act_input) * C (the activation's VJP; C is the output gradient);
/// - or `activated` is set: C keeps the pre-activation and activated = Act(C);
/// - or neither: C = Act(C) in place.
template <class T>
struct GemmEpilogue {
  const T* bias = nullptr;  ///< [N], added to every row
  const T* residual = nullptr;
  index_t ld_residual = 0;
  T* activated = nullptr;
  index_t ld_activated = 0;
  const T* act_input = nullptr;
  index_t ld_act_input = 0;

  /// The same epilogue seen from the block of C whose top-left element is (m, n).
  GemmEpilogue at(index_t m, index_t n) const {
    GemmEpilogue e = *this;
    if (bias) e.bias += n;
    if (residual) e.residual += m * ld_residual + n;
    if (activated) e.activated += m * ld_activated + n;
    if (act_input) e.act_input += m * ld_act_input + n;
    return e;
  }

  /// The activation step for one finished element v of C at (r, j) of this (moved) epilogue: returns
  /// what C keeps, writing `activated` when it is set.
  template <class Act>
  T finish_scalar(T v, index_t r, index_t j) const {
    if (act_input) {
      T ga;
      Act::vjp(act_input[r * ld_act_input + j], T(0), v, ga);
      return ga;
    }
    if (activated) {
      activated[r * ld_activated + j] = Act::apply(v);
      return v;
    }
    return Act::apply(v);
  }
};

}  // namespace ttmoe
