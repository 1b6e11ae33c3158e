#pragma once
// `llm lora-train`: a PEFT LoRA adapter trained on a text corpus for a Hugging Face model folder
// (training::train_lora: base frozen, AdamW, TTMM's defaults rank 64, alpha 16, lr 2e-4, weight
// decay 0.01, batch 4, one epoch, all seven projections of every block, not the LM head). The corpus
// is tokenised once and cut into consecutive windows of --seq tokens (every token but each window's
// first is scored); each epoch visits the windows in a seeded random order, --batch per micro-batch.
// The adapter is written as a PEFT folder (adapter_config.json + adapter_model.safetensors) that
// `llm generate --lora` and PeftModel.from_pretrained load.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ttmoe/models/llm.hpp"
#include "ttmoe/text.hpp"
#include "ttmoe/training/llama_lora.hpp"
#include "train.hpp"

namespace llm_example {

/// What `llm lora-train` does (its command-line options besides the model).
struct LoraTrainOptions {
  std::string corpus, out;
  ttmoe::index_t rank = 64;
  double alpha = 16, lr = 2e-4, weight_decay = 0.01;
  std::size_t epochs = 1, batch = 4, accumulation = 1, max_steps = 0;  ///< max_steps 0: no cap
  ttmoe::index_t seq = 1024;
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  std::uint64_t seed = 0;
};

/// Trains the adapter on `m` (loaded from `model_dir` with tokenizer `tok`) and writes it; prints a
/// summary (windows, steps, first and last loss, the folder) on stdout.
inline int run_lora_train(ttmoe::models::LlamaForCausalLM<float>& m, const ttmoe::text::Tokenizer& tok,
                          const std::string& model_dir, LoraTrainOptions o) {
  using namespace ttmoe;
  if (o.seq > m.config.max_position_embeddings) {
    std::fprintf(stderr, "llm lora-train: --seq %zu exceeds the model's context; using %zu\n", std::size_t(o.seq),
                 std::size_t(m.config.max_position_embeddings));
    o.seq = m.config.max_position_embeddings;
  }
  if (o.seq < 2) throw ValueError("--seq must be at least 2 (one token of context, one scored)");
  const auto enc = tok.encode(read_corpus(o.corpus), false);
  const std::vector<std::int64_t> ids(enc.begin(), enc.end());
  const std::size_t windows = ids.size() / std::size_t(o.seq);
  const std::size_t per_step = o.batch * o.accumulation;
  if (windows < per_step)
    throw ValueError(o.corpus + ": " + std::to_string(ids.size()) + " tokens make " + std::to_string(windows) +
                     " windows of --seq " + std::to_string(o.seq) + ", fewer than one step's --batch x --accumulation = " +
                     std::to_string(per_step));
  const std::size_t steps_per_epoch = windows / per_step;
  std::size_t total = steps_per_epoch * o.epochs;
  if (o.max_steps) total = std::min(total, o.max_steps);

  models::LoraAdapterConfig ac;
  ac.r = o.rank;
  ac.lora_alpha = o.alpha;
  ac.target_modules = o.targets;
  ac.base_model_name_or_path = model_dir;
  auto adapter = models::make_lora_adapter(m, ac, o.seed);

  // Each epoch's window order: a seeded shuffle, drawn up front so next(step, micro) depends only on
  // its arguments (what the loop's resume needs).
  std::vector<std::vector<std::size_t>> order(o.epochs);
  std::mt19937_64 rng(o.seed + 1);
  for (auto& e : order) {
    e.resize(windows);
    std::iota(e.begin(), e.end(), std::size_t(0));
    std::shuffle(e.begin(), e.end(), rng);
  }
  auto next = [&](std::size_t step, std::size_t micro) {
    const std::size_t epoch = step / steps_per_epoch, first = ((step % steps_per_epoch) * o.accumulation + micro) * o.batch;
    std::vector<std::vector<std::int64_t>> rows;
    for (std::size_t i = 0; i < o.batch; ++i) {
      const auto at = std::ptrdiff_t(order[epoch][first + i] * std::size_t(o.seq));
      rows.emplace_back(ids.begin() + at, ids.begin() + at + std::ptrdiff_t(o.seq));
    }
    return models::CausalLMBatch<>::from_rows(rows);
  };
  training::LoraTrainOptions to;
  to.adam.lr = o.lr;
  to.adam.weight_decay = o.weight_decay;
  to.loop.total_steps = total;
  to.loop.accumulation = o.accumulation;
  double first_loss = 0;
  const auto bar = training::stderr_progress("lora-train", 1);
  to.loop.progress = [&](const training::StepReport& r) {
    if (r.step == 0) first_loss = r.loss;
    bar(r);
  };
  const auto res = training::train_lora(m, adapter, next, to);
  models::save_peft_adapter(adapter, o.out);
  std::printf("windows: %zu of %zu tokens\nsteps: %zu\nadapted_modules: %zu\nfirst_loss: %.6f\nfinal_loss: %.6f\nsaved: %s\n",
              windows, std::size_t(o.seq), res.steps, adapter.modules.size(), first_loss, res.last_loss, o.out.c_str());
  return 0;
}

}  // namespace llm_example
