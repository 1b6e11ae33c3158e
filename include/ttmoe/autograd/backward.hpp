#pragma once
// backward(tape, loss): seeds d loss / d loss = 1 for a one-element loss (or a given seed for any
// tensor), replays the tape in reverse and frees it. Leaf gradients accumulate across calls until
// zero_grad().

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/core/tensor.hpp"

namespace ttmoe::autograd {

/// Backpropagates from a one-element tensor. Throws AutogradError if it is not differentiable.
template <class T, ShapeType S, class D>
void backward(Tape& tape, const Tensor<T, S, D>& root) {
  if (root.numel() != 1)
    throw AutogradError("backward: the root has shape " + root.shape().to_string() +
                        "; pass a seed gradient for a non-scalar root");
  if (!root.requires_grad())
    throw AutogradError("backward: the root does not depend on any tensor that requires a gradient "
                        "(was it computed under NoGrad or outside the tape?)");
  const T one = T(1);
  auto t = root.meta()->target();
  if (t.fresh) {
    D::template copy_from_host<T>(t.data, &one, 1);
  } else {
    T cur;
    D::template copy_to_host<T>(&cur, t.data, 1);
    cur += one;
    D::template copy_from_host<T>(t.data, &cur, 1);
  }
  tape.replay_and_clear();
}

/// Backpropagates a seed gradient (same shape as root) from any tensor.
template <class T, ShapeType S, class D>
void backward(Tape& tape, const Tensor<T, S, D>& root, const Tensor<T, S, D>& seed) {
  if (seed.extents() != root.extents())
    throw AutogradError("backward: seed shape " + seed.shape().to_string() + " differs from root shape " +
                        root.shape().to_string());
  if (!root.requires_grad()) throw AutogradError("backward: the root does not require a gradient");
  Backend<D>::add_inplace(root.meta()->accumulate_target(), seed.data(), seed.numel());
  tape.replay_and_clear();
}

}  // namespace ttmoe::autograd
