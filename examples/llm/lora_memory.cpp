// llm_lora_memory: the memory of one LoRA training step of a causal LM at a given shape, with random
// weights (nothing is read from disk). Defaults are Llama-3.2-1B's shapes (hidden 2048, 16 layers,
// 32 heads / 8 KV heads, MLP 8192, vocabulary 128256, tied head), rank 64 on all seven projections,
// one sequence of 1024 tokens, F32 weights. Prints name: value lines: the weight, adapter and Adam
// state bytes, the bytes the tape keeps after the forward (the caching pool's in-use growth: buffers
// of 256 KiB and more, rounded up to their size class), the step's seconds and the peak RSS.
// The measurement behind docs/design.md's "LoRA training memory" (issue 14).

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>

#include "ttmoe/ttmoe.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/training/llama_lora.hpp"
#include "ttmoe/tta/metrics.hpp"

int main(int argc, char** argv) {
  using namespace ttmoe;
  CLI::App app{"one LoRA training step of a random-weight Llama; prints its memory"};
  models::LlamaConfig c;
  c.vocab_size = 128256;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_hidden_layers = 16;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.max_position_embeddings = 131072;
  c.tie_word_embeddings = true;
  index_t rank = 64, seq = 1024, batch = 1;
  app.add_option("--layers", c.num_hidden_layers, "decoder layers")->capture_default_str();
  app.add_option("--hidden", c.hidden_size, "hidden size")->capture_default_str();
  app.add_option("--intermediate", c.intermediate_size, "MLP width")->capture_default_str();
  app.add_option("--heads", c.num_attention_heads, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", c.num_key_value_heads, "key/value heads")->capture_default_str();
  app.add_option("--vocab", c.vocab_size, "vocabulary")->capture_default_str();
  app.add_option("--rank", rank, "LoRA rank")->capture_default_str();
  app.add_option("--seq", seq, "tokens per sequence")->capture_default_str();
  app.add_option("--batch", batch, "sequences")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  try {
    auto t0 = std::chrono::steady_clock::now();
    models::LlamaForCausalLM<float> m(c, 1);
    models::LoraAdapterConfig ac;
    ac.r = rank;
    ac.lora_alpha = 16;
    ac.target_modules = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    auto a = models::make_lora_adapter(m, ac, 2);
    auto bytes_of = [](auto& module) {
      std::size_t n = 0;
      nn::for_each_parameter(module, [&](const std::string&, auto& p) { n += std::size_t(p.numel()) * 4; });
      return n;
    };
    std::printf("init_seconds: %.1f\nweight_bytes: %zu\nadapter_bytes: %zu\nadam_state_bytes: %zu\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), bytes_of(m), bytes_of(a),
                2 * bytes_of(a));
    std::mt19937_64 rng(3);
    std::uniform_int_distribution<std::int64_t> tok(0, c.vocab_size - 1);
    std::vector<std::vector<std::int64_t>> rows(std::size_t(batch), std::vector<std::int64_t>(std::size_t(seq), 0));
    for (auto& r : rows)
      for (auto& t : r) t = tok(rng);
    const auto b = models::CausalLMBatch<>::from_rows(rows);
    training::LoraTrainingAttachment<float, cpu> attach(m, a);
    auto opt = nn::AdamW(nn::trainable_parameters<float>(a), {.lr = 2e-4, .weight_decay = 0.01});
    auto& pool = cpu::memory_pool();
    const std::size_t in_use_before = pool.stats().in_use_bytes;
    pool.reset_peak();
    t0 = std::chrono::steady_clock::now();
    {
      autograd::Tape tape;
      attach.bind();
      auto loss = models::causal_lm_loss(m, b);
      const double fwd = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const std::size_t kept = pool.stats().in_use_bytes - in_use_before;
      std::printf("loss: %.4f\nforward_seconds: %.1f\ntape_kept_bytes: %zu\ntape_kept_bytes_per_layer: %.0f\n",
                  double(loss.item()), fwd, kept, double(kept) / double(c.num_hidden_layers));
      std::fflush(stdout);
      autograd::backward(tape, loss);
    }
    opt.step();
    opt.zero_grad();
    std::printf("step_seconds: %.1f\npool_peak_in_use_growth_bytes: %zu\npeak_rss_bytes: %lld\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                pool.stats().peak_in_use_bytes - in_use_before, (long long)tta::peak_rss_kib() * 1024);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm_lora_memory: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
