#pragma once
// `llm train`: a small Llama-architecture model from scratch on a text corpus. A byte-level BPE
// (text/bpe_trainer.hpp, Llama-3 split regex) is trained on the corpus first and written as the
// folder's tokenizer.json; the model then learns next-token prediction on random windows of the
// token stream (shifted cross-entropy, AdamW, linear warm-up then cosine decay), the last tenth of
// the stream held out for a validation loss. The result is a Hugging Face folder (config.json,
// model.safetensors, tokenizer.json, tokenizer_config.json) that transformers, `tokenizers` and
// `llm generate` load.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <type_traits>
#include <string>
#include <vector>

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/nn/optim_adam.hpp"
#include "ttmoe/text.hpp"

namespace llm_example {

/// What `llm train` does (its command-line options).
struct TrainOptions {
  std::string corpus, out;
  std::size_t vocab_size = 1024;
  ttmoe::index_t hidden = 128, layers = 2, heads = 4, kv_heads = 2, intermediate = 352, context = 128;
  ttmoe::index_t steps = 300, batch = 8;
  double lr = 3e-3, weight_decay = 0.01;
  std::uint64_t seed = 0;
};

/// The corpus text: a file, or every regular file of a folder (sorted by name) joined by newlines.
/// A file linked under several names (Debian's common-licenses: GPL -> GPL-3) is read once, so the
/// held-out tail is not a copy of training text.
inline std::string read_corpus(const std::filesystem::path& p) {
  std::vector<std::filesystem::path> files;
  if (std::filesystem::is_directory(p)) {
    for (const auto& e : std::filesystem::directory_iterator(p))
      if (e.is_regular_file()) files.push_back(std::filesystem::canonical(e.path()));
    std::sort(files.begin(), files.end());
    files.erase(std::unique(files.begin(), files.end()), files.end());
  } else {
    files.push_back(p);
  }
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw ttmoe::ValueError(f.string() + ": cannot read the corpus");
    std::stringstream s;
    s << in.rdbuf();
    text += s.str();
    if (!text.empty() && text.back() != '\n') text += '\n';
  }
  if (text.empty()) throw ttmoe::ValueError(p.string() + ": the corpus is empty");
  return text;
}

/// One line of progress on stderr: a bar, the step, the smoothed loss and the token rate.
inline void progress(ttmoe::index_t step, ttmoe::index_t steps, double loss, double tokens_per_s) {
  const int width = 30, filled = int(double(width) * double(step) / double(steps));
  std::fprintf(stderr, "\r[%s%s] %zu/%zu loss %.4f %.0f tok/s", std::string(std::size_t(filled), '#').c_str(),
               std::string(std::size_t(width - filled), ' ').c_str(), std::size_t(step), std::size_t(steps), loss,
               tokens_per_s);
  if (step == steps) std::fputc('\n', stderr);
  std::fflush(stderr);
}

/// Mean cross-entropy of next-token prediction over consecutive `context`-token windows of `ids`
/// (each window's first token is context only; no recording).
inline double mean_loss(const ttmoe::models::LlamaForCausalLM<float>& m, const std::vector<std::int64_t>& ids,
                        ttmoe::index_t context) {
  using namespace ttmoe;
  double total = 0;
  index_t windows = 0;
  for (std::size_t at = 0; at + std::size_t(context) <= ids.size(); at += std::size_t(context)) {
    std::vector<std::int64_t> w(ids.begin() + std::ptrdiff_t(at), ids.begin() + std::ptrdiff_t(at + std::size_t(context)));
    total += models::score_continuation(m, w, 1).nll();
    ++windows;
  }
  return windows ? total / double(windows) : NAN;
}

/// Trains the tokenizer and the model and writes the folder; prints the losses on `report` (stdout
/// for `llm train`; stderr when training the default model, whose stdout is the generated text).
inline int run_train(const TrainOptions& o, std::FILE* report = stdout) {
  using namespace ttmoe;
  namespace fs = std::filesystem;
  const std::string text = read_corpus(o.corpus);
  fs::create_directories(o.out);

  // Tokenizer.
  text::BpeTrainerOptions bo;
  bo.vocab_size = o.vocab_size;
  bo.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>"};
  bo.bos_token = "<|begin_of_text|>";
  text::BpeTrainer trainer(bo);
  trainer.add_text(text);
  text::save_tokenizer_json(trainer.train(), (fs::path(o.out) / "tokenizer.json").string());
  std::ofstream(fs::path(o.out) / "tokenizer_config.json")
      << R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})" << "\n";
  const auto tok = text::load_tokenizer(o.out);
  const auto enc = tok->encode(text, false);
  std::vector<std::int64_t> ids(enc.begin(), enc.end());
  const std::size_t held = ids.size() / 10;
  const std::vector<std::int64_t> val(ids.end() - std::ptrdiff_t(held), ids.end());
  ids.resize(ids.size() - held);
  if (ids.size() < std::size_t(o.context) + 1)
    throw ValueError(o.corpus + ": " + std::to_string(ids.size()) + " training tokens, fewer than one window of --context " +
                     std::to_string(o.context) + " + 1");

  // Model.
  models::LlamaConfig c;
  c.vocab_size = index_t(tok->vocab_size());
  c.hidden_size = o.hidden;
  c.intermediate_size = o.intermediate;
  c.num_hidden_layers = o.layers;
  c.num_attention_heads = o.heads;
  c.num_key_value_heads = o.kv_heads;
  if (o.heads == 0 || o.hidden % o.heads) throw ValueError("--heads must divide --hidden");
  c.head_dim = o.hidden / o.heads;
  c.max_position_embeddings = o.context;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.bos_token_ids = {*tok->bos_id()};
  c.eos_token_ids = {*tok->token_to_id("<|end_of_text|>")};
  models::LlamaForCausalLM<float> m(c, o.seed);
  // transformers' initialisation for training from scratch (initializer_range 0.02): every matrix
  // N(0, 0.02), norms at 1. The constructor's torch-module inits (N(0, 1) embeddings, tied to the
  // head) would start with logits in the tens and a loss far above ln(vocab).
  {
    std::mt19937_64 init(o.seed);
    std::normal_distribution<float> n(0.f, 0.02f);
    nn::for_each_parameter(m, [&](const std::string&, auto& p) {
      if constexpr (std::remove_cvref_t<decltype(p)>::rank == 2) {
        std::vector<float> v(std::size_t(p.numel()));
        for (auto& x : v) x = n(init);
        std::copy(v.begin(), v.end(), p.data());
      }
    });
  }
  auto opt = nn::AdamW(nn::trainable_parameters<float>(m), {.lr = o.lr, .weight_decay = o.weight_decay});

  std::mt19937_64 rng(o.seed + 1);
  std::uniform_int_distribution<std::size_t> start(0, ids.size() - std::size_t(o.context) - 1);
  const index_t T = o.context, B = o.batch, warmup = std::max<index_t>(1, o.steps / 10);
  double smooth = NAN, first = NAN;
  const auto t0 = std::chrono::steady_clock::now();
  for (index_t step = 1; step <= o.steps; ++step) {
    std::vector<std::int64_t> x(std::size_t(B * T)), y(std::size_t(B * T));
    for (index_t b = 0; b < B; ++b) {
      const std::size_t s = start(rng);
      std::copy_n(ids.begin() + std::ptrdiff_t(s), T, x.begin() + std::ptrdiff_t(b * T));
      std::copy_n(ids.begin() + std::ptrdiff_t(s + 1), T, y.begin() + std::ptrdiff_t(b * T));
    }
    // Linear warm-up, then cosine decay to a tenth.
    const double frac = step <= warmup ? double(step) / double(warmup)
                                       : 0.1 + 0.45 * (1 + std::cos(M_PI * double(step - warmup) / double(o.steps - warmup + 1)));
    opt.options().lr = o.lr * frac;
    double loss_value;
    {
      autograd::Tape tape;
      auto logits = m.forward(IndexTensor<DynShape<2>>::from_host(DynShape<2>(B, T), x));
      auto loss = nn::cross_entropy(logits.reshape(DynShape<2>(B * T, c.vocab_size)),
                                    IndexTensor<DynShape<1>>::from_host(DynShape<1>(B * T), y));
      loss_value = double(loss.item());
      autograd::backward(tape, loss);
    }
    opt.step();
    opt.zero_grad();
    if (step == 1) first = smooth = loss_value;
    smooth = 0.9 * smooth + 0.1 * loss_value;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step % 5 == 0 || step == o.steps) progress(step, o.steps, smooth, double(step * B * T) / s);
  }
  const double val_loss = mean_loss(m, val, T);
  models::save_llama(m, o.out);
  std::fprintf(report, "tokens: %zu train, %zu validation\nvocab: %zu\nfirst_loss: %.6f\nfinal_loss: %.6f\nval_loss: %.6f\nsaved: %s\n",
              ids.size(), val.size(), std::size_t(c.vocab_size), first, smooth, val_loss, o.out.c_str());
  return 0;
}

}  // namespace llm_example
