#pragma once
// The training loop every trainer in the project shares (the ViT pre-training of the MoETTA
// example today; the GMoE training on DomainBed with Adam and the LoRA expert training with AdamW
// are meant to use it too). Generic over
//   * the model: anything nn::for_each_parameter visits (checkpoints only need that);
//   * the optimiser: step(), zero_grad(), options().lr, and state_dict()/load_state_dict() for
//     checkpoints (nn::SGD, nn::Adam, nn::AdamW);
//   * the data: next(step, micro) -> a batch of any type, and loss(model, batch) -> the scalar loss
//     of that batch, recorded on the tape the loop opens.
// Per optimiser step: the schedule's rate is stored into the optimiser, `accumulation` micro-batches
// are forwarded and back-propagated (each loss divided by `accumulation`, so k equal micro-batches
// give the gradient of their mean), a non-finite loss raises NonFiniteLoss naming the step, then
// one optimiser step and zero_grad. Checkpoints (training/checkpoint.hpp) are written every
// `checkpoint_every` steps and at the end; a run finding one resumes after its last completed step.
// Resume is exact when next(step, micro) depends only on its arguments (a sequential source, e.g.
// one advancing an RNG, must be rebuilt to the same position by the caller).

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/training/checkpoint.hpp"
#include "ttmoe/training/progress.hpp"
#include "ttmoe/training/schedule.hpp"

namespace ttmoe::training {

/// A loss that is NaN or infinite: training cannot go on from it (the step it would take would
/// poison every parameter). Carries where it happened.
class NonFiniteLoss : public std::runtime_error {
 public:
  NonFiniteLoss(std::size_t step, std::size_t micro, double value)
      : std::runtime_error("training: non-finite loss " + std::to_string(value) + " at step " + std::to_string(step) +
                           ", micro-batch " + std::to_string(micro) +
                           " (lower the learning rate or check the data; nothing was applied)"),
        step_(step),
        micro_(micro),
        value_(value) {}
  /// Optimiser step (0-based) whose loss was not finite.
  std::size_t step() const noexcept { return step_; }
  /// Micro-batch within the step.
  std::size_t micro() const noexcept { return micro_; }
  /// The loss value.
  double value() const noexcept { return value_; }

 private:
  std::size_t step_, micro_;
  double value_;
};

/// What the progress callback sees after each optimiser step.
struct StepReport {
  std::size_t step = 0;         ///< the step just completed (0-based)
  std::size_t total_steps = 0;  ///< the run's total
  double loss = 0;              ///< mean of the step's micro-batch losses (unscaled)
  double lr = 0;                ///< the rate the step used
  double seconds = 0;           ///< since this run (or resume) started
  std::size_t steps_this_run = 0;  ///< steps completed since this run (or resume) started
};

/// How to train.
struct LoopOptions {
  std::size_t total_steps = 0;  ///< optimiser steps of the whole run (resumed runs included)
  std::size_t accumulation = 1; ///< micro-batches per optimiser step (>= 1)
  Schedule lr;                  ///< learning rate per step; empty: the optimiser's rate is left alone
  std::filesystem::path checkpoint;  ///< empty: no checkpoints, no resume
  std::size_t checkpoint_every = 0;  ///< steps between checkpoints (0: only at the end)
  bool resume = true;                ///< load `checkpoint` if it exists
  std::function<void(const StepReport&)> progress;  ///< after each step (e.g. stderr_progress())
};

/// What train() did.
struct LoopResult {
  std::size_t first_step = 0;  ///< 0, or the step a checkpoint resumed at
  std::size_t steps = 0;       ///< steps completed by this call
  double last_loss = std::nan("");
};

/// A progress callback that redraws one line on stderr: a 30-character bar, steps, loss, rate.
inline std::function<void(const StepReport&)> stderr_progress(std::string label = "train", std::size_t every = 10) {
  return [label = std::move(label), every](const StepReport& r) {
    const bool last = r.step + 1 == r.total_steps;
    if (r.step % every && !last) return;
    char tail[64];
    std::snprintf(tail, sizeof tail, " loss %.4f  lr %.2e", r.loss, r.lr);
    draw_progress_line(label, r.step + 1, r.total_steps, r.seconds > 0 ? double(r.steps_this_run) / r.seconds : 0.0,
                       "steps", tail);
  };
}

/// Trains `model` with `opt` for o.total_steps steps (see the header comment). Throws
/// std::invalid_argument for bad options, NonFiniteLoss for a NaN / inf loss, and the checkpoint
/// errors of load_checkpoint for a checkpoint that does not fit.
template <class Model, class Optimizer, class NextBatch, class LossFn>
LoopResult train(Model& model, Optimizer& opt, NextBatch&& next, LossFn&& loss_of, const LoopOptions& o) {
  if (o.accumulation == 0) throw std::invalid_argument("training::train: accumulation must be >= 1");
  LoopResult res;
  const bool checkpoints = !o.checkpoint.empty();
  if constexpr (StatefulOptimizer<Optimizer>) {
    if (checkpoints && o.resume && std::filesystem::exists(o.checkpoint)) {
      res.first_step = load_checkpoint(model, opt, o.checkpoint);
      if (res.first_step > o.total_steps)
        throw CheckpointError(o.checkpoint.string() + ": checkpoint is at step " + std::to_string(res.first_step) +
                              ", past the run's " + std::to_string(o.total_steps) + " steps");
    }
  } else {
    if (checkpoints) throw std::invalid_argument("training::train: checkpoints need an optimiser with state_dict()");
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t step = res.first_step; step < o.total_steps; ++step) {
    const double lr = o.lr ? o.lr(step) : double(opt.options().lr);
    if (o.lr) opt.options().lr = lr;
    double sum = 0;
    for (std::size_t micro = 0; micro < o.accumulation; ++micro) {
      auto batch = next(step, micro);
      autograd::Tape tape;
      auto loss = loss_of(model, batch);
      const double value = double(loss.item());
      if (!std::isfinite(value)) {
        // Earlier micro-batches of this step have already added their gradients: clear them, so a
        // caller that catches this and carries on (a lower rate, other data) starts from clean grads.
        opt.zero_grad();
        throw NonFiniteLoss(step, micro, value);
      }
      sum += value;
      using T = typename decltype(loss)::value_type;
      if (o.accumulation == 1)  // no scaling node: one micro-batch is exactly a plain step
        autograd::backward(tape, loss);
      else
        autograd::backward(tape, decltype(loss)(loss * T(1.0 / double(o.accumulation))));
    }
    opt.step();
    opt.zero_grad();
    ++res.steps;
    res.last_loss = sum / double(o.accumulation);
    if constexpr (StatefulOptimizer<Optimizer>) {
      const bool due = o.checkpoint_every && (step + 1) % o.checkpoint_every == 0;
      if (checkpoints && (due || step + 1 == o.total_steps)) save_checkpoint(model, opt, step + 1, o.checkpoint);
    }
    if (o.progress)
      o.progress(StepReport{step, o.total_steps, res.last_loss, lr,
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), res.steps});
  }
  return res;
}

}  // namespace ttmoe::training
