#pragma once
// DomainBed's training protocol (Gulrajani & Lopez-Paz; the GMoE authors train with it) on the shared
// training loop (loop.hpp):
//   * one held-out test environment; every step draws `per_domain` (32) augmented images from the `in`
//     split of EACH training environment (data/domainbed_loader.hpp, decoded on a background thread);
//   * Adam with the GMoE authors' per-dataset learning rate and weight decay (gmoe_domainbed_hparams),
//     5001 steps (DomainNet 15001); loss = cross-entropy (+ the model's MoE auxiliary loss, if it has
//     MoE layers);
//   * an evaluation every `checkpoint_every` (300) steps at DomainBed's points (step index 0, 300, ...,
//     and the last), of every environment's `in` and `out` splits, appended to a results.jsonl
//     (domainbed_records.hpp) from which model_selection.hpp picks a checkpoint;
//   * a training checkpoint (parameters, Adam state, step; atomic) every `checkpoint_every` completed
//     steps and at the end, from which an interrupted run resumes and ends with the weights an
//     uninterrupted run has, bit for bit.
// Exact resume needs every random draw to depend on the step alone: the batches do (seeded from
// (seed, step, domain, slot)), and the model's own generator (router noise, expert dropout,
// drop-path) is re-seeded from (seed, step) before each step's forward.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ttmoe/autograd/tape.hpp"
#include "ttmoe/data/domainbed_loader.hpp"
#include "ttmoe/data/seed_mix.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/nn/module.hpp"
#include "ttmoe/nn/optim_adam.hpp"
#include "ttmoe/training/domainbed_records.hpp"
#include "ttmoe/training/loop.hpp"

namespace ttmoe::training {

/// Adam's rate and weight decay and the step count of one dataset.
struct DomainBedHparams {
  double lr = 5e-5;
  double weight_decay = 0;
  std::size_t steps = 5001;
};

/// The GMoE authors' settings for a DomainBed dataset (its class name, e.g. "PACS", or folder name):
/// PACS and VLCS 3e-5 / 1e-6, OfficeHome 1e-5 / 1e-6, TerraIncognita 5e-5 / 1e-4, DomainNet 5e-5 / 0
/// with 15001 steps; 5001 steps otherwise. Any other dataset gets DomainBed's ERM defaults (5e-5, 0).
inline DomainBedHparams gmoe_domainbed_hparams(const std::string& dataset) {
  const auto* known = data::find_known_domainbed_dataset(dataset);
  const std::string name = known ? known->name : dataset;
  if (name == "PACS" || name == "VLCS") return {3e-5, 1e-6, 5001};
  if (name == "OfficeHome") return {1e-5, 1e-6, 5001};
  if (name == "TerraIncognita") return {5e-5, 1e-4, 5001};
  if (name == "DomainNet") return {5e-5, 0, 15001};
  return {};
}

/// One DomainBed run: which environment is held out, the trial, the optimiser and the data settings.
struct DomainBedTrainOptions {
  std::int64_t test_env = 0;
  std::int64_t trial_seed = 0;     ///< selects the in/out split (DomainBed's trial_seed)
  std::uint64_t seed = 0;          ///< drives the batches, the augmentation and the model's training noise
  DomainBedHparams hparams{};
  std::size_t per_domain = 32;     ///< images per training environment per step
  std::size_t checkpoint_every = 300;
  double holdout_fraction = 0.2;
  int channels = 3;                ///< decoded channels (1 for the gray digit set)
  data::TrainAugment augment{};
  data::EvalTransform eval{};
  std::size_t eval_batch = 64;
  std::filesystem::path run_dir;   ///< checkpoint.safetensors and results.jsonl; empty: neither
  bool resume = true;              ///< resume from run_dir's checkpoint when there is one
  std::function<void(const StepReport&)> progress;          ///< after each step (after its evaluation)
  std::function<void(const CheckpointRecord&)> on_record;   ///< after each evaluation
};

/// What train_domainbed did.
struct DomainBedRun {
  std::vector<CheckpointRecord> records;  ///< every evaluation of the run, resumed ones included
  std::size_t first_step = 0;             ///< completed steps found in the checkpoint (0: fresh run)
  double seconds = 0;                     ///< wall time of this call
};

/// File names inside a run folder.
inline std::filesystem::path run_checkpoint_path(const std::filesystem::path& run_dir) {
  return run_dir / "checkpoint.safetensors";
}
/// The results file of a run folder (DomainBed's name).
inline std::filesystem::path run_records_path(const std::filesystem::path& run_dir) { return run_dir / "results.jsonl"; }

namespace domainbed_detail {
/// A batch with the step it belongs to (the loss re-seeds the model's generator from it).
struct StepBatch {
  std::size_t step = 0;
  data::ImageBatch images;
};

/// The batch's images as a [B, C, H, W] tensor of T (converted from the decoded floats if T is not float).
template <class T>
Tensor<T, DynShape<4>> image_tensor(const data::ImageBatch& b) {
  const DynShape<4> shape(index_t(b.size()), index_t(b.channels), index_t(b.height), index_t(b.width));
  if constexpr (std::is_same_v<T, float>) {
    return Tensor<T, DynShape<4>>::from_host(shape, std::span<const float>(b.images));
  } else {
    const std::vector<T> converted(b.images.begin(), b.images.end());
    return Tensor<T, DynShape<4>>::from_host(shape, std::span<const T>(converted));
  }
}

/// Sets the model's training switch where it has one (GMoE: noise, expert dropout, drop-path).
template <class Model>
void set_training(Model& model, bool on) {
  if constexpr (requires { model.training = on; }) model.training = on;
}
}  // namespace domainbed_detail

/// Top-1 accuracy of `model` on images `indices` of environment `env` (evaluation transform, no
/// gradient, training switch off); NaN for an empty subset. T is the model's element type.
template <class Model, class T = float>
double evaluate_accuracy(Model& model, const data::DomainBedDataset& ds, std::size_t env,
                         const std::vector<std::size_t>& indices, const data::EvalTransform& eval, int channels,
                         std::size_t batch = 64) {
  if (indices.empty()) return std::nan("");
  domainbed_detail::set_training(model, false);
  autograd::NoGrad no_grad;
  auto stream = data::evaluation_stream(ds, env, indices, eval, channels, batch);
  std::size_t correct = 0;
  while (auto b = stream.next()) {
    const auto logits = model.forward(domainbed_detail::image_tensor<T>(*b)).to_vector();
    const std::size_t classes = logits.size() / b->size();
    for (std::size_t i = 0; i < b->size(); ++i) {
      const auto row = logits.begin() + std::ptrdiff_t(i * classes);
      const auto pick = std::max_element(row, row + std::ptrdiff_t(classes)) - row;
      correct += std::int64_t(pick) == b->labels[i];
    }
  }
  return double(correct) / double(indices.size());
}

/// The accuracy of every environment's `in` and `out` split, as a record of step `step`.
template <class Model, class T = float>
CheckpointRecord evaluate_checkpoint(Model& model, const data::DomainBedDataset& ds,
                                     const std::vector<data::EnvironmentSplit>& splits, const DomainBedTrainOptions& o,
                                     std::int64_t step, double loss) {
  CheckpointRecord r{step, o.test_env, o.trial_seed, loss, {}, {}};
  for (std::size_t e = 0; e < ds.environments.size(); ++e) {
    r.in_acc.push_back(evaluate_accuracy<Model, T>(model, ds, e, splits[e].in, o.eval, o.channels, o.eval_batch));
    r.out_acc.push_back(evaluate_accuracy<Model, T>(model, ds, e, splits[e].out, o.eval, o.channels, o.eval_batch));
  }
  return r;
}

/// Trains `model` (float; forward(images [B, C, H, W]) -> logits [B, classes]; parameters visited by
/// nn::for_each_parameter) on `ds` by DomainBed's protocol (see the header comment) and returns
/// every evaluation record. Throws data::DomainBedError for a test_env out of range or an empty
/// training split, io::ImageError naming an unreadable image, CheckpointError / nn::CheckpointError
/// for a checkpoint in run_dir that does not fit the model, RecordsError for a results file of another
/// run, and NonFiniteLoss. T is the model's element type (the images are decoded as floats).
template <class Model, class T = float>
DomainBedRun train_domainbed(Model& model, const data::DomainBedDataset& ds, const DomainBedTrainOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  data::check_test_env(o.test_env, ds.environments.size(), "test_env");
  if (o.hparams.steps == 0) throw std::invalid_argument("train_domainbed: steps must be >= 1");
  if (o.per_domain == 0) throw std::invalid_argument("train_domainbed: per_domain must be >= 1");
  const auto splits = data::split_environments(ds, o.trial_seed, o.holdout_fraction);
  const std::size_t total = o.hparams.steps, every = std::max<std::size_t>(1, o.checkpoint_every);

  DomainBedRun run;
  std::filesystem::path checkpoint, records_path;
  if (!o.run_dir.empty()) {
    std::filesystem::create_directories(o.run_dir);
    checkpoint = run_checkpoint_path(o.run_dir), records_path = run_records_path(o.run_dir);
    if (!o.resume) {
      std::filesystem::remove(checkpoint);
      std::filesystem::remove(records_path);
    }
    if (std::filesystem::exists(checkpoint)) run.first_step = checkpoint_step(checkpoint);
    // Keep the evaluations made before the checkpoint; later ones are made again (identically).
    for (auto& r : read_records(records_path)) {
      if (r.test_env != o.test_env || r.trial_seed != o.trial_seed || r.in_acc.size() != ds.environments.size())
        throw RecordsError(records_path.string() + ": step " + std::to_string(r.step) + " is a record of test_env " +
                           std::to_string(r.test_env) + ", trial " + std::to_string(r.trial_seed) + " with " +
                           std::to_string(r.in_acc.size()) + " environments, not of this run (test_env " +
                           std::to_string(o.test_env) + ", trial " + std::to_string(o.trial_seed) + ")");
      if (std::size_t(r.step) < run.first_step) run.records.push_back(std::move(r));
    }
  }
  auto record = [&](std::int64_t step, double loss) {
    run.records.push_back(evaluate_checkpoint<Model, T>(model, ds, splits, o, step, loss));
    if (!records_path.empty()) write_records(run.records, records_path);
    if (o.on_record) o.on_record(run.records.back());
  };

  typename nn::Adam<T>::Options ao;
  ao.lr = o.hparams.lr, ao.weight_decay = o.hparams.weight_decay;
  nn::Adam<T> opt(nn::named_parameters<T>(model), ao);

  data::TrainingStreamConfig cfg;
  cfg.test_env = o.test_env, cfg.per_domain = o.per_domain, cfg.steps = total, cfg.seed = o.seed;
  cfg.decode_channels = o.channels, cfg.augment = o.augment;
  // Opened after the checkpoint was peeked at, so it starts at the step training resumes from.
  auto stream = data::training_stream(ds, splits, cfg, std::min(run.first_step, total));
  std::size_t expected = run.first_step;
  auto next = [&](std::size_t step, std::size_t) {
    if (step != expected++) throw std::logic_error("train_domainbed: batches requested out of order");
    auto b = stream.next();
    if (!b) throw std::logic_error("train_domainbed: the training stream ended early");
    return domainbed_detail::StepBatch{step, std::move(*b)};
  };
  auto loss_of = [&](Model& m, const domainbed_detail::StepBatch& b) {
    domainbed_detail::set_training(m, true);
    if constexpr (requires { m.rng.seed(std::uint64_t{}); }) m.rng.seed(data::seed_mix(o.seed ^ 0x676d6f65ull, b.step));
    const auto labels = IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(b.images.size())),
                                                            std::span<const std::int64_t>(b.images.labels));
    Tensor<T, DynShape<2>> logits = m.forward(domainbed_detail::image_tensor<T>(b.images));
    Tensor<T, Shape<>> loss = nn::cross_entropy(logits, labels);
    if constexpr (requires { m.moe_layers(); m.aux_loss(); })
      if (!m.moe_layers().empty()) loss = loss + m.aux_loss();
    return loss;
  };
  LoopOptions lo;
  lo.total_steps = total;
  lo.checkpoint = checkpoint;
  lo.checkpoint_every = every;
  lo.progress = [&](const StepReport& r) {
    if (r.step % every == 0 || r.step + 1 == total) record(std::int64_t(r.step), r.loss);
    if (o.progress) o.progress(r);
  };
  train(model, opt, next, loss_of, lo);
  // A run interrupted between its last checkpoint and that step's evaluation resumes with nothing to
  // train: evaluate the final weights now.
  if (run.records.empty() || std::size_t(run.records.back().step) + 1 != total)
    record(std::int64_t(total) - 1, std::nan(""));
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return run;
}

}  // namespace ttmoe::training
