#pragma once
// Per-tensor autograd state: whether the tensor takes part in differentiation and its gradient
// buffer. Tensors that need no gradient carry a null pointer, so the no-grad path costs nothing.

#include <memory>

#include "ttmoe/core/storage.hpp"

namespace ttmoe::autograd {

/// Where an op writes an input's gradient. When `fresh` is true the buffer holds garbage and the op
/// must overwrite every element (lets GEMMs use beta = 0); otherwise it must add.
template <class T>
struct GradTarget {
  T* data;
  bool fresh;
};

/// Gradient bookkeeping for one tensor (a leaf parameter or an op's output).
template <class T, class D>
class GradMeta {
 public:
  GradMeta(index_t numel, bool is_leaf) : numel_(numel), is_leaf_(is_leaf) {}

  /// Parameters and other user-created tensors are leaves: their gradient persists until zeroed.
  bool is_leaf() const noexcept { return is_leaf_; }
  /// Keep a non-leaf's gradient after backward (for inspection).
  void retain_grad() noexcept { retain_ = true; }
  bool retains_grad() const noexcept { return is_leaf_ || retain_; }
  index_t numel() const noexcept { return numel_; }

  /// True once some op has written a gradient this backward pass (or since the last zero_grad).
  bool has_grad() const noexcept { return static_cast<bool>(grad_); }
  /// The gradient buffer, or null when nothing reached this tensor.
  const std::shared_ptr<Buffer<T, D>>& grad_buffer() const noexcept { return grad_; }

  /// Returns where to accumulate; allocates (uninitialised, `fresh`) on first use.
  GradTarget<T> target() {
    if (!grad_) {
      grad_ = make_buffer<T, D>(numel_);
      return {grad_->data(), true};
    }
    return {grad_->data(), false};
  }
  /// Like target() but always zero-filled, for ops that can only add.
  T* accumulate_target() {
    auto t = target();
    if (t.fresh) D::template fill_zero<T>(t.data, numel_);
    return t.data;
  }
  /// Takes `g` (a gradient of the same element count that nothing else will write) as this tensor's
  /// gradient when none has arrived yet: a view's VJP hands its gradient on without copying it.
  /// Returns false (and leaves `g` alone) when a gradient is already there to add to.
  bool adopt(const std::shared_ptr<Buffer<T, D>>& g) {
    if (grad_ || !g || g->size() != numel_) return false;
    grad_ = g;
    return true;
  }
  /// Drops the gradient (zero_grad for leaves, release after use for intermediates).
  void reset_grad() noexcept { grad_.reset(); }

 private:
  std::shared_ptr<Buffer<T, D>> grad_;
  index_t numel_;
  bool is_leaf_;
  bool retain_ = false;
};

}  // namespace ttmoe::autograd
