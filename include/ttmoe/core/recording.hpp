#pragma once
// The recording hook every differentiable op writes to: a thread's active Recorder, the NoGrad scope,
// and the Node an op appends (its name and VJP closure). Declared in core so that tensors and ops can
// record without including the autograd floor above them; autograd::Tape (autograd/tape.hpp) is the
// one Recorder, and it owns the replay (backward) and its diagnostics.

#include <memory>
#include <utility>
#include <vector>

#include "ttmoe/core/grad_meta.hpp"

namespace ttmoe::autograd {

/// One recorded op: its name and its vector-Jacobian product.
class Node {
 public:
  virtual ~Node() = default;
  /// Reads the output gradient, accumulates into the input gradients, releases what it saved.
  virtual void run() = 0;
  /// The op's name (for diagnostics and the gradcheck coverage test).
  virtual const char* name() const noexcept = 0;
};

namespace detail {
/// A Node running closure `f(const T* grad_out)` only if output `out` received a gradient, then
/// freeing that gradient unless the output retains it.
template <class T, class D, class F>
class OpNode final : public Node {
 public:
  OpNode(const char* name, std::shared_ptr<GradMeta<T, D>> out, F&& f)
      : name_(name), out_(std::move(out)), f_(std::move(f)) {}
  void run() override {
    if (out_->has_grad()) {
      f_(static_cast<const T*>(out_->grad_buffer()->data()));
      if (!out_->retains_grad()) out_->reset_grad();
    }
  }
  const char* name() const noexcept override { return name_; }

 private:
  const char* name_;
  std::shared_ptr<GradMeta<T, D>> out_;
  F f_;
};
}  // namespace detail

/// The list recorded ops append to. Only autograd::Tape derives from it (and installs itself as the
/// thread's recorder while alive); ops see this base and never the replay machinery.
class Recorder {
 public:
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /// Appends a node whose VJP `f(const T* grad_out)` runs if the output received a gradient.
  template <class T, class D, class F>
  void push(const char* name, std::shared_ptr<GradMeta<T, D>> out, F&& f) {
    nodes_.push_back(std::make_unique<detail::OpNode<T, D, std::decay_t<F>>>(name, std::move(out),
                                                                             std::forward<F>(f)));
  }

  /// Appends a node that decides for itself what its run() does (ops/parallel_tasks.hpp's node, which
  /// replays several tapes side by side).
  void push_node(std::unique_ptr<Node> node) { nodes_.push_back(std::move(node)); }

 protected:
  Recorder() = default;
  ~Recorder() = default;
  std::vector<std::unique_ptr<Node>> nodes_;
};

/// Thread-local recording state.
struct RecordingState {
  Recorder* recorder = nullptr;
  int no_grad_depth = 0;
};
/// This thread's recording state.
inline RecordingState& recording_state() {
  thread_local RecordingState s;
  return s;
}

/// True when an op executed now must be recorded (a tape is active and no NoGrad scope is open).
inline bool is_recording() noexcept {
  const auto& s = recording_state();
  return s.recorder != nullptr && s.no_grad_depth == 0;
}

/// Where an op executed now appends its node (null when not recording).
inline Recorder* active_recorder() noexcept { return is_recording() ? recording_state().recorder : nullptr; }

/// RAII scope in which nothing is recorded (inference, optimiser updates, statistics).
class NoGrad {
 public:
  NoGrad() noexcept { ++recording_state().no_grad_depth; }
  ~NoGrad() { --recording_state().no_grad_depth; }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;
};

}  // namespace ttmoe::autograd
