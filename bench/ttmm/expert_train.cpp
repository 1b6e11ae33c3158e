// The ttmoe side of run_expert_train_bench.sh: one TTMM expert trained with the library's own path
// (ttmm::train_expert: a rank-64, alpha-16 LoRA on all seven projections of every block, AdamW, batch
// 4) on a randomly initialised small Llama, timing each optimiser step. Prints `name: value` lines:
//   ttmoe_expert_train_tokens_per_s   batch * seq / the median timed step
//   ttmoe_expert_train_step_s         the median timed step (seconds)
// The token ids come from --tokens (int64 little-endian, written by the script so both sides train on
// the same data), else from a seeded generator.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/ttmm/expert_training.hpp"
#include "ttmoe/ttmoe.hpp"

int main(int argc, char** argv) {
  using namespace ttmoe;
  std::size_t seq = 256, batch = 4, steps = 3, warmup = 1, threads = 2;
  index_t hidden = 512, layers = 4, heads = 8, kv_heads = 4, intermediate = 1376, vocab = 8192, rank = 64;
  std::string tokens_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--seq") seq = std::stoul(v);
    else if (a == "--batch") batch = std::stoul(v);
    else if (a == "--steps") steps = std::stoul(v);
    else if (a == "--warmup") warmup = std::stoul(v);
    else if (a == "--threads") threads = std::stoul(v);
    else if (a == "--hidden") hidden = std::stol(v);
    else if (a == "--layers") layers = std::stol(v);
    else if (a == "--vocab") vocab = std::stol(v);
    else if (a == "--rank") rank = std::stol(v);
    else if (a == "--tokens") tokens_file = v;
    else {
      std::fprintf(stderr, "bench_ttmm_expert_train: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  cpu_backend::ThreadPool::instance().set_num_threads(threads);
  models::LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = index_t(seq);
  c.tie_word_embeddings = false;
  models::LlamaForCausalLM<float> m(c, 0);

  const std::size_t total = steps + warmup, n = total * batch * seq;
  std::vector<std::int64_t> ids(n);
  if (!tokens_file.empty()) {
    std::ifstream in(tokens_file, std::ios::binary);
    in.read(reinterpret_cast<char*>(ids.data()), std::streamsize(n * sizeof(std::int64_t)));
    if (!in) {
      std::fprintf(stderr, "bench_ttmm_expert_train: %s holds fewer than %zu token ids\n", tokens_file.c_str(), n);
      return 1;
    }
  } else {
    std::mt19937_64 rng(0);
    for (auto& t : ids) t = std::int64_t(rng() % std::uint64_t(vocab));
  }
  std::vector<std::vector<std::int64_t>> docs;
  for (std::size_t d = 0; d < total * batch; ++d)
    docs.emplace_back(ids.begin() + std::ptrdiff_t(d * seq), ids.begin() + std::ptrdiff_t((d + 1) * seq));

  ttmm::ExpertTrainingOptions o;
  o.rank = rank;
  o.batch = batch;
  std::vector<double> step_s;
  auto last = std::chrono::steady_clock::now();
  ttmm::train_expert(m, docs, 0, o, "", [&](const training::StepReport&) {
    const auto now = std::chrono::steady_clock::now();
    step_s.push_back(std::chrono::duration<double>(now - last).count());
    last = now;
  });
  std::vector<double> timed(step_s.begin() + std::ptrdiff_t(warmup), step_s.end());
  std::sort(timed.begin(), timed.end());
  const double med = timed.size() % 2 ? timed[timed.size() / 2] : (timed[timed.size() / 2 - 1] + timed[timed.size() / 2]) / 2;
  std::printf("ttmoe_expert_train_step_s: %.4f\nttmoe_expert_train_tokens_per_s: %.1f\n", med, double(batch * seq) / med);
  return 0;
}
