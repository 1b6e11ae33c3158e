// llm: a Llama-family causal LM from a Hugging Face folder (config.json, model.safetensors or its
// sharded index, tokenizer.json or tokenizer.model), with PEFT LoRA adapters on top.
//
//   llm generate [--model DIR] --prompt TEXT [--lora DIR[:SCALE] ...] [--lora-mode merged|unmerged]
//                [--max-new-tokens N --temperature T --top-p P --top-k K --seed S]
//       streams the continuation of TEXT to stdout as it is generated (greedy unless --temperature
//       is above 0); a summary line (tokens, tokens/s) goes to stderr.
//   llm perplexity [--model DIR] --file F [--prefix-tokens N | --window W [--stride S]] [--lora ...]
//       the mean negative log-likelihood and perplexity of F's tokens after the first N (loss on
//       the continuation only, as the TTMM evaluation does); N counts the BOS token if the
//       tokenizer adds one, and defaults to 1 (every token but the first is scored). With --window,
//       a text longer than the context is scored in sliding windows of W tokens moved by S (default
//       W), each scoring only its new tokens (Hugging Face's perplexity of fixed-length models).
//   llm lora-train [--model DIR] --corpus PATH --out ADAPTER_DIR [--rank 64 --alpha 16 --lr 2e-4
//             --weight-decay 0.01 --epochs 1 --batch 4 --accumulation 1 --seq 1024 --targets ...
//             --max-steps N --seed S]
//       a PEFT LoRA adapter for the model trained on the corpus (lora_train.hpp), base frozen.
//   llm train --corpus PATH --out DIR [--vocab-size V --hidden H --layers L --heads N --kv-heads K
//             --intermediate I --context T --steps S --batch B --lr LR --seed S]
//       a small Llama from scratch on a text file (or a folder of them) with a byte-level BPE
//       trained on it first (train.hpp); writes a Hugging Face folder and prints the losses.
//
// Without --model, generate and perplexity use the default model (default_model.hpp): `llm train`
// (600 steps) on Debian's /usr/share/common-licenses, trained on first use and cached under --cache DIR,
// $TTMOE_CACHE_DIR or ~/.cache/ttmoe.
//
// Every failure (a missing folder, a bad config, weights or adapter that do not fit, a prompt
// longer than the context) is one "llm: error: ..." line on stderr and exit status 1.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ttmoe/ttmoe.hpp"  // the CPU backend the model runs on
#include "ttmoe/models/llm.hpp"
#include "ttmoe/text.hpp"
#include "default_model.hpp"
#include "lora_train.hpp"
#include "train.hpp"

namespace {

using namespace ttmoe;
using Model = models::LlamaForCausalLM<float>;

/// What --lora and --lora-mode asked for.
struct LoraArgs {
  std::vector<std::string> specs;  ///< DIR or DIR:SCALE
  std::string mode = "merged";
};

/// Splits DIR[:SCALE]; a suffix that is not a number is part of the folder name.
std::pair<std::string, double> parse_lora_spec(const std::string& spec) {
  const auto colon = spec.rfind(':');
  if (colon != std::string::npos && colon + 1 < spec.size()) {
    const std::string tail = spec.substr(colon + 1);
    std::size_t used = 0;
    try {
      const double scale = std::stod(tail, &used);
      if (used == tail.size()) return {spec.substr(0, colon), scale};
    } catch (const std::exception&) {
    }
  }
  return {spec, 1.0};
}

/// The model, its tokenizer and any adapters attached to it.
struct Loaded {
  Model model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::vector<std::unique_ptr<models::PeftAdapter<float>>> adapters;
  std::unique_ptr<models::AttachedAdapters<float>> attached;
};

/// Which model folder to load: --model, or the cached default model.
struct ModelChoice {
  std::optional<std::string> model;  ///< --model
  std::optional<std::string> cache;  ///< --cache (where the default model lives)
  std::string weights = "f32";       ///< --weights: f32, or bf16 (Linear weights kept BF16, inference only)
  std::string arithmetic = "exact";  ///< --bf16-arithmetic: exact, or bf16 (activations of BF16 weights rounded)
};

/// The model folder to load and whether it is the cached default (trained here if not there yet).
std::pair<std::string, bool> resolve(const ModelChoice& c) {
  if (c.model) return {*c.model, false};
  return {llm_example::ensure_default_model(c.cache).string(), true};
}

std::unique_ptr<Loaded> load(const ModelChoice& choice, const LoraArgs& lora) {
  // F32 weights multiply F32 activations whatever this says; asking for rounding there is a mistake.
  if (choice.arithmetic != "exact" && choice.weights != "bf16")
    throw ValueError("--bf16-arithmetic " + choice.arithmetic + " applies to BF16 weights: add --weights bf16");
  const auto [dir, is_default] = resolve(choice);
  auto l = std::make_unique<Loaded>();
  try {
    l->model = models::load_llama<float>(dir, models::parse_weight_precision(choice.weights));
    models::set_bf16_arithmetic(l->model, models::parse_bf16_arithmetic(choice.arithmetic));
    l->tokenizer = text::load_tokenizer(dir);
    if (l->tokenizer->vocab_size() > std::size_t(l->model.config.vocab_size))
      throw ValueError(dir + ": the tokenizer has " + std::to_string(l->tokenizer->vocab_size()) +
                       " tokens but the model's vocab_size is " + std::to_string(l->model.config.vocab_size));
  } catch (const std::exception& e) {
    if (!is_default) throw;
    // Not the user's folder: say that it is the cache, and how to get a fresh one.
    throw ValueError("the cached default model " + dir + " cannot be loaded (" + e.what() +
                     "); delete that folder and llm trains it again");
  }
  std::vector<models::WeightedAdapter<float>> use;
  for (const auto& spec : lora.specs) {
    const auto [path, scale] = parse_lora_spec(spec);
    l->adapters.push_back(std::make_unique<models::PeftAdapter<float>>(models::load_peft_adapter(path, l->model)));
    use.push_back({l->adapters.back().get(), scale});
  }
  if (!use.empty())
    l->attached = std::make_unique<models::AttachedAdapters<float>>(
        l->model, use, lora.mode == "merged" ? models::LoraMode::merged : models::LoraMode::unmerged);
  return l;
}

std::vector<std::int64_t> to_int64(const std::vector<std::int32_t>& ids) { return {ids.begin(), ids.end()}; }

/// Prints the text of `ids` as it grows: only the new suffix, held back while the text ends in an
/// incomplete UTF-8 sequence (which the decoder shows as U+FFFD until its last byte arrives).
class TextStream {
 public:
  explicit TextStream(const text::Tokenizer& t) : tok_(t) {}
  void push(std::int32_t id) {
    ids_.push_back(id);
    const std::string s = tok_.decode(ids_, true);
    if (s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    if (s.size() > printed_) std::cout << s.substr(printed_) << std::flush;
    printed_ = s.size();
  }
  void finish() {
    const std::string s = tok_.decode(ids_, true);
    if (s.size() > printed_) std::cout << s.substr(printed_);
    std::cout << "\n" << std::flush;
  }

 private:
  const text::Tokenizer& tok_;
  std::vector<std::int32_t> ids_;
  std::size_t printed_ = 0;
};

int run_generate(const ModelChoice& choice, const std::string& prompt, const LoraArgs& lora, models::GenerationOptions opt) {
  auto l = load(choice, lora);
  const auto ids = to_int64(l->tokenizer->encode(prompt, true));
  if (ids.empty()) throw ValueError("the prompt encodes to no tokens");
  opt.eos_token_ids = l->model.config.eos_token_ids;
  if (auto e = l->tokenizer->eos_id()) opt.eos_token_ids.push_back(*e);
  TextStream stream(*l->tokenizer);
  opt.on_token = [&](index_t, std::int64_t tok) {
    stream.push(std::int32_t(tok));
    return true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = models::generate(l->model, {ids}, opt);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stream.finish();
  std::cerr << "llm: " << ids.size() << " prompt tokens, " << out.tokens[0].size() << " new tokens in " << s << " s ("
            << double(out.tokens[0].size()) / s << " tokens/s)\n";
  return 0;
}

/// How `llm perplexity` scores: a prefix, or sliding windows when window > 0.
struct PerplexityArgs {
  index_t prefix = 1, window = 0, stride = 0;
};

int run_perplexity(const ModelChoice& choice, const std::string& file, const PerplexityArgs& pa, const LoraArgs& lora) {
  const index_t prefix = pa.prefix;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ValueError(file + ": cannot open the text file");
  std::stringstream buf;
  buf << in.rdbuf();
  auto l = load(choice, lora);
  const auto ids = to_int64(l->tokenizer->encode(buf.str(), true));
  if (index_t(ids.size()) <= prefix)
    throw ValueError(file + ": " + std::to_string(ids.size()) + " tokens leave nothing to score after --prefix-tokens " +
                     std::to_string(prefix));
  const auto score = pa.window ? models::windowed_perplexity(l->model, ids, pa.window, pa.stride ? pa.stride : pa.window)
                               : models::score_continuation(l->model, ids, prefix);
  std::printf("tokens: %zu\nscored: %zu\nnll: %.9g\nperplexity: %.9g\n", ids.size(), std::size_t(score.tokens),
              score.nll(), score.perplexity());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Llama-family language models from Hugging Face folders, with PEFT LoRA adapters.\n"
      "Without --model, generate and perplexity use a small default model: `llm train` with its\n"
      "default sizes and --steps " + std::to_string(llm_example::default_model_recipe().steps) + " on Debian's " +
      std::string(llm_example::kDefaultCorpus) + " (base-files),\n"
      "trained on first use (a minute or two on 2 cores) and cached as\n"
      "  <cache>/" + llm_example::default_model_folder() + "\n"
      "where <cache> is --cache DIR, else $TTMOE_CACHE_DIR, else ~/.cache/ttmoe."};
  app.require_subcommand(1);
  ModelChoice choice;
  std::string prompt, file;
  LoraArgs lora;
  models::GenerationOptions gen;
  gen.max_new_tokens = 64;
  PerplexityArgs pa;
  auto add_common = [&](CLI::App* c) {
    c->add_option("--model", choice.model,
                  "Hugging Face model folder (config.json, weights, tokenizer); default: the cached default model")
        ->check(CLI::ExistingDirectory);
    c->add_option("--cache", choice.cache, "where the default model is cached (default $TTMOE_CACHE_DIR or ~/.cache/ttmoe)")
        ->excludes("--model");
    c->add_option("--lora", lora.specs, "PEFT adapter folder, optionally :SCALE (repeatable; default scale 1)");
    c->add_option("--lora-mode", lora.mode, "merge the adapters into the weights, or run them beside them")
        ->check(CLI::IsMember({"merged", "unmerged"}))
        ->capture_default_str();
    c->add_option("--weights", choice.weights,
                  "keep the Linear weights as f32, or as bf16 (half the weight memory; "
                  "F32 accumulation; adapters then run unmerged)")
        ->check(CLI::IsMember({"f32", "bf16"}))
        ->capture_default_str();
    c->add_option("--bf16-arithmetic", choice.arithmetic,
                  "with --weights bf16: exact (F32 activations, the F32 model's result) or bf16 (activations "
                  "rounded to BF16 as llama.cpp does; faster prefill on AVX512-BF16 CPUs)")
        ->check(CLI::IsMember({"exact", "bf16"}))
        ->capture_default_str();
  };
  CLI::App* g = app.add_subcommand("generate", "continue a prompt, streaming the text");
  add_common(g);
  g->add_option("--prompt", prompt, "the text to continue")->required();
  g->add_option("--max-new-tokens", gen.max_new_tokens, "tokens to generate at most")->capture_default_str()->check(CLI::PositiveNumber);
  g->add_option("--temperature", gen.sampling.temperature, "0 is greedy")->capture_default_str()->check(CLI::NonNegativeNumber);
  g->add_option("--top-p", gen.sampling.top_p, "nucleus sampling threshold in (0, 1]")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  g->add_option("--top-k", gen.sampling.top_k, "keep the k most likely tokens (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  g->add_option("--seed", gen.sampling.seed, "sampling seed")->capture_default_str();
  CLI::App* p = app.add_subcommand("perplexity", "score a text file (loss on the tokens after the prefix)");
  add_common(p);
  p->add_option("--file", file, "UTF-8 text file")->required()->check(CLI::ExistingFile);
  auto* prefix_opt = p->add_option("--prefix-tokens", pa.prefix, "leading tokens given as context, not scored")
                         ->capture_default_str()
                         ->check(CLI::PositiveNumber);
  p->add_option("--window", pa.window, "score in sliding windows of this many tokens (at most the context)")
      ->check(CLI::PositiveNumber)
      ->excludes(prefix_opt);
  p->add_option("--stride", pa.stride, "tokens each window moves by (default: the window; at most the window)")
      ->check(CLI::PositiveNumber)
      ->needs("--window");
  llm_example::LoraTrainOptions lo;
  CLI::App* lt = app.add_subcommand("lora-train", "train a PEFT LoRA adapter for a model on a text corpus");
  lt->add_option("--model", choice.model, "Hugging Face model folder; default: the cached default model")
      ->check(CLI::ExistingDirectory);
  lt->add_option("--cache", choice.cache, "where the default model is cached")->excludes("--model");
  lt->add_option("--corpus", lo.corpus, "a UTF-8 text file or a folder of them")->required()->check(CLI::ExistingPath);
  lt->add_option("--out", lo.out, "the PEFT adapter folder to write")->required();
  lt->add_option("--rank", lo.rank, "LoRA rank r")->capture_default_str()->check(CLI::PositiveNumber);
  lt->add_option("--alpha", lo.alpha, "LoRA alpha (scale alpha / r)")->capture_default_str();
  lt->add_option("--lr", lo.lr, "AdamW learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  lt->add_option("--weight-decay", lo.weight_decay, "AdamW decoupled weight decay")->capture_default_str()->check(CLI::NonNegativeNumber);
  lt->add_option("--epochs", lo.epochs, "passes over the corpus")->capture_default_str()->check(CLI::PositiveNumber);
  lt->add_option("--batch", lo.batch, "windows per micro-batch")->capture_default_str()->check(CLI::PositiveNumber);
  lt->add_option("--accumulation", lo.accumulation, "micro-batches per optimiser step")->capture_default_str()->check(CLI::PositiveNumber);
  lt->add_option("--seq", lo.seq, "tokens per window (capped at the model's context)")->capture_default_str()->check(CLI::PositiveNumber);
  lt->add_option("--targets", lo.targets, "module names to adapt")->capture_default_str();
  lt->add_option("--max-steps", lo.max_steps, "stop after this many steps (0: the whole run)")->capture_default_str();
  lt->add_option("--seed", lo.seed, "adapter initialisation and window order seed")->capture_default_str();
  llm_example::TrainOptions to;
  CLI::App* t = app.add_subcommand("train", "train a small Llama and its BPE tokenizer from scratch on a corpus");
  t->add_option("--corpus", to.corpus, "a UTF-8 text file or a folder of them")->required()->check(CLI::ExistingPath);
  t->add_option("--out", to.out, "the Hugging Face folder to write")->required();
  t->add_option("--vocab-size", to.vocab_size, "BPE vocabulary (256 bytes + merges + 2 special tokens)")->capture_default_str();
  t->add_option("--hidden", to.hidden, "hidden size")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--layers", to.layers, "decoder layers")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--heads", to.heads, "attention heads")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--kv-heads", to.kv_heads, "key/value heads")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--intermediate", to.intermediate, "MLP width")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--context", to.context, "training window = the model's context")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--steps", to.steps, "optimiser steps")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--batch", to.batch, "windows per step")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--lr", to.lr, "peak AdamW learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  t->add_option("--seed", to.seed, "initialisation and sampling seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (g->parsed()) return run_generate(choice, prompt, lora, gen);
    if (t->parsed()) return llm_example::run_train(to);
    if (lt->parsed()) {
      auto l = load(choice, {});
      return llm_example::run_lora_train(l->model, *l->tokenizer, resolve(choice).first, lo);
    }
    return run_perplexity(choice, file, pa, lora);
  } catch (const std::exception& e) {
    std::cerr << "llm: error: " << e.what() << "\n";
    return 1;
  }
}
