#pragma once
// TTMM expert training: one LoRA expert per cluster of training documents (training::train_lora),
// with the paper's Table 3 defaults: rank 64, alpha 16, AdamW lr 2e-4, eps 1e-8, betas (0.9, 0.999),
// weight decay 0.01, batch 4, one epoch over the cluster's documents (each already truncated to its
// first 1024 tokens, ttmm/corpus.hpp), every linear of the blocks adapted and not the LM head.
//
// Reproducible wherever it runs: expert k's initialisation and document order come from
// expert_seed(seed, k) alone, never from which process trains it or what it trained before, so an
// expert trained by MPI rank 3 of 8 is bit for bit the one a single process trains (given the same
// thread count: a GEMM's reduction order depends on how it is split across threads).
// Sharding over processes is the pure function assign_experts_to_ranks (largest expert first, each
// to the least-loaded rank: the classic LPT rule, within 4/3 of the best makespan), so every rank
// computes the same plan from the cluster sizes without exchanging it.
// Restartable: train_store_experts writes each expert through the store's atomic writer
// (ttmm/expert_store.hpp) as soon as it is trained and skips the ones already there.
// The library makes no MPI call; examples/ttmm drives the ranks.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ttmoe/core/error.hpp"
#include "ttmoe/models/llama_lora.hpp"
#include "ttmoe/models/llama_loss.hpp"
#include "ttmoe/training/llama_lora.hpp"
#include "ttmoe/ttmm/clustering.hpp"
#include "ttmoe/ttmm/expert_store.hpp"

namespace ttmoe::ttmm {

/// How each expert is trained; the defaults are the TTMM paper's Table 3.
struct ExpertTrainingOptions {
  index_t rank = 64;            ///< LoRA rank r
  double alpha = 16;            ///< LoRA alpha (scale alpha / r)
  /// Adapted modules: the seven projections of every block (the LM head is not among them).
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  /// AdamW: lr 2e-4, betas (0.9, 0.999), eps 1e-8, weight decay 0.01.
  nn::AdamOptions adam{.lr = 2e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .decoupled = true};
  std::size_t batch = 4;        ///< documents per step (the last step of an epoch may hold fewer)
  std::size_t epochs = 1;       ///< passes over the cluster's documents
  std::uint64_t seed = 0;       ///< base seed; expert k uses expert_seed(seed, k)
  std::int64_t pad_id = 0;      ///< id right-padding fills shorter documents with (never scored)
};

/// The seed of expert `k` under base seed `seed` (SplitMix64 of both: neighbouring experts get
/// unrelated streams, and the value depends on nothing but its arguments).
inline std::uint64_t expert_seed(std::uint64_t seed, std::size_t k) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (std::uint64_t(k) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Which experts each of `ranks` processes trains: experts sorted by cost (descending; ties by
/// index), each given to the rank with the least cost so far (ties: the lowest rank). `costs[k]` is
/// expert k's work, e.g. its cluster's token count. Each rank's list is ascending. Throws ValueError
/// for ranks < 1 or a negative cost.
inline std::vector<std::vector<std::size_t>> assign_experts_to_ranks(const std::vector<std::int64_t>& costs, int ranks) {
  if (ranks < 1) throw ValueError("assign_experts_to_ranks: " + std::to_string(ranks) + " ranks (need at least 1)");
  for (std::size_t k = 0; k < costs.size(); ++k)
    if (costs[k] < 0) throw ValueError("assign_experts_to_ranks: expert " + std::to_string(k) + " has a negative cost");
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<std::size_t>> plan(static_cast<std::size_t>(ranks));
  std::vector<std::int64_t> load(std::size_t(ranks), std::int64_t{0});
  for (const std::size_t k : order) {
    const auto r = std::size_t(std::min_element(load.begin(), load.end()) - load.begin());  // first minimum
    plan[r].push_back(k);
    load[r] += costs[k];
  }
  for (auto& p : plan) std::sort(p.begin(), p.end());
  return plan;
}

/// The PEFT adapter config of an expert trained with `o` on the model at `base_model`.
inline models::LoraAdapterConfig expert_adapter_config(const ExpertTrainingOptions& o, const std::string& base_model = "") {
  models::LoraAdapterConfig c;
  c.r = o.rank;
  c.lora_alpha = o.alpha;
  c.target_modules = o.targets;
  c.base_model_name_or_path = base_model;
  return c;
}

/// The optimiser steps one epoch over `documents` documents takes at batch `batch`.
inline std::size_t steps_per_epoch(std::size_t documents, std::size_t batch) { return (documents + batch - 1) / batch; }

/// Trains expert `k` on `documents` (token ids, each at least two tokens) starting from a fresh
/// adapter for `m` (PEFT's initialisation under expert_seed(o.seed, k)); `m` is left as it was.
/// Each epoch visits the documents in an order shuffled by the same seed, o.batch per step,
/// right-padded with o.pad_id (padding is not scored). `progress` (may be empty) sees each step.
/// Throws ValueError for no documents, batch or epochs 0.
template <class T, class D>
models::PeftAdapter<T, D> train_expert(models::LlamaForCausalLM<T, D>& m,
                                       const std::vector<std::vector<std::int64_t>>& documents, std::size_t k,
                                       const ExpertTrainingOptions& o, const std::string& base_model = "",
                                       std::function<void(const training::StepReport&)> progress = {}) {
  if (documents.empty()) throw ValueError("train_expert: expert " + std::to_string(k) + " has no documents");
  if (o.batch == 0 || o.epochs == 0) throw ValueError("train_expert: batch and epochs must be at least 1");
  const std::uint64_t seed = expert_seed(o.seed, k);
  auto adapter = models::make_lora_adapter(m, expert_adapter_config(o, base_model), seed);
  const std::size_t per_epoch = steps_per_epoch(documents.size(), o.batch);
  // Every epoch's order drawn up front, so next(step, micro) depends on its arguments only.
  std::vector<std::vector<std::size_t>> order(o.epochs);
  std::mt19937_64 rng(seed ^ 0x5DEECE66Dull);
  for (auto& e : order) {
    e.resize(documents.size());
    std::iota(e.begin(), e.end(), std::size_t(0));
    std::shuffle(e.begin(), e.end(), rng);
  }
  auto next = [&](std::size_t step, std::size_t) {
    const auto& e = order[step / per_epoch];
    const std::size_t first = (step % per_epoch) * o.batch, last = std::min(first + o.batch, e.size());
    std::vector<std::vector<std::int64_t>> rows;
    for (std::size_t i = first; i < last; ++i) rows.push_back(documents[e[i]]);
    return models::CausalLMBatch<D>::from_rows(rows, {}, o.pad_id);
  };
  training::LoraTrainOptions to;
  to.adam = o.adam;
  to.loop.total_steps = per_epoch * o.epochs;
  to.loop.progress = std::move(progress);
  training::train_lora(m, adapter, next, to);
  return adapter;
}

/// Each cluster's training cost: the tokens of its documents (what assign_experts_to_ranks balances).
inline std::vector<std::int64_t> cluster_token_costs(const Clusters& c, const std::vector<std::vector<std::int64_t>>& tokens) {
  if (c.assignment.size() != tokens.size())
    throw ValueError("cluster_token_costs: " + std::to_string(c.assignment.size()) + " assignments for " +
                     std::to_string(tokens.size()) + " documents");
  std::vector<std::int64_t> cost(c.count(), 0);
  for (std::size_t i = 0; i < tokens.size(); ++i) cost[std::size_t(c.assignment[i])] += std::int64_t(tokens[i].size());
  return cost;
}

/// What train_store_experts did.
struct ExpertsReport {
  std::vector<std::size_t> trained;  ///< experts this call trained and wrote
  std::vector<std::size_t> skipped;  ///< experts already in the store (an earlier or concurrent run)
};

/// Trains the experts `which` of clustering `c` (documents `tokens`, aligned with c.assignment) and
/// writes each through `store` as soon as it is done, skipping those already there: a run killed
/// half-way is finished by running it again, and what it left half-written (experts/.partial-*) is
/// never taken for an expert. `on_written(k)` (may be empty) runs after each expert is written, and
/// `progress(k)` gives the step callback of expert k (may be empty).
template <class T, class D>
ExpertsReport train_store_experts(models::LlamaForCausalLM<T, D>& m, ExpertStoreWriter& store, const Clusters& c,
                                  const std::vector<std::vector<std::int64_t>>& tokens,
                                  const std::vector<std::size_t>& which, const ExpertTrainingOptions& o,
                                  const std::string& base_model = "",
                                  std::function<std::function<void(const training::StepReport&)>(std::size_t)> progress = {},
                                  std::function<void(std::size_t)> on_written = {}) {
  ExpertsReport r;
  for (const std::size_t k : which) {
    if (k >= c.count()) throw ValueError("train_store_experts: expert " + std::to_string(k) + " of " + std::to_string(c.count()));
    if (store.has_expert(index_t(k))) {
      r.skipped.push_back(k);
      continue;
    }
    std::vector<std::vector<std::int64_t>> docs;
    for (const auto i : c.members(k)) docs.push_back(tokens[i]);
    auto adapter = train_expert(m, docs, k, o, base_model, progress ? progress(k) : nullptr);
    if (store.add_expert(index_t(k), adapter))
      r.trained.push_back(k);
    else
      r.skipped.push_back(k);  // another process finished it meanwhile: its copy is identical
    if (on_written) on_written(k);
  }
  return r;
}

}  // namespace ttmoe::ttmm
