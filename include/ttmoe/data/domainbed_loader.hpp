#pragma once
// Batches for DomainBed-style training and evaluation, decoded on a background thread
// (streams_loader.hpp's BackgroundLoader) so the model does not wait on JPEG decoding.
//
// Training follows DomainBed's InfiniteDataLoader: every step draws `per_domain` (32) images from the
// `in` split of each training domain, uniformly WITH replacement (RandomSampler(replacement=True)), and
// the step's batch is the domains' minibatches one after the other. Every draw and every augmentation is
// seeded from (seed, step, domain, slot), so a run is reproducible and a resumed run sees the same batches.
//
// Unreadable images: an error naming the file (io::ImageError from load_image), delivered by the loader at
// the batch that needed it. Skipping would change what a domain contains after the split was drawn
// (and hide a broken download); DomainBed stops there too (PIL fails on an undecodable file; it only
// tolerates truncated JPEGs, see docs/data.md). Memory: a queued 96-image 224 px RGB batch is 58 MB.

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/data/augment.hpp"
#include "ttmoe/data/domainbed.hpp"
#include "ttmoe/data/domainbed_split.hpp"
#include "ttmoe/data/seed_mix.hpp"
#include "ttmoe/data/streams_loader.hpp"
#include "ttmoe/io/image.hpp"

namespace ttmoe::data {

/// A batch of preprocessed images: planar CHW floats per image, one label and domain index each.
struct ImageBatch {
  int channels = 0, height = 0, width = 0;
  std::vector<float> images;         ///< size() * channels * height * width
  std::vector<std::int64_t> labels;  ///< class index per image
  std::vector<std::int64_t> domains; ///< environment index per image
  /// Number of images.
  std::size_t size() const { return labels.size(); }
};

/// DomainBed's split of every environment of `ds` for one trial (holdout 0.2 by default).
inline std::vector<EnvironmentSplit> split_environments(const DomainBedDataset& ds, std::int64_t trial_seed,
                                                        double holdout_fraction = 0.2) {
  std::vector<EnvironmentSplit> out;
  for (std::size_t e = 0; e < ds.environments.size(); ++e)
    out.push_back(domainbed_split(ds.environments[e].files.size(), trial_seed, std::int64_t(e), holdout_fraction));
  return out;
}

/// What the training stream reads: the dataset, its splits, the held-out environment and the augmentation.
struct TrainingStreamConfig {
  std::int64_t test_env = 0;     ///< the held-out environment (not drawn from)
  std::size_t per_domain = 32;  ///< images per training domain per step
  std::size_t steps = 5001;     ///< DomainBed's default (DomainNet: 15001)
  std::uint64_t seed = 0;       ///< drives the draws and the augmentation (not the split: that is the trial seed)
  int decode_channels = 3;      ///< 3 for RGB datasets, 1 for the gray digit set
  TrainAugment augment{};
  std::size_t queue = 4;        ///< batches decoded ahead
};

/// The training batch of `step`: per_domain images from each training environment's `in` split, drawn
/// with replacement and augmented, in training-environment order. Deterministic in (config, step).
inline ImageBatch training_batch(const DomainBedDataset& ds, const std::vector<EnvironmentSplit>& splits,
                                 const TrainingStreamConfig& cfg, std::size_t step) {
  const auto train_envs = training_environments(cfg.test_env, ds.environments.size());
  if (splits.size() != ds.environments.size())
    throw std::invalid_argument("training_batch: " + std::to_string(splits.size()) + " splits for " +
                                std::to_string(ds.environments.size()) + " environments");
  ImageBatch b{cfg.decode_channels, cfg.augment.size, cfg.augment.size, {}, {}, {}};
  const std::size_t per_image = std::size_t(b.channels) * std::size_t(b.height) * std::size_t(b.width);
  b.images.resize(train_envs.size() * cfg.per_domain * per_image);
  std::size_t slot_out = 0;
  for (std::size_t env : train_envs) {
    const auto& in = splits[env].in;
    if (in.empty())
      throw DomainBedError(DomainBedErrorKind::EmptyDomain,
                           "training domain '" + ds.environments[env].name + "' has no images in its 'in' split");
    const std::uint64_t base = seed_mix(seed_mix(cfg.seed, step), env);
    std::mt19937_64 pick(base);
    std::uniform_int_distribution<std::size_t> u(0, in.size() - 1);
    for (std::size_t k = 0; k < cfg.per_domain; ++k, ++slot_out) {
      const auto& f = ds.environments[env].files[in[u(pick)]];
      std::mt19937_64 rng(seed_mix(base, k + 1));
      augment_into(io::load_image(f.path, cfg.decode_channels), cfg.augment, rng,
                   std::span<float>(b.images.data() + slot_out * per_image, per_image));
      b.labels.push_back(f.label);
      b.domains.push_back(std::int64_t(env));
    }
  }
  return b;
}

/// Evaluation batches of one environment's subset (`indices`, e.g. a split's in or out), in order,
/// `batch` images each (the last may be smaller), through the evaluation transform.
inline ImageBatch evaluation_batch(const DomainBedDataset& ds, std::size_t env, const std::vector<std::size_t>& indices,
                                   const EvalTransform& t, int decode_channels, std::size_t batch, std::size_t index) {
  if (env >= ds.environments.size()) throw std::out_of_range("evaluation_batch: environment " + std::to_string(env));
  const std::size_t begin = index * batch, end = std::min(indices.size(), begin + batch);
  if (begin >= end) throw std::out_of_range("evaluation_batch: batch " + std::to_string(index) + " past the end");
  ImageBatch b{decode_channels, t.size, t.size, {}, {}, {}};
  const std::size_t per_image = std::size_t(b.channels) * std::size_t(t.size) * std::size_t(t.size);
  b.images.resize((end - begin) * per_image);
  for (std::size_t i = begin; i < end; ++i) {
    const auto& f = ds.environments[env].files.at(indices[i]);
    eval_transform_into(io::load_image(f.path, decode_channels), t,
                        std::span<float>(b.images.data() + (i - begin) * per_image, per_image));
    b.labels.push_back(f.label);
    b.domains.push_back(std::int64_t(env));
  }
  return b;
}

/// Evaluation of one environment's subset as a stream: ceil(indices.size() / batch) evaluation_batch
/// results in order, decoded ahead on a background thread. `ds` and `indices` must outlive the loader.
inline BackgroundLoader<ImageBatch> evaluation_stream(const DomainBedDataset& ds, std::size_t env,
                                                      const std::vector<std::size_t>& indices, const EvalTransform& t,
                                                      int decode_channels = 3, std::size_t batch = 64, std::size_t queue = 4) {
  if (batch == 0) throw std::invalid_argument("evaluation_stream: batch must be positive");
  const std::size_t count = (indices.size() + batch - 1) / batch;
  return BackgroundLoader<ImageBatch>(
      count, [&ds, env, &indices, t, decode_channels, batch](std::size_t i) {
        return evaluation_batch(ds, env, indices, t, decode_channels, batch, i);
      },
      queue);
}

/// The training stream of a run: cfg.steps batches (training_batch(step) for step = first_step, ...),
/// decoded ahead on a background thread. `first_step` > 0 resumes a run with the same batches.
/// `ds` and `splits` must outlive the loader.
inline BackgroundLoader<ImageBatch> training_stream(const DomainBedDataset& ds, const std::vector<EnvironmentSplit>& splits,
                                                    const TrainingStreamConfig& cfg, std::size_t first_step = 0) {
  check_test_env(cfg.test_env, ds.environments.size());
  const std::size_t count = cfg.steps > first_step ? cfg.steps - first_step : 0;
  return BackgroundLoader<ImageBatch>(
      count, [&ds, &splits, cfg, first_step](std::size_t i) { return training_batch(ds, splits, cfg, first_step + i); },
      cfg.queue);
}

}  // namespace ttmoe::data
