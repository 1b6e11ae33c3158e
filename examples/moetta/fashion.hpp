#pragma once
// The embedded default: a small gray-scale ViT trained by ttmoe on Fashion-MNIST minus a held-out
// part of the training split (cached as a safetensors checkpoint with its config in the metadata);
// the validation stream built from the held-out images under ImageNet-C's four extra corruptions;
// and the mixed test stream built from the Fashion-MNIST test set: the 15 ImageNet-C corruptions
// (CIFAR parameters at <= 64 px), a sketch-like rendition and an inverted rendition, each a domain.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <ttmoe/data/corruptions/corrupt.hpp>
#include <ttmoe/data/streams.hpp>
#include <ttmoe/io/idx.hpp>
#include <ttmoe/nn/checkpoint.hpp>
#include <ttmoe/nn/loss.hpp>
#include <ttmoe/nn/optim_adam.hpp>
#include <ttmoe/training/loop.hpp>

#include "../common/cache_dir.hpp"
#include "experiment.hpp"

namespace moetta_example {

/// The embedded model and how it was trained; everything that changes the weights is in the cache
/// key, so changing a number here retrains instead of loading a stale file.
struct FashionSetup {
  models::ViTConfig vit{28, 7, 1, 64, 6, 4, 128, 10};  // img, patch, chans, dim, depth, heads, mlp, classes
  int epochs = 4;
  index_t batch = 128;
  /// The last `holdout` training images are never trained on: the validation stream is built from
  /// them (ImageNet-C's extra corruptions), so hyper-parameters are chosen without the test set.
  std::size_t holdout = 5000;
  int max_shift = 2;  ///< training augmentation: random translation by up to this many pixels
  double lr = 2e-3, weight_decay = 0.05;
  float mean = 0.5f, std = 0.5f;  ///< same normalisation convention as the augreg ViT
  /// Cache file name (config and recipe encoded).
  std::string cache_name() const {
    return fmt::format("fmnist_vit_i{}p{}d{}x{}h{}m{}_e{}b{}_ho{}s{}_v2.safetensors", vit.img_size, vit.patch_size,
                       vit.embed_dim, vit.depth, vit.num_heads, vit.mlp_hidden, epochs, batch, holdout, max_shift);
  }
  /// Number of training images actually trained on (the rest is the validation hold-out).
  std::size_t train_count(const io::FashionMnistSplit& train) const {
    if (train.count <= holdout) throw std::runtime_error("Fashion-MNIST train split smaller than the hold-out");
    return train.count - holdout;
  }
};

using examples_common::cache_dir;

/// Gray [0,1] image n of a split.
inline io::Image fashion_image(const io::FashionMnistSplit& s, std::size_t n) {
  io::Image im = io::make_image(int(s.height), int(s.width), 1);
  const std::size_t px = s.height * s.width;
  for (std::size_t i = 0; i < px; ++i) im.pixels[i] = float(s.pixels[n * px + i]) / 255.0f;
  return im;
}

/// Writes image n of `s`, normalised, into out (H*W floats).
inline void fashion_normalized(const io::FashionMnistSplit& s, std::size_t n, float mean, float std, float* out) {
  const std::size_t px = s.height * s.width;
  for (std::size_t i = 0; i < px; ++i) out[i] = (float(s.pixels[n * px + i]) / 255.0f - mean) / std;
}

/// Clean top-1 accuracy of `model` on a split (no gradients).
inline double fashion_accuracy(const Model& model, const io::FashionMnistSplit& s, const FashionSetup& f) {
  autograd::NoGrad ng;
  const std::size_t px = s.height * s.width;
  std::size_t correct = 0;
  for (std::size_t b0 = 0; b0 < s.count; b0 += 256) {
    const std::size_t n = std::min<std::size_t>(256, s.count - b0);
    Images x(DynShape<4>(index_t(n), 1, index_t(s.height), index_t(s.width)));
    for (std::size_t k = 0; k < n; ++k) fashion_normalized(s, b0 + k, f.mean, f.std, x.data() + k * px);
    const auto z = model.forward(x).to_vector();
    for (std::size_t k = 0; k < n; ++k) {
      const auto* row = z.data() + k * 10;
      correct += std::size_t(std::max_element(row, row + 10) - row) == s.labels[b0 + k];
    }
  }
  return double(correct) / double(s.count);
}

/// Trains the embedded ViT with AdamW (linear warm-up, cosine decay, random horizontal flips and
/// shifts) through training::train, printing a progress bar with images/s and running loss /
/// accuracy on stderr. The batches come from one sequential RNG (the recipe the cache key names),
/// so this run does not checkpoint: a resumed run would need the RNG's position too.
inline Model train_fashion(const io::FashionMnistSplit& train, const FashionSetup& f) {
  Model model(f.vit, 0);
  auto params = nn::named_parameters<float>(model);
  typename nn::Adam<float>::Options ao;
  ao.lr = f.lr, ao.weight_decay = f.weight_decay;
  auto opt = nn::AdamW<float>(params, ao);
  const std::size_t px = train.height * train.width, W = train.width;
  const std::size_t n_train = f.train_count(train);
  const std::size_t steps_per_epoch = n_train / std::size_t(f.batch);  // drop the ragged last batch
  const std::size_t total = steps_per_epoch * std::size_t(f.epochs), warmup = steps_per_epoch / 2;
  std::vector<std::size_t> order(n_train);
  std::vector<float> tmp(px);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 g(1234);
  double run_loss = 0, run_correct = 0, run_n = 0;  // per epoch
  struct Batch {
    Images x;
    std::vector<std::int64_t> y;
  };
  auto next = [&](std::size_t step, std::size_t) {
    const std::size_t it = step % steps_per_epoch;
    if (it == 0) {  // a new epoch: reshuffle, restart the running figures
      data::portable_shuffle(order, g);
      run_loss = run_correct = run_n = 0;
    }
    Batch b{Images(DynShape<4>(f.batch, 1, index_t(train.height), index_t(W))), std::vector<std::int64_t>(std::size_t(f.batch))};
    for (index_t k = 0; k < f.batch; ++k) {
      const std::size_t n = order[it * std::size_t(f.batch) + std::size_t(k)];
      float* dst = b.x.data() + std::size_t(k) * px;
      fashion_normalized(train, n, f.mean, f.std, dst);
      if (g() & 1)  // horizontal flip: clothes are left-right symmetric, a free augmentation
        for (std::size_t r = 0; r < train.height; ++r) std::reverse(dst + r * W, dst + (r + 1) * W);
      if (f.max_shift > 0) {  // random translation, background (normalised 0) shifted in
        const int span = 2 * f.max_shift + 1;
        const int dy = int(g() % std::uint64_t(span)) - f.max_shift, dx = int(g() % std::uint64_t(span)) - f.max_shift;
        const float bg = (0.0f - f.mean) / f.std;
        const int Hh = int(train.height), Ww = int(W);
        for (int r = 0; r < Hh; ++r)
          for (int c = 0; c < Ww; ++c) {
            const int sr = r - dy, sc = c - dx;
            tmp[std::size_t(r * Ww + c)] = sr >= 0 && sr < Hh && sc >= 0 && sc < Ww ? dst[sr * Ww + sc] : bg;
          }
        std::copy(tmp.begin(), tmp.end(), dst);
      }
      b.y[std::size_t(k)] = train.labels[n];
    }
    return b;
  };
  auto loss_of = [&](Model& m, const Batch& b) {
    auto labels = IndexTensor<DynShape<1>>::from_host(DynShape<1>(f.batch), std::span<const std::int64_t>(b.y));
    Tensor<float, DynShape<2>> logits = m.forward(b.x);
    Tensor<float, Shape<>> loss = nn::cross_entropy(logits, labels);
    const auto z = logits.detach().to_vector();
    for (index_t k = 0; k < f.batch; ++k) {
      const float* row = z.data() + k * 10;
      run_correct += (std::max_element(row, row + 10) - row) == b.y[std::size_t(k)];
    }
    run_loss += double(loss.item()) * double(f.batch);
    run_n += double(f.batch);
    return loss;
  };
  training::LoopOptions lo;
  lo.total_steps = total;
  lo.lr = training::warmup_cosine(f.lr, warmup, total);
  lo.progress = [&](const training::StepReport& r) {
    const std::size_t it = r.step % steps_per_epoch;
    if (it % 10 == 0 || it + 1 == steps_per_epoch) {
      const int bar = int(30.0 * double(it + 1) / double(steps_per_epoch));
      std::fprintf(stderr, "\r  epoch %zu/%d [%s%s] %5zu/%zu  %6.0f img/s  loss %.4f  acc %5.2f%%  lr %.2e ",
                   r.step / steps_per_epoch + 1, f.epochs, std::string(std::size_t(bar), '#').c_str(),
                   std::string(std::size_t(30 - bar), '.').c_str(), (it + 1) * std::size_t(f.batch),
                   steps_per_epoch * std::size_t(f.batch), double((r.step + 1) * std::size_t(f.batch)) / r.seconds,
                   run_loss / run_n, 100 * run_correct / run_n, r.lr);
      std::fflush(stderr);
    }
    if (it + 1 == steps_per_epoch) std::fprintf(stderr, "\n");
  };
  training::train(model, opt, next, loss_of, lo);
  return model;
}

/// The config stored in the checkpoint metadata (JSON), so a cached file describes itself.
inline std::string config_json(const FashionSetup& f) {
  nlohmann::json j = {{"img_size", f.vit.img_size}, {"patch_size", f.vit.patch_size}, {"in_chans", f.vit.in_chans},
                      {"embed_dim", f.vit.embed_dim}, {"depth", f.vit.depth},        {"num_heads", f.vit.num_heads},
                      {"mlp_hidden", f.vit.mlp_hidden}, {"num_classes", f.vit.num_classes}, {"eps", f.vit.eps},
                      {"epochs", f.epochs},           {"batch", f.batch},            {"lr", f.lr},
                      {"weight_decay", f.weight_decay}, {"mean", f.mean},            {"std", f.std},
                      {"holdout", f.holdout},         {"max_shift", f.max_shift}};
  return j.dump();
}

/// Builds a model from a checkpoint's "ttmoe.vit_config" metadata and loads its weights.
inline Model load_fashion_checkpoint(const std::filesystem::path& path) {
  io::SafetensorsFile file(path);
  const auto& meta = file.metadata();
  auto it = meta.find("ttmoe.vit_config");
  if (it == meta.end()) throw std::runtime_error(path.string() + ": no ttmoe.vit_config metadata");
  const auto j = nlohmann::json::parse(it->second);
  models::ViTConfig c;
  c.img_size = j.at("img_size"), c.patch_size = j.at("patch_size"), c.in_chans = j.at("in_chans");
  c.embed_dim = j.at("embed_dim"), c.depth = j.at("depth"), c.num_heads = j.at("num_heads");
  c.mlp_hidden = j.at("mlp_hidden"), c.num_classes = j.at("num_classes"), c.eps = j.at("eps");
  Model m(c, 0);
  nn::load_state(m, file);
  return m;
}

/// The cached model (trained and saved on first use or with `retrain`); prints its clean accuracy.
inline std::filesystem::path ensure_fashion_model(const FashionSetup& f, const std::filesystem::path& dir, bool retrain,
                                                  const io::FashionMnistSplit& train, const io::FashionMnistSplit& test) {
  const auto path = dir / f.cache_name();
  if (!retrain && std::filesystem::exists(path)) {
    try {
      io::SafetensorsFile file(path);
      const auto& meta = file.metadata();
      auto acc = meta.find("ttmoe.clean_test_accuracy");
      fmt::print("Loaded cached model {}\n  clean Fashion-MNIST test accuracy {}%\n", path.string(),
                 acc == meta.end() ? "?" : acc->second);
      return path;
    } catch (const std::exception& e) {
      fmt::print(stderr, "cached model {} unreadable ({}); retraining\n", path.string(), e.what());
    }
  }
  fmt::print("Training the embedded ViT on Fashion-MNIST ({} images, the last {} held out for validation; {} epochs, "
             "AdamW, flips and shifts; cached afterwards)\n",
             f.train_count(train), f.holdout, f.epochs);
  const auto t0 = std::chrono::steady_clock::now();
  Model m = train_fashion(train, f);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double acc = fashion_accuracy(m, test, f);
  const auto tmp = path.string() + ".tmp";  // write then rename: an interrupted run leaves no half file
  nn::save_state(m, tmp, io::timm_names(), io::DType::F32,
                 {{"ttmoe.vit_config", config_json(f)}, {"ttmoe.clean_test_accuracy", fmt::format("{:.2f}", 100 * acc)},
                  {"ttmoe.training_seconds", fmt::format("{:.0f}", secs)}});
  std::filesystem::rename(tmp, path);
  fmt::print("  trained in {:.0f} s; clean Fashion-MNIST test accuracy {:.2f}%; saved {}\n", secs, 100 * acc, path.string());
  return path;
}

/// Sketch-like rendition: Sobel gradient magnitude (an edge map), inverted so edges are dark lines
/// on white paper, like ImageNet-Sketch's pencil drawings.
inline io::Image sketch(const io::Image& im) {
  io::Image out = io::make_image(im.height, im.width, 1);
  auto at = [&](int y, int x) { return im.at(std::clamp(y, 0, im.height - 1), std::clamp(x, 0, im.width - 1), 0); };
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x) {
      const float gx = at(y - 1, x + 1) + 2 * at(y, x + 1) + at(y + 1, x + 1) - at(y - 1, x - 1) - 2 * at(y, x - 1) - at(y + 1, x - 1);
      const float gy = at(y + 1, x - 1) + 2 * at(y + 1, x) + at(y + 1, x + 1) - at(y - 1, x - 1) - 2 * at(y - 1, x) - at(y - 1, x + 1);
      out.at(y, x, 0) = 1.0f - std::min(1.0f, std::sqrt(gx * gx + gy * gy) / 2.0f);
    }
  return out;
}

/// Photographic negative.
inline io::Image inverted(const io::Image& im) {
  io::Image out = im;
  for (auto& v : out.pixels) v = 1.0f - v;
  return out;
}

/// One domain of an embedded stream: its name and how a clean [0,1] image becomes its image
/// (`seed` mixes the stream seed, the domain and the image, so each image has its own noise).
struct FashionDomain {
  std::string name;
  std::function<io::Image(const io::Image&, std::uint64_t seed)> apply;
};

/// The test domains: the 15 ImageNet-C corruptions at `severity`, then "sketch" and "inverted".
inline std::vector<FashionDomain> fashion_test_domains(int severity) {
  std::vector<FashionDomain> d;
  for (auto c : data::corruptions::all_corruptions)
    d.push_back({std::string(data::corruptions::corruption_name(c)), [c, severity](const io::Image& im, std::uint64_t s) {
                   return data::corruptions::corrupt(im, c, severity, s);
                 }});
  d.push_back({"sketch", [](const io::Image& im, std::uint64_t) { return sketch(im); }});
  d.push_back({"inverted", [](const io::Image& im, std::uint64_t) { return inverted(im); }});
  return d;
}

/// The validation domains: ImageNet-C's four extra corruptions (speckle noise, Gaussian blur,
/// spatter, saturate) at `severity` with parameter table `table`, disjoint from every test domain.
/// The default is ImageNet-C's table: under the CIFAR-10-C table that the <= 64 px rule picks, the
/// four barely hurt the 28 px model (speckle sigma at most 0.2), which left a validation stream on
/// which no adaptation rate could be told apart from doing nothing (README, MoETTA section).
inline std::vector<FashionDomain> fashion_validation_domains(
    int severity, data::corruptions::ParameterTable table = data::corruptions::ParameterTable::imagenet) {
  std::vector<FashionDomain> d;
  data::corruptions::CorruptionOptions opt;
  opt.table = table;
  for (auto c : data::corruptions::extra_corruptions)
    d.push_back({std::string(data::corruptions::corruption_name(c)), [c, severity, opt](const io::Image& im, std::uint64_t s) {
                   return data::corruptions::corrupt(im, c, severity, s, opt);
                 }});
  return d;
}

/// Domain names of a domain list.
inline std::vector<std::string> domain_names(const std::vector<FashionDomain>& domains) {
  std::vector<std::string> n;
  for (const auto& d : domains) n.push_back(d.name);
  return n;
}

/// A mixed stream plus its images (normalised, H*W floats each, indexed by StreamItem::ref).
struct FashionStream {
  data::Stream stream;
  std::vector<float> pixels;
};

/// The mixed stream of images [first, first + count) of `split` for one seed: those images are
/// dealt out (a fixed shuffle, the same for every seed) into the domains in equal parts, so every
/// image appears exactly once, under one domain (`per_domain` > 0 caps each part). Seeds differ in
/// the order of the stream and the corruption randomness; an image's corruption seed mixes the
/// stream seed, the domain and the image index.
inline FashionStream make_fashion_stream(const io::FashionMnistSplit& split, std::size_t first, std::size_t count,
                                         const std::vector<FashionDomain>& domains, const FashionSetup& f,
                                         std::size_t per_domain, std::uint64_t seed) {
  if (first + count > split.count) throw std::invalid_argument("make_fashion_stream: image range outside the split");
  std::vector<std::size_t> idx(count);
  std::iota(idx.begin(), idx.end(), first);
  std::mt19937_64 g(2024);
  data::portable_shuffle(idx, g);
  const std::size_t part = count / domains.size(), take = per_domain ? std::min(per_domain, part) : part;
  const std::size_t px = split.height * split.width;
  FashionStream fs;
  fs.pixels.reserve(take * domains.size() * px);
  std::vector<data::DomainItems> mixed;
  for (std::size_t d = 0; d < domains.size(); ++d) {
    std::vector<data::StreamItem> items;
    for (std::size_t k = 0; k < take; ++k) {
      const std::size_t n = idx[d * part + k];
      const io::Image x = domains[d].apply(fashion_image(split, n), seed * 1000003ull + d * 100003ull + n);
      items.push_back({fs.pixels.size() / px, split.labels[n], 0});
      for (float v : x.pixels) fs.pixels.push_back((v - f.mean) / f.std);
    }
    mixed.push_back({domains[d].name, std::move(items)});
  }
  fs.stream = data::mix_domains(mixed, seed);
  return fs;
}

/// EATA's Fisher images: the first `n` clean training images, in batches of `batch`.
inline std::vector<Images> fashion_fisher_batches(const io::FashionMnistSplit& train, const FashionSetup& f, std::size_t n,
                                                  index_t batch) {
  std::vector<Images> out;
  const std::size_t px = train.height * train.width;
  for (std::size_t b0 = 0; b0 < n; b0 += std::size_t(batch)) {
    const std::size_t m = std::min<std::size_t>(std::size_t(batch), n - b0);
    Images x(DynShape<4>(index_t(m), 1, index_t(train.height), index_t(train.width)));
    for (std::size_t k = 0; k < m; ++k) fashion_normalized(train, b0 + k, f.mean, f.std, x.data() + k * px);
    out.push_back(x);
  }
  return out;
}

}  // namespace moetta_example
