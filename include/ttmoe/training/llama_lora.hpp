#pragma once
// LoRA training of a Llama-family causal LM (PEFT's recipe): the base model frozen, only every
// adapted module's lora_A / lora_B trained, on the shifted, masked cross-entropy of
// models/llama_loss.hpp, with AdamW (decoupled weight decay) through the shared loop (training::train:
// gradient accumulation, schedule, checkpoints of the adapter and its optimiser state).
// Defaults are the TTMM paper's expert training: AdamW lr 2e-4, betas (0.9, 0.999), eps 1e-8,
// weight decay 0.01; the adapter's rank / alpha / targets come from its config (make_lora_adapter).
//
// Memory: the factors ride on nn::Linear's unmerged low-rank update, bound afresh on every forward as
// delta_A = A and delta_B = s B (a recorded scale, so the gradient reaches B). With the base frozen a
// projection keeps no copy of its input for a weight gradient (ops/linear.hpp saves x only when W
// needs a gradient); the low-rank branch keeps the same x buffer once (for dA) and x A^T [M, r].

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/models/llama_loss.hpp"
#include "ttmoe/models/llama_lora.hpp"
#include "ttmoe/nn/optim_adam.hpp"
#include "ttmoe/training/loop.hpp"

namespace ttmoe::training {

/// How train_lora trains.
struct LoraTrainOptions {
  /// AdamW with the TTMM defaults (`decoupled` is forced on).
  nn::AdamOptions adam{.lr = 2e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .decoupled = true};
  /// Steps, micro-batches per step, schedule, progress, checkpoints (training::train).
  LoopOptions loop;
};

/// While alive: `m`'s parameters are frozen (their requires_grad flags restored on destruction), the
/// adapter's factors are trainable, and bind() puts them on the adapted Linear modules as an
/// unmerged update. The modules' previous updates are restored on destruction.
template <class T, class D>
class LoraTrainingAttachment {
 public:
  /// Throws nn::CheckpointError when a module of `a` is not an adaptable Linear of `m` or its factors
  /// do not fit it (nothing is changed then).
  LoraTrainingAttachment(models::LlamaForCausalLM<T, D>& m, models::PeftAdapter<T, D>& a) {
    auto linears = models::adaptable_linears(m);
    std::vector<std::string> problems;
    for (auto& [name, mod] : a.modules) {
      const auto it = linears.find(name);
      if (it == linears.end()) {
        problems.push_back("unknown module '" + name + "' (the model has no adaptable Linear of that name)");
        continue;
      }
      const auto& W = it->second->weight;
      if (mod.lora_A.weight.extent(1) != W.extent(1) || mod.lora_B.weight.extent(0) != W.extent(0) ||
          mod.lora_B.weight.extent(1) != mod.rank())
        problems.push_back("module '" + name + "': lora_A " + mod.lora_A.weight.shape().to_string() + " and lora_B " +
                           mod.lora_B.weight.shape().to_string() + " do not fit the weight [out, in] = " +
                           W.shape().to_string());
      else
        bound_.push_back({it->second, &mod, it->second->delta_A, it->second->delta_B});
    }
    if (!problems.empty())
      throw nn::CheckpointError(a.source.empty() ? std::string("LoRA training") : a.source, std::move(problems));
    nn::for_each_parameter(m, [&](const std::string&, auto& p) {
      if (!p.requires_grad()) return;
      p.set_requires_grad(false);
      unfreeze_.push_back([&p] { p.set_requires_grad(true); });  // m's members: the address is stable
    });
    for (auto& b : bound_) {
      b.module->lora_A.weight.set_requires_grad();
      b.module->lora_B.weight.set_requires_grad();
    }
  }
  LoraTrainingAttachment(const LoraTrainingAttachment&) = delete;
  LoraTrainingAttachment& operator=(const LoraTrainingAttachment&) = delete;
  ~LoraTrainingAttachment() {
    for (auto& b : bound_) {
      b.linear->delta_A = b.saved_A;
      b.linear->delta_B = b.saved_B;
    }
    for (auto& r : unfreeze_) r();
  }

  /// Puts the factors on their modules; call it inside the tape before each forward (the scale s B
  /// is recorded there, so B's gradient flows through it).
  void bind() {
    for (auto& b : bound_) {
      b.linear->delta_A = b.module->lora_A.weight;
      b.linear->delta_B = Tensor<T, DynShape<2>, D>(b.module->lora_B.weight * T(b.module->scaling));
    }
  }

 private:
  struct Bound {
    nn::Linear<T, D>* linear;
    models::LoraModule<T, D>* module;
    Tensor<T, DynShape<2>, D> saved_A, saved_B;
  };
  std::vector<Bound> bound_;
  std::vector<std::function<void()>> unfreeze_;  ///< makes the parameters trainable again
};

/// Trains adapter `a` on base model `m` (frozen meanwhile; restored after): next(step, micro) ->
/// models::CausalLMBatch, o.loop.total_steps AdamW steps of o.loop.accumulation micro-batches each,
/// each micro-batch's loss the mean over its scored tokens. Checkpoints (o.loop.checkpoint) hold the
/// adapter's factors and the optimiser state. Seeded by the adapter's initialisation
/// (make_lora_adapter's seed) and the caller's batches; nothing here draws random numbers.
template <class T, class D, class NextBatch>
LoopResult train_lora(models::LlamaForCausalLM<T, D>& m, models::PeftAdapter<T, D>& a, NextBatch&& next,
                      const LoraTrainOptions& o) {
  LoraTrainingAttachment<T, D> attach(m, a);
  nn::AdamOptions adam = o.adam;
  adam.decoupled = true;
  nn::Adam<T, D> opt(nn::trainable_parameters<T, D>(a), adam);
  return train(
      a, opt, std::forward<NextBatch>(next),
      [&](models::PeftAdapter<T, D>&, const models::CausalLMBatch<D>& batch) {
        attach.bind();
        return models::causal_lm_loss(m, batch);
      },
      o.loop);
}

}  // namespace ttmoe::training
