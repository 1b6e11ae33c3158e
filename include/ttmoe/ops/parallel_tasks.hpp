#pragma once
// Independent pieces of a forward run side by side, one task per host thread, and so does their
// backward. Why: a GEMM split over two threads loses more on a few small products (an MoE layer's
// experts, each a ~1000-row MLP) than the same products lose when each thread runs whole ones; the
// thread meets the others once per task list instead of once per kernel, and each task's hidden
// activations stay in the cache from one product to the next.
//
// While a tape records, each task records its ops onto a tape of its own, on whichever thread runs
// it; ONE node on the caller's tape replays those tapes side by side when the backward reaches it.
// The caller's contract: tasks share no tensor whose gradient their ops accumulate (give each task
// its own inputs, e.g. its own index_select of a shared tensor made before the tasks, and its own
// parameters) and no mutable state (a generator: copy it per task). Then the results and gradients
// are those of running the tasks one after another.

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/backend/backend.hpp"
#include "ttmoe/core/device.hpp"

namespace ttmoe {

/// How many tasks device D runs at once (1 where its backend has no task runner).
template <class D>
index_t task_threads() {
  if constexpr (TaskParallelBackend<D>)
    return Backend<D>::task_threads();
  else
    return 1;
}

namespace detail {
/// task(i) for every i in [0, n) on D's task runner, or one after another without one.
template <class D>
void run_tasks(index_t n, const std::function<void(index_t)>& task) {
  if constexpr (TaskParallelBackend<D>) {
    Backend<D>::run_tasks(n, task);
  } else {
    for (index_t i = 0; i < n; ++i) task(i);
  }
}

/// The caller's node: replays the tasks' tapes side by side, each on the thread that takes it.
template <class D>
class ParallelTasksNode final : public autograd::Node {
 public:
  explicit ParallelTasksNode(std::vector<std::unique_ptr<autograd::Tape>> tapes) : tapes_(std::move(tapes)) {}
  void run() override {
    run_tasks<D>(index_t(tapes_.size()), [&](index_t i) { tapes_[std::size_t(i)]->replay_and_clear(); });
    tapes_.clear();
  }
  const char* name() const noexcept override { return "parallel_tasks"; }

 private:
  std::vector<std::unique_ptr<autograd::Tape>> tapes_;
};
}  // namespace detail

/// Runs task(i) for every i in [0, n) side by side on D's host threads (the free thread takes the
/// next i, so put the longest tasks first), each task's kernels serial on its thread; on a device
/// without a task runner they run in order. While a tape records, the tasks' ops are recorded as one
/// node whose backward runs the tasks' backwards side by side in the same way (see the file comment
/// for what the tasks must not share). A task's exception reaches the caller and records nothing.
template <class D>
void run_recorded_tasks(index_t n, const std::function<void(index_t)>& task) {
  if (!autograd::is_recording()) {
    detail::run_tasks<D>(n, task);
    return;
  }
  std::vector<std::unique_ptr<autograd::Tape>> tapes(static_cast<std::size_t>(n));
  for (auto& t : tapes) t = std::make_unique<autograd::Tape>(autograd::Tape::Detached{});
  detail::run_tasks<D>(n, [&](index_t i) {
    autograd::RecordOnto onto(*tapes[std::size_t(i)]);
    task(i);
  });
  autograd::active_recorder()->push_node(std::make_unique<detail::ParallelTasksNode<D>>(std::move(tapes)));
}

}  // namespace ttmoe
