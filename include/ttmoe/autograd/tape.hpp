#pragma once
// A linear tape: while a Tape is alive (and gradients are enabled) every differentiable op appends a
// node holding its vector-Jacobian product; backward() replays the nodes in reverse and then frees
// them, releasing every saved activation. No recursive graph: a tensor used by many ops is handled by
// plain accumulation into its gradient buffer.

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/autograd/grad_meta.hpp"
#include "ttmoe/core/error.hpp"

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

class Tape;

/// Thread-local recording state.
struct RecordingState {
  Tape* tape = nullptr;
  int no_grad_depth = 0;
};
inline RecordingState& recording_state() {
  thread_local RecordingState s;
  return s;
}

/// True when an op executed now must be recorded (a tape is active and no NoGrad scope is open).
inline bool is_recording() noexcept {
  const auto& s = recording_state();
  return s.tape != nullptr && s.no_grad_depth == 0;
}

/// RAII scope in which nothing is recorded (inference, optimiser updates, statistics).
class NoGrad {
 public:
  NoGrad() noexcept { ++recording_state().no_grad_depth; }
  ~NoGrad() { --recording_state().no_grad_depth; }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;
};

/// Records differentiable ops while alive. Tapes nest: an inner tape shadows the outer one.
class Tape {
 public:
  Tape() : previous_(recording_state().tape) { recording_state().tape = this; }
  ~Tape() { recording_state().tape = previous_; }
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  /// Appends a node whose VJP `f(const T* grad_out)` runs if the output received a gradient.
  template <class T, class D, class F>
  void push(const char* name, std::shared_ptr<GradMeta<T, D>> out, F&& f) {
    nodes_.push_back(std::make_unique<detail::OpNode<T, D, std::decay_t<F>>>(name, std::move(out),
                                                                             std::forward<F>(f)));
  }

  /// Replays the tape in reverse after the caller seeded the root's gradient, then clears it.
  void replay_and_clear() {
    NoGrad guard;  // VJPs use tensor ops; none of them may be recorded.
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
      if (node_seconds_) {
        const auto t0 = std::chrono::steady_clock::now();
        (*it)->run();
        node_seconds_->emplace_back((*it)->name(),
                                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      } else {
        (*it)->run();
      }
      it->reset();  // free saved activations as soon as their VJP has run
    }
    nodes_.clear();
  }

  /// Profiling: while set, each replayed node appends (name, seconds of its VJP) to `out`, in replay
  /// order (nullptr stops it). The caller owns `out`.
  void time_nodes_into(std::vector<std::pair<std::string, double>>* out) noexcept { node_seconds_ = out; }

  /// Number of recorded nodes.
  std::size_t size() const noexcept { return nodes_.size(); }
  /// Names of the recorded nodes, in order (diagnostics, coverage tests).
  std::vector<std::string> node_names() const {
    std::vector<std::string> v;
    for (const auto& n : nodes_) v.emplace_back(n->name());
    return v;
  }
  /// Drops every node without running it (e.g. after a non-finite loss).
  void clear() noexcept { nodes_.clear(); }

 private:
  Tape* previous_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::pair<std::string, double>>* node_seconds_ = nullptr;
};

/// The active tape (null when not recording).
inline Tape* current_tape() noexcept { return is_recording() ? recording_state().tape : nullptr; }

}  // namespace ttmoe::autograd
