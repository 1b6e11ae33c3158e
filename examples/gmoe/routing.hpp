#pragma once
// The paper's expert-specialisation picture: for a trained GMoE, which expert each domain's tokens are
// sent to, per MoE layer. A tile per (held-out run, MoE layer); rows are domains, columns experts, the
// value the fraction of that domain's tokens (class token included) whose top-1 pick is the expert
// (picks dropped for capacity count where they were sent: the router's choice is what is drawn).

#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <ttmoe/autograd/tape.hpp>
#include <ttmoe/data/domainbed_loader.hpp>
#include <ttmoe/models/gmoe.hpp>
#include <ttmoe/plot/heatmap.hpp>

namespace gmoe_example {

/// usage[layer][domain * E + expert]: fraction of the domain's tokens routed to the expert (top-1 pick),
/// over the images `indices[domain]` of each domain, evaluated without noise.
inline std::vector<std::vector<double>> expert_usage(ttmoe::models::GMoEVisionTransformer<float>& model,
                                                     const ttmoe::data::DomainBedDataset& ds,
                                                     const std::vector<std::vector<std::size_t>>& indices,
                                                     const ttmoe::data::EvalTransform& eval, int channels) {
  using namespace ttmoe;
  const auto layers = model.moe_layers();
  const std::size_t E = std::size_t(model.config.num_experts), domains = ds.environments.size();
  std::vector<std::vector<double>> usage(layers.size(), std::vector<double>(domains * E, 0.0));
  model.training = false;
  autograd::NoGrad no_grad;
  for (std::size_t d = 0; d < domains; ++d) {
    std::vector<double> tokens(layers.size(), 0.0);
    auto stream = data::evaluation_stream(ds, d, indices[d], eval, channels, 64);
    while (auto b = stream.next()) {
      const auto n = index_t(b->size());
      model.forward(Tensor<float, DynShape<4>>::from_host(
          DynShape<4>(n, index_t(b->channels), index_t(b->height), index_t(b->width)), std::span<const float>(b->images)));
      for (std::size_t l = 0; l < layers.size(); ++l) {
        const auto& r = layers[l]->routing;
        const std::size_t k = std::size_t(r.plan.top_k);
        for (std::size_t t = 0; t < r.top_index.size(); t += k) usage[l][d * E + std::size_t(r.top_index[t])] += 1;
        tokens[l] += double(r.top_index.size() / k);
      }
    }
    for (std::size_t l = 0; l < layers.size(); ++l)
      for (std::size_t e = 0; e < E; ++e) usage[l][d * E + e] /= tokens[l] > 0 ? tokens[l] : 1.0;
  }
  return usage;
}

/// One tile per (run, MoE layer): `runs[i]` is (title, usage from expert_usage).
inline void save_routing_figure(const std::vector<std::pair<std::string, std::vector<std::vector<double>>>>& runs,
                                const std::vector<std::size_t>& moe_blocks, const std::vector<std::string>& domains,
                                std::size_t experts,
                                const std::string& title, const std::filesystem::path& path) {
  ttmoe::plot::HeatmapGrid g;
  g.title = title;
  g.vmin = 0, g.vmax = 1;
  g.columns = int(moe_blocks.size());
  g.tile_px = 180;
  g.row_labels = domains;
  for (std::size_t e = 0; e < experts; ++e) g.col_labels.push_back(fmt::format("e{}", e));
  for (const auto& [name, usage] : runs)
    for (std::size_t l = 0; l < usage.size(); ++l)
      g.tiles.push_back({fmt::format("{} block {}", name, moe_blocks[l]), int(domains.size()), int(experts), usage[l]});
  if (!path.parent_path().empty()) std::filesystem::create_directories(path.parent_path());
  ttmoe::plot::save(g, path);
}

}  // namespace gmoe_example
