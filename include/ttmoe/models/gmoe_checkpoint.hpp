#pragma once
// GMoE checkpoints in the authors' layout (GMoE's vision_transformer with Tutel's moe_layer, saved
// by DomainBed with a `model.` prefix, which is accepted and optional):
//   blocks.{i}.mlp.gates.0.cosine_projector.{weight [R, D], bias [R]}
//   blocks.{i}.mlp.gates.0.sim_matrix [R, E]        blocks.{i}.mlp.gates.0.temperature [1]
//   blocks.{i}.mlp.experts.batched_fc1_w [E, H, D]  blocks.{i}.mlp.experts.batched_fc1_bias [E, H]
//   blocks.{i}.mlp.experts.batched_fc2_w [E, H, D]  blocks.{i}.mlp.experts.batched_fc2_bias [E, D]
//   blocks.{i}.mlp._num_global_experts (int64 scalar)
// fc2 is stored transposed (Tutel computes y = h @ batched_fc2_w[e]). The rest are timm's names.
//
// Loading goes through nn::load_state, so a checkpoint is checked completely before anything is
// written: GMoECheckpointSource presents the file under the module's names (one [H, D] slice per
// expert, fc2 transposed back, the temperature as a scalar), so a wrong expert count shows as
// missing / unexpected experts and a wrong width as a shape mismatch, all in one CheckpointError.

#include <cstdint>
#include <filesystem>
#include <map>
#include <regex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/models/gmoe.hpp"

namespace ttmoe::models {

namespace detail {
/// Router names: module (moe::CosineRouter) <-> Tutel's CosineTopKGate, both after "blocks.{i}.mlp.".
inline const std::vector<std::pair<std::string, std::string>>& gmoe_router_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"router.proj.", "gates.0.cosine_projector."},
      {"router.codebook", "gates.0.sim_matrix"},
      {"router.log_scale", "gates.0.temperature"},
  };
  return names;
}

/// Replaces the first `from` part of `name` found after ".mlp." by `to`, over a rename table read in
/// the direction given (module -> file or file -> module); other names are returned unchanged.
inline std::string gmoe_rename(const std::string& name, bool to_file) {
  const auto at = name.find(".mlp.");
  if (at == std::string::npos) return name;
  const std::string head = name.substr(0, at + 5), tail = name.substr(at + 5);
  for (const auto& [module_part, file_part] : gmoe_router_names()) {
    const std::string& from = to_file ? module_part : file_part;
    const std::string& to = to_file ? file_part : module_part;
    if (tail.compare(0, from.size(), from) == 0) return head + to + tail.substr(from.size());
  }
  return name;
}

/// The four batched expert tensors of Tutel's FusedExpertsNetwork and the module parameter each slice is.
struct BatchedExpertKey {
  const char* file;    ///< after "blocks.{i}.mlp.experts."
  const char* module;  ///< after "blocks.{i}.mlp.experts.{e}."
  bool transposed;     ///< slice stored [in, out] (fc2)
};
inline const std::vector<BatchedExpertKey>& batched_expert_keys() {
  static const std::vector<BatchedExpertKey> keys = {
      {"batched_fc1_w", "fc1.weight", false},
      {"batched_fc1_bias", "fc1.bias", false},
      {"batched_fc2_w", "fc2.weight", true},
      {"batched_fc2_bias", "fc2.bias", false},
  };
  return keys;
}
}  // namespace detail

/// A GMoE checkpoint in the authors' layout seen under the module's parameter names (an nn::TensorSource
/// for nn::load_state). The constructor checks that each MoE block's batched tensors agree with each
/// other and with `_num_global_experts`, and throws nn::CheckpointError naming the file keys if not.
class GMoECheckpointSource {
 public:
  /// Wraps `file` (kept by reference). Keys under DomainBed's `model.` prefix are read without it
  /// when the file has `model.cls_token`.
  explicit GMoECheckpointSource(const io::SafetensorsFile& file) : file_(file) {
    prefix_ = file.contains("model.cls_token") ? "model." : "";
    static const std::regex batched(R"(^(blocks\.\d+\.mlp\.)experts\.(batched_\w+)$)");
    static const std::regex count(R"(^(blocks\.\d+\.mlp\.)_num_global_experts$)");
    std::vector<std::string> problems;
    std::map<std::string, std::int64_t> experts_of_block;  // block prefix -> E from the batched tensors
    for (const auto& full : file.names()) {
      if (full.compare(0, prefix_.size(), prefix_) != 0) {
        add(full, full, file.info(full), -1, false);  // not part of the model: reported as unexpected
        continue;
      }
      const std::string key = full.substr(prefix_.size());
      std::smatch m;
      if (std::regex_match(key, m, count)) {
        counts_[m[1].str()] = full;
        continue;
      }
      if (std::regex_match(key, m, batched)) {
        add_batched(full, m[1].str(), m[2].str(), experts_of_block, problems);
        continue;
      }
      io::TensorInfo info = file.info(full);
      const std::string name = detail::gmoe_rename(key, false);
      if (name != key && key.ends_with("temperature") && info.shape == std::vector<std::int64_t>{1})
        info.shape.clear();  // Tutel's [1] temperature is the router's scalar log_scale
      add(name, full, info, -1, false);
    }
    for (const auto& [block, full] : counts_) {
      std::int64_t n = 0;
      file.read_as<std::int64_t>(full, std::span<std::int64_t>(&n, 1));
      const auto it = experts_of_block.find(block);
      if (it == experts_of_block.end())
        problems.push_back("'" + full + "' = " + std::to_string(n) + " but the block has no batched experts");
      else if (it->second != n)
        problems.push_back("'" + full + "' = " + std::to_string(n) + " but the batched expert tensors hold " +
                           std::to_string(it->second) + " experts");
    }
    if (!problems.empty()) throw nn::CheckpointError(file.path(), std::move(problems));
  }

  /// The file's path (for messages).
  std::string path() const { return file_.path(); }
  /// Whether module parameter `name` is in the file.
  bool contains(std::string_view name) const { return entries_.count(std::string(name)) != 0; }
  /// Stored dtype and the shape the module parameter `name` gets (a slice for experts).
  const io::TensorInfo& info(std::string_view name) const { return entry(name).info; }
  /// Every module parameter name the file provides.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, e] : entries_) out.push_back(n);
    return out;
  }

  /// Reads module parameter `name` into dst (an expert's slice of the batched tensor, fc2 transposed back).
  template <class T>
  void read_as(std::string_view name, std::span<T> dst) const {
    const Entry& e = entry(name);
    if (e.expert < 0) {
      file_.read_as<T>(e.file_key, dst);
      return;
    }
    const auto& s = file_.info(e.file_key).shape;  // [E, a] or [E, a, b]
    std::vector<T> all(file_.info(e.file_key).numel());
    file_.read_as<T>(e.file_key, std::span<T>(all));
    const std::size_t per = all.size() / std::size_t(s[0]);
    const T* src = all.data() + std::size_t(e.expert) * per;
    if (!e.transposed) {
      std::copy(src, src + per, dst.begin());
      return;
    }
    const std::size_t rows = std::size_t(s[1]), cols = std::size_t(s[2]);  // stored [H, D], wanted [D, H]
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
  }

 private:
  struct Entry {
    std::string file_key;
    io::TensorInfo info;
    std::int64_t expert = -1;  ///< slice of a batched tensor, or -1
    bool transposed = false;
  };

  const Entry& entry(std::string_view name) const {
    const auto it = entries_.find(std::string(name));
    if (it == entries_.end()) throw nn::CheckpointError(file_.path(), {"no tensor for parameter '" + std::string(name) + "'"});
    return it->second;
  }

  void add(std::string name, std::string file_key, io::TensorInfo info, std::int64_t expert, bool transposed) {
    info.name = name;
    entries_[name] = Entry{std::move(file_key), std::move(info), expert, transposed};
  }

  /// One module entry per expert of batched tensor `full` (block prefix `block`, Tutel name `what`).
  void add_batched(const std::string& full, const std::string& block, const std::string& what,
                   std::map<std::string, std::int64_t>& experts_of_block, std::vector<std::string>& problems) {
    const io::TensorInfo& info = file_.info(full);
    const detail::BatchedExpertKey* k = nullptr;
    for (const auto& c : detail::batched_expert_keys())
      if (what == c.file) k = &c;
    const std::size_t rank = what.ends_with("_w") ? 3 : 2;
    if (k == nullptr || info.shape.size() != rank) {
      problems.push_back("'" + full + "': " + (k == nullptr ? "not a Tutel expert tensor" : "shape " +
                         nn::detail::shape_str(info.shape) + " is not [experts, ...] of rank " + std::to_string(rank)));
      return;
    }
    const std::int64_t E = info.shape[0];
    const auto [it, fresh] = experts_of_block.emplace(block, E);
    if (!fresh && it->second != E) {
      problems.push_back("'" + full + "' holds " + std::to_string(E) + " experts but another expert tensor of " +
                         block + " holds " + std::to_string(it->second));
      return;
    }
    io::TensorInfo slice = info;
    slice.shape.erase(slice.shape.begin());
    if (k->transposed) std::swap(slice.shape[0], slice.shape[1]);
    for (std::int64_t e = 0; e < E; ++e)
      add(block + "experts." + std::to_string(e) + "." + k->module, full, slice, e, k->transposed);
  }

  const io::SafetensorsFile& file_;
  std::string prefix_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> counts_;  ///< block prefix -> its _num_global_experts key
};

/// Loads a GMoE checkpoint in the authors' layout (see the file comment) into `model`, which must
/// have the same MoE blocks, expert count and sizes; throws nn::CheckpointError listing every
/// mismatch before anything is written.
template <class T, class D>
nn::LoadReport load_gmoe(GMoEVisionTransformer<T, D>& model, const std::filesystem::path& path,
                         const nn::LoadOptions& opt = {}) {
  io::SafetensorsFile f(path);
  GMoECheckpointSource src(f);
  return nn::load_state(model, src, io::timm_names(), opt);
}

/// Saves `model` in the authors' layout under `prefix` ("" or DomainBed's "model."), as `dtype`.
template <class T, class D>
void save_gmoe(GMoEVisionTransformer<T, D>& model, const std::filesystem::path& path, const std::string& prefix = "",
               io::DType dtype = io::DType::F32) {
  io::SafetensorsWriter w;
  std::map<std::string, const moe::GMoEFFN<T, D>*> layers;  // "blocks.{i}.mlp." -> layer
  for (std::size_t i = 0; i < model.moe.size(); ++i)
    if (model.moe[i]) layers["blocks." + std::to_string(i) + ".mlp."] = &*model.moe[i];
  nn::for_each_parameter(model, [&](const std::string& name, auto& t) {
    if (name.find(".mlp.experts.") != std::string::npos) return;  // written batched below
    const auto e = t.extents();
    std::vector<std::int64_t> shape(e.begin(), e.end());
    if (name.ends_with("router.log_scale")) shape = {1};  // Tutel's temperature is [1]
    w.add(prefix + detail::gmoe_rename(name, true), std::span<const T>(t.data(), std::size_t(t.numel())), shape, dtype);
  });
  for (const auto& [block, layer] : layers) {
    const auto E = std::int64_t(layer->experts.size());
    for (const auto& k : detail::batched_expert_keys()) {
      std::vector<T> all;
      std::vector<std::int64_t> shape;
      for (const auto& ex : layer->experts) {
        const std::string m = k.module;
        const auto& lin = m.starts_with("fc1") ? ex.fc1 : ex.fc2;
        const bool weight = m.ends_with("weight");
        const auto v = weight ? lin.weight.to_vector() : lin.bias.to_vector();
        if (!k.transposed) {
          all.insert(all.end(), v.begin(), v.end());
          if (weight) shape = {E, std::int64_t(lin.weight.extent(0)), std::int64_t(lin.weight.extent(1))};
          else shape = {E, std::int64_t(lin.bias.extent(0))};
          continue;
        }
        const std::size_t rows = std::size_t(lin.weight.extent(0)), cols = std::size_t(lin.weight.extent(1));  // [D, H]
        for (std::size_t c = 0; c < cols; ++c)
          for (std::size_t r = 0; r < rows; ++r) all.push_back(v[r * cols + c]);
        shape = {E, std::int64_t(cols), std::int64_t(rows)};
      }
      w.add(prefix + block + "experts." + k.file, std::span<const T>(all), shape, dtype);
    }
    const std::int64_t count = E;
    w.add(prefix + block + "_num_global_experts", std::span<const std::int64_t>(&count, 1), {}, io::DType::I64);
  }
  w.set_metadata("format", "pt");
  w.write(path);
}

/// A GMoE initialised from a timm / DeiT ViT checkpoint (timm names, e.g. deit_small_patch16_224's
/// safetensors): the ViT of c.vit is loaded with `opt` (e.g. skip {"head.*"} for another class count),
/// then each MoE block's experts are copies of its dense MLP and its router is fresh (seeded).
template <class T = float, class D = cpu>
GMoEVisionTransformer<T, D> gmoe_from_vit_checkpoint(const std::filesystem::path& path, const GMoEConfig& c,
                                                     std::uint64_t seed = 0, const nn::LoadOptions& opt = {}) {
  VisionTransformer<T, D> vit(c.vit, seed);
  nn::load_state(vit, path, io::timm_names(), opt);
  return GMoEVisionTransformer<T, D>::from_vit(std::move(vit), c, seed);
}

}  // namespace ttmoe::models
