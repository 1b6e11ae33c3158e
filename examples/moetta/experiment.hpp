#pragma once
// The part of the example shared by the embedded (Fashion-MNIST) and full-scale (ImageNet) runs:
// running a registered method over a stream with progress on stderr, feeding batches through the
// background loader, and the expert-similarity figure (tables and the cumulative-accuracy figure
// come from examples/common).

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ttmoe/data/streams.hpp>
#include <ttmoe/data/streams_loader.hpp>
#include <ttmoe/plot/heatmap.hpp>
#include <ttmoe/ttmoe.hpp>  // the CPU backend the models run on
#include <ttmoe/models/vit.hpp>
#include <ttmoe/tta/tta.hpp>

#include "../common/tta_figures.hpp"
#include "../common/tta_hyper.hpp"
#include "../common/tta_table.hpp"

namespace moetta_example {

using tta_common::display_name;
using tta_common::domain_table;
using tta_common::Hyper;
using tta_common::HyperSet;
using tta_common::mean_std;
using tta_common::save_cumulative_accuracy;
using tta_common::Results;
using tta_common::summary_table;

using namespace ttmoe;
using Model = models::VisionTransformer<float>;
using Images = Tensor<float, DynShape<4>>;

/// Geometry of the model input, enough to assemble batches.
struct Geometry {
  index_t channels = 3, height = 224, width = 224;
  std::size_t floats() const { return std::size_t(channels * height * width); }
};

/// A tta::BatchSource over `stream`, batches of `batch` items assembled on a background thread by
/// `fill(item, out)` (which writes one preprocessed image of g.floats() floats). The loader is owned
/// by the returned callable, so it lives exactly as long as the stream is being consumed.
inline tta::BatchSource<float> loader_source(const data::Stream& stream, index_t batch, Geometry g,
                                             std::function<void(const data::StreamItem&, float*)> fill,
                                             std::size_t capacity = 4) {
  const std::size_t n = stream.items.size(), nb = (n + std::size_t(batch) - 1) / std::size_t(batch);
  auto items = std::make_shared<std::vector<data::StreamItem>>(stream.items);
  auto produce = [items, batch, g, fill](std::size_t i) {
    const std::size_t b0 = i * std::size_t(batch), b1 = std::min(items->size(), b0 + std::size_t(batch));
    tta::Batch<float> out;
    out.images = Images(DynShape<4>(index_t(b1 - b0), g.channels, g.height, g.width));
    for (std::size_t k = b0; k < b1; ++k) {
      fill((*items)[k], out.images.data() + (k - b0) * g.floats());
      out.labels.push_back((*items)[k].label);
      out.domains.push_back((*items)[k].domain);
    }
    return out;
  };
  auto loader = std::make_shared<data::BackgroundLoader<tta::Batch<float>>>(nb, produce, capacity);
  return [loader]() { return loader->next(); };
}

/// Runs the registered method `name` with hyper-parameters `h` over `source` on `model`, printing
/// progress (batches, images/s, running accuracy) on stderr. `fisher` feeds EATA; `seed` seeds
/// MoETTA's routers.
inline tta::Report run_method(const std::string& name, const Hyper& h, Model& model,
                              const tta::BatchSource<float>& source, std::size_t total_batches,
                              const std::vector<Images>& fisher, std::uint64_t seed, const std::string& label) {
  auto progress = [&](const tta::Progress& p) {
    if (p.batches % 4 && std::size_t(p.batches) != total_batches) return;
    std::fprintf(stderr, "\r  %-22s batch %4lld/%-4zu  %7.1f img/s  running acc %6.2f%%   ", label.c_str(),
                 (long long)p.batches, total_batches, p.images_per_second, 100 * p.accuracy);
    std::fflush(stderr);
  };
  auto method = tta::make_method<Model>(name, h, tta::MethodContext<float>{fisher, seed});
  tta::Report r = tta::run(model, method, source, progress);
  std::fprintf(stderr, "\n");
  return r;
}

/// Cosine similarity of the expert parameter vectors (weight_delta[e] || bias_delta[e]) of one
/// MoE-LayerNorm, E x E row-major. An expert that was never updated has a zero vector: its cosine
/// is undefined and is reported as NaN (drawn gray) rather than faked.
inline std::vector<double> expert_similarity(const moe::MoELayerNorm<float>& layer) {
  const index_t E = layer.experts.weight_delta.extent(0), Dm = layer.experts.weight_delta.extent(1);
  const auto w = layer.experts.weight_delta.detach().to_vector(), b = layer.experts.bias_delta.detach().to_vector();
  auto dot = [&](index_t i, index_t j) {
    double s = 0;
    for (index_t k = 0; k < Dm; ++k) s += double(w[i * Dm + k]) * w[j * Dm + k] + double(b[i * Dm + k]) * b[j * Dm + k];
    return s;
  };
  std::vector<double> out(std::size_t(E * E));
  for (index_t i = 0; i < E; ++i)
    for (index_t j = 0; j < E; ++j) {
      const double n = std::sqrt(dot(i, i) * dot(j, j));
      out[std::size_t(i * E + j)] = n > 0 ? dot(i, j) / n : std::nan("");
    }
  return out;
}

/// Figure 4 of the paper: the expert-similarity heat map of every MoE-LayerNorm of `model`.
inline void save_expert_similarity(const Model& model, const std::filesystem::path& path, const std::string& title) {
  plot::HeatmapGrid g;
  g.title = title;
  const auto layers = model.moe_layers();
  const auto idx = model.moe_layer_indices();
  g.columns = layers.size() > 12 ? 6 : 4;
  for (std::size_t k = 0; k < layers.size(); ++k) {
    const index_t E = layers[k]->experts.weight_delta.extent(0);
    g.tiles.push_back({model.layernorm_name(idx[k]), int(E), int(E), expert_similarity(*layers[k])});
  }
  plot::save(g, path);
}

}  // namespace moetta_example
