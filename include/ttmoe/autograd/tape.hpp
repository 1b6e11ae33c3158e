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

#include "ttmoe/core/error.hpp"
#include "ttmoe/core/recording.hpp"

namespace ttmoe::autograd {

/// Records differentiable ops while alive. Tapes nest: an inner tape shadows the outer one.
/// Ops append to it through the Recorder base (core/recording.hpp).
class Tape : public Recorder {
 public:
  /// Tag of the constructor that does not install the tape (RecordOnto installs it for a scope).
  struct Detached {};

  Tape() : previous_(recording_state().recorder), installed_(true) { recording_state().recorder = this; }
  /// A tape that records only inside RecordOnto scopes, possibly on several threads one after another
  /// (ops/parallel_tasks.hpp records each task of a forward onto its own, on whichever thread runs it).
  explicit Tape(Detached) : previous_(nullptr), installed_(false) {}
  ~Tape() {
    if (installed_) recording_state().recorder = previous_;
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
  Recorder* previous_;
  bool installed_;
  std::vector<std::pair<std::string, double>>* node_seconds_ = nullptr;
};

/// Makes a detached tape this thread's recorder for the scope's lifetime, then restores the previous
/// one (recording stays subject to NoGrad scopes as usual).
class RecordOnto {
 public:
  explicit RecordOnto(Tape& tape) noexcept : previous_(recording_state().recorder) { recording_state().recorder = &tape; }
  ~RecordOnto() { recording_state().recorder = previous_; }
  RecordOnto(const RecordOnto&) = delete;
  RecordOnto& operator=(const RecordOnto&) = delete;

 private:
  Recorder* previous_;
};

/// The active tape (null when not recording).
inline Tape* current_tape() noexcept {
  // Tape is the only Recorder (the base's constructor is protected and nothing else derives from it).
  return static_cast<Tape*>(active_recorder());
}

}  // namespace ttmoe::autograd
