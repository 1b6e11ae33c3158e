#pragma once
// PEFT LoRA adapters on a Llama-family model (models/peft_adapter.hpp reads and writes the files).
// The adaptable modules are the seven projections of every layer (self_attn.{q,k,v,o}_proj,
// mlp.{gate,up,down}_proj), named as in Hugging Face (model.layers.3.mlp.up_proj).
// AttachedAdapters puts several adapters with per-adapter weights w_k on the model at once, stacked
// per module by moe::stack_lora (A_cat = [w_k s_k A_k], B_cat = [B_k]), either
//  - unmerged: each Linear computes x W^T + (x A_cat^T) B_cat^T (nn::Linear's low-rank update), or
//  - merged:   each W is replaced by W + B_cat A_cat = W + sum_k w_k s_k B_k A_k (one GEMM).
// remove() (or the destructor) puts back the very tensors it replaced, so the model is restored
// bit for bit; merged mode therefore holds the original weights of the adapted modules alongside.

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ttmoe/io/safetensors_file.hpp"
#include "ttmoe/models/llama.hpp"
#include "ttmoe/models/peft_adapter.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"

namespace ttmoe::models {

/// The model's adaptable Linear modules by dotted HF name (model.layers.{i}.self_attn.q_proj, ...);
/// `Model` is a LlamaForCausalLM, const or not (the pointers then are too).
template <class Model>
auto adaptable_linears(Model& m) {
  using L = std::remove_reference_t<decltype((m.model.layers[0].self_attn.q_proj))>;
  std::map<std::string, L*> out;
  for (std::size_t i = 0; i < m.model.layers.size(); ++i) {
    auto& l = m.model.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out[p + "self_attn.q_proj"] = &l.self_attn.q_proj;
    out[p + "self_attn.k_proj"] = &l.self_attn.k_proj;
    out[p + "self_attn.v_proj"] = &l.self_attn.v_proj;
    out[p + "self_attn.o_proj"] = &l.self_attn.o_proj;
    out[p + "mlp.gate_proj"] = &l.mlp.gate_proj;
    out[p + "mlp.up_proj"] = &l.mlp.up_proj;
    out[p + "mlp.down_proj"] = &l.mlp.down_proj;
  }
  return out;
}

/// [out, in] of every adaptable Linear of `m` (what load_peft_adapter checks a file against).
template <class T, class D>
LinearShapes linear_shapes(const LlamaForCausalLM<T, D>& m) {
  LinearShapes out;
  for (const auto& [name, lin] : adaptable_linears(m)) out[name] = {lin->out_features(), lin->in_features()};
  return out;
}

/// Loads the PEFT adapter folder `dir` for the base model `m` (see load_peft_adapter above).
template <class T, class D>
PeftAdapter<T, D> load_peft_adapter(const std::filesystem::path& dir, const LlamaForCausalLM<T, D>& m) {
  return load_peft_adapter<T, D>(dir, linear_shapes(m));
}

/// A fresh trainable adapter for `m`: every module `config` selects gets PEFT's initialisation
/// (moe::LoRALinear::wrap: A Kaiming-uniform, B zero, so the model starts unchanged), its rank and
/// scale from the config. Throws ValueError when the config selects no module.
template <class T, class D>
PeftAdapter<T, D> make_lora_adapter(LlamaForCausalLM<T, D>& m, const LoraAdapterConfig& config, std::uint64_t seed = 0) {
  PeftAdapter<T, D> a;
  a.config = config;
  std::mt19937_64 rng(seed);
  for (const auto& [name, lin] : adaptable_linears(m)) {
    if (!config.targets(name)) continue;
    if (lin->weight_bf16.defined())  // LoRA training needs the F32 weight on the tape
      throw ValueError("make_lora_adapter: module '" + name +
                       "' keeps its weight as BF16 (inference only); load the model with WeightPrecision::f32");
    auto l = moe::LoRALinear<T, D>::wrap(lin->weight, lin->bias, config.rank_for(name), config.alpha_for(name), rng);
    auto& mod = a.modules[name];
    mod.lora_A = l.lora_A;
    mod.lora_B = l.lora_B;
    mod.scaling = config.scaling_for(name);
  }
  if (a.modules.empty()) throw ValueError("make_lora_adapter: target_modules selects none of the model's Linear modules");
  return a;
}

/// How attached adapters act on the model.
enum class LoraMode {
  unmerged,  ///< y = x W^T + (x A_cat^T) B_cat^T: weights untouched, two thin GEMMs per module
  merged     ///< W += B_cat A_cat: no cost per token, one extra copy of the adapted weights held
};

/// One adapter and its weight w in a combination (the output moves by w s B A x).
template <class T = float, class D = cpu>
struct WeightedAdapter {
  const PeftAdapter<T, D>* adapter = nullptr;
  double weight = 1.0;
};

/// One adapted Linear of a model and the stacked factors of every adapter that changes it.
template <class T = float, class D = cpu>
struct StackedModule {
  nn::Linear<T, D>* linear = nullptr;
  moe::StackedLoRA<T, D> factors;  ///< A_cat = [w_k s_k A_k] [sum r_k, in], B_cat = [B_k] [out, sum r_k]
};

/// Stacks `adapters` per Linear module of `m` (moe::stack_lora, weights and scales folded into A),
/// keyed by the module's dotted name. An adapter whose modules or shapes do not fit `m` throws
/// nn::CheckpointError naming its folder, each module and the shapes; nothing is changed.
template <class T, class D>
std::map<std::string, StackedModule<T, D>> stack_adapters(LlamaForCausalLM<T, D>& m,
                                                          const std::vector<WeightedAdapter<T, D>>& adapters) {
  auto linears = adaptable_linears(m);
  std::vector<std::string> problems;
  std::map<std::string, std::vector<std::pair<const LoraModule<T, D>*, double>>> per_module;
  auto shape = [](const Tensor<T, DynShape<2>, D>& t) {
    // io's formatter, not "[" + ... chains: GCC 12 at -O3 reports a false -Wrestrict (bug 105329)
    // in `const char* + std::string&&` once this lambda is inlined.
    const std::int64_t dims[2] = {std::int64_t(t.extent(0)), std::int64_t(t.extent(1))};
    return io::format_shape(dims);
  };
  for (const auto& wa : adapters) {
    if (wa.adapter == nullptr) throw ValueError("AttachedAdapters: null adapter");
    for (const auto& [name, mod] : wa.adapter->modules) {
      const std::string from = (wa.adapter->source.empty() ? std::string("adapter") : wa.adapter->source) + ": ";
      const auto it = linears.find(name);
      if (it == linears.end()) {
        problems.push_back(from + "unknown module '" + name + "' (the model has no adaptable Linear of that name)");
        continue;
      }
      const auto& W = *it->second;  // in/out features whether the weight is F32 or BF16-resident
      if (mod.lora_A.weight.extent(1) != W.in_features() || mod.lora_B.weight.extent(0) != W.out_features() ||
          mod.lora_B.weight.extent(1) != mod.rank())
        problems.push_back(from + "module '" + name + "': lora_A " + shape(mod.lora_A.weight) + " and lora_B " +
                           shape(mod.lora_B.weight) + " do not fit the weight [out, in] = [" +
                           std::to_string(W.out_features()) + ", " + std::to_string(W.in_features()) + "]");
      else
        per_module[name].emplace_back(&mod, wa.weight);
    }
  }
  if (!problems.empty()) throw nn::CheckpointError("AttachedAdapters", std::move(problems));
  autograd::NoGrad ng;
  std::map<std::string, StackedModule<T, D>> out;
  for (const auto& [name, mods] : per_module) {
    std::vector<Tensor<T, DynShape<2>, D>> As, Bs;
    std::vector<T> weights, scalings;
    for (const auto& [mod, w] : mods) {
      As.push_back(mod->lora_A.weight.detach());
      Bs.push_back(mod->lora_B.weight.detach());
      weights.push_back(T(w));
      scalings.push_back(T(mod->scaling));
    }
    out[name] = {linears.at(name), moe::stack_lora(As, Bs, weights, scalings)};
  }
  return out;
}

/// Adapters attached to a model; the model is restored exactly by remove() or on destruction.
/// Attachments nest: a second one on the same model must be removed (or destroyed) first.
template <class T = float, class D = cpu>
class AttachedAdapters {
 public:
  /// Attaches `adapters` to `m` (which must outlive this object) in `mode`. An adapter whose
  /// modules or shapes do not fit `m` throws nn::CheckpointError naming its folder, each module and
  /// the shapes, leaving the model unchanged.
  AttachedAdapters(LlamaForCausalLM<T, D>& m, const std::vector<WeightedAdapter<T, D>>& adapters, LoraMode mode)
      : mode_(mode) {
    auto stacked = stack_adapters(m, adapters);  // checks everything before changing anything
    // A BF16-resident weight is read-only (it may alias the checkpoint): adapters act unmerged on it.
    if (mode == LoraMode::merged)
      for (const auto& [name, sm] : stacked)
        if (sm.linear->weight_bf16.defined())
          throw ValueError("AttachedAdapters: module '" + name +
                           "' keeps its weight as BF16 (inference only); merged LoRA needs F32 weights, "
                           "use LoraMode::unmerged or load with WeightPrecision::f32");
    autograd::NoGrad ng;
    for (auto& [name, sm] : stacked) {
      nn::Linear<T, D>& lin = *sm.linear;
      saved_.push_back({&lin, lin.weight, lin.delta_A, lin.delta_B});
      if (mode == LoraMode::unmerged) {
        lin.delta_A = sm.factors.A_cat;
        lin.delta_B = sm.factors.B_cat;
      } else {
        lin.weight = Tensor<T, DynShape<2>, D>(lin.weight.detach() + moe::merged_delta(sm.factors));
      }
    }
  }
  AttachedAdapters(const AttachedAdapters&) = delete;
  AttachedAdapters& operator=(const AttachedAdapters&) = delete;
  AttachedAdapters(AttachedAdapters&& o) noexcept : mode_(o.mode_), saved_(std::move(o.saved_)) { o.saved_.clear(); }
  AttachedAdapters& operator=(AttachedAdapters&&) = delete;
  ~AttachedAdapters() { remove(); }

  /// Puts back every tensor the attachment replaced (a no-op the second time).
  void remove() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      it->linear->weight = it->weight;
      it->linear->delta_A = it->delta_A;
      it->linear->delta_B = it->delta_B;
    }
    saved_.clear();
  }
  /// How the adapters act.
  LoraMode mode() const { return mode_; }
  /// How many Linear modules the adapters change.
  std::size_t module_count() const { return saved_.size(); }

 private:
  struct Saved {
    nn::Linear<T, D>* linear;
    Tensor<T, DynShape<2>, D> weight, delta_A, delta_B;
  };
  LoraMode mode_;
  std::vector<Saved> saved_;
};

}  // namespace ttmoe::models
