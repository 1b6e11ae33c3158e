// ttmoe side of `bench/report llm` (issue 14): loads a Llama HF folder (bench/llm/make_models.py), prefills
// a 512-token prompt of fixed ids into a KV cache of 2048 positions, then greedy-decodes 128 tokens,
// all on `--threads` threads, and prints `name: value` lines:
//   load_s               load_llama (config, weights, the model's construction)
//   prefill_s            the prompt's forward_cached keeping its last row + that row's logits: the median of
//                        `--prefill-runs` (default 3) runs after one untimed full-size warm-up run
//   prefill_first_s      that first (cold) run
//   decode_tokens_per_s  new tokens / seconds of the decode steps (forward_cached of 1 token + logits + argmax)
//   peak_rss_mb          VmHWM after decoding (weights + KV cache + activations)
//   weight_bytes         bytes of the folder's *.safetensors files (the weights on disk)
//   weight_bytes_per_token  bytes of the resident weights one decode step reads (every Linear and the head;
//                        the embedding table counted once, as the tied head reads it; one row for the lookup)
//   triad_gbs            median of the triad samples taken during the decode (below)
//   triad_gbs_min, triad_gbs_max, triad_samples   their spread and count
//   decode_gbs           weight_bytes_per_token x decode_tokens_per_s
//   decode_fraction_of_triad  the same-minute fraction of bandwidth (issue #14's target >= 0.85):
//                        the median over the decode's windows of (a window's weight bytes / its
//                        decode seconds) / (the mean of the two triads bracketing that window)
// How the triad is sampled (`--triad-every N`, default 16): the host's other tenants move this VM's
// triad between about 17 and 79 GB/s from one second to the next, so a triad taken once, before the load,
// says nothing about the bandwidth the decode met. One triad sample (bench/triad.hpp: c = a + s*b
// over 3 x 64 MiB, far past the 32 MiB L3, on the same thread pool; the mean rate of 4 runs, as the
// decode's rate is a mean over its window, not the best run) is taken right after the prefill and
// one after every N decoded tokens (and after the last); the decode clock stops for each, so
// decode_tokens_per_s counts decode steps only. The triad's arrays go back to the OS after
// each sample, and the peak-RSS mark is read before each sample and reset (/proc/self/clear_refs
// "5") after it, so peak_rss_mb is the decode's own peak, without the triad's arrays. `--triad-every
// 0` takes one triad before the load, as this bench did before (no decode_fraction_of_triad then).
// `--storage huge_pages` copies the BF16 weights into huge pages at load (models::Bf16Storage; the
// default `mapped` views them in the mapped file).
// `--arithmetic bf16` rounds the activations of BF16 weights to BF16 (io::Bf16Arithmetic; the
// AVX512-BF16 prefill kernel where the CPU has it), as llama.cpp's BF16 does; the default is exact.
//   bench_llm_decode DIR [--precision f32|bf16] [--arithmetic exact|bf16] [--storage mapped|huge_pages]
//                        [--threads 2] [--prompt 512]
//                        [--new 128] [--cache 2048] [--triad-every 16] [--prefill-runs 3]
//                        [--compare R [--compare-tokens 4]]
// `--compare R` replaces the decode by R rounds that time decode steps against the same weights
// streamed by the GEMV alone, per op and per layer, a plain read of them and a triad (decode_streams.hpp).
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../common.hpp"
#include "../triad.hpp"
#include "decode_streams.hpp"
#include "ttmoe/models/llama_hf.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;

namespace {

/// Bytes of the safetensors files in dir: the weight bytes on disk the RSS figure is divided by.
double safetensors_bytes(const std::filesystem::path& dir) {
  double total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") total += double(e.file_size());
  return total;
}

/// Index of the largest of the last row's logits (greedy decoding).
std::int64_t argmax_row(const Tensor<float, DynShape<2>>& logits) {
  const auto v = logits.to_vector();
  std::size_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return std::int64_t(best);
}

/// Whether an embedding table is kept as BF16; false for a library whose Embedding has no BF16 table
/// (a template, so the member is looked up only where it exists).
template <class E>
bool table_is_bf16(const E& table) {
  if constexpr (requires { table.weight_bf16.defined(); })
    return table.weight_bf16.defined();
  else
    return false;
}

/// Resets the kernel's peak-RSS mark (VmHWM) to the current RSS; false where the kernel does not
/// allow it (not Linux, or older than 4.0).
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(stderr, "usage: bench_llm_decode DIR [--precision f32|bf16] [--arithmetic exact|bf16] [--storage mapped|huge_pages] "
                 "[--threads N] [--prompt N] "
                 "[--new N] [--cache N] [--triad-every N] [--prefill-runs N] [--compare R [--compare-tokens N]]\n");
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::string precision = "f32", arithmetic = "exact", storage = "mapped";
  int threads = 2;
  index_t prompt_len = 512, new_tokens = 128, cache_len = 2048;
  long triad_every_arg = 16;  // signed, so a negative value is caught below
  int prefill_runs = 3;
  int compare_rounds = 0, compare_tokens = 4;
  for (int i = 2; i < argc; ++i) {
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(std::string("missing value after ") + argv[i]);
      return argv[++i];
    };
    if (!std::strcmp(argv[i], "--precision")) precision = next();
    else if (!std::strcmp(argv[i], "--arithmetic")) arithmetic = next();
    else if (!std::strcmp(argv[i], "--storage")) storage = next();
    else if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(next());
    else if (!std::strcmp(argv[i], "--prompt")) prompt_len = std::stol(next());
    else if (!std::strcmp(argv[i], "--new")) new_tokens = std::stol(next());
    else if (!std::strcmp(argv[i], "--cache")) cache_len = std::stol(next());
    else if (!std::strcmp(argv[i], "--triad-every")) triad_every_arg = std::stol(next());
    else if (!std::strcmp(argv[i], "--prefill-runs")) prefill_runs = std::stoi(next());
    else if (!std::strcmp(argv[i], "--compare")) compare_rounds = std::stoi(next());
    else if (!std::strcmp(argv[i], "--compare-tokens")) compare_tokens = std::stoi(next());
    else {
      std::fprintf(stderr, "bench_llm_decode: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (prompt_len < 1 || new_tokens < 1 || prompt_len + new_tokens > cache_len || triad_every_arg < 0 ||
      prefill_runs < 0 || compare_rounds < 0 || compare_tokens < 1 ||
      prompt_len + index_t(compare_rounds) * compare_tokens > cache_len) {
    std::fprintf(stderr, "bench_llm_decode: need 1 <= prompt, 1 <= new, prompt + new <= cache, triad-every >= 0, prefill-runs >= 0, "
                 "compare >= 0, compare-tokens >= 1 and prompt + compare x compare-tokens <= cache\n");
    return 2;
  }
  const index_t triad_every = index_t(triad_every_arg);
  cpu_backend::set_num_threads(std::size_t(threads));
  autograd::NoGrad ng;
  std::vector<double> triads;  // bytes/s, in the order taken
  if (triad_every == 0) triads.push_back(bench::triad_gbs());

  const auto t0_load = bench::Clock::now();
  auto model = models::load_llama<float, cpu>(dir, models::parse_weight_precision(precision), models::parse_bf16_storage(storage));
  const double load_s = bench::seconds_since(t0_load);
  models::set_bf16_arithmetic(model, models::parse_bf16_arithmetic(arithmetic));
  const auto& c = model.config;
  // Weight bytes one decode step streams: every decoder Linear and the head at the resident precision.
  const double wbytes = precision == "bf16" ? 2.0 : 4.0;
  const double per_layer = double(c.hidden_size) * double(c.num_attention_heads * c.head_dim) * 2 +
                           double(c.hidden_size) * double(c.num_key_value_heads * c.head_dim) * 2 +
                           double(c.hidden_size) * double(c.intermediate_size) * 3;
  const double head = double(c.vocab_size) * double(c.hidden_size);
  // The head's precision as it is kept: an untied BF16 head, or a tied one reading a BF16 embedding
  // table where the library keeps one (checked by `requires` so this builds before and after that).
  const bool head_bf16 = model.lm_head.weight_bf16.defined() ||
                         (c.tie_word_embeddings && table_is_bf16(model.model.embed_tokens));
  const double head_bytes = head_bf16 ? 2.0 : 4.0;
  const double bytes_per_token = per_layer * double(c.num_hidden_layers) * wbytes + head * head_bytes;

  // Fixed prompt ids spread over the vocabulary (any ids do: the weights are random).
  std::vector<std::int64_t> ids(static_cast<std::size_t>(prompt_len));
  for (index_t i = 0; i < prompt_len; ++i) ids[std::size_t(i)] = std::int64_t((1 + 7919 * i) % c.vocab_size);
  auto cache = model.make_cache(1, cache_len);

  // The prompt prefilled 1 + prefill_runs times into the same cache (reset between): the first, cold
  // run (pool blocks, packing buffers, first touches) is prefill_first_s; prefill_s is the median of
  // the others, as the peers' prefills are timed after a full-size warm-up (llm_peers.py).
  const auto last = IndexTensor<DynShape<1>>::from_host(DynShape<1>(1), std::vector<std::int64_t>{std::int64_t(prompt_len) - 1});
  std::int64_t tok = 0;
  std::vector<double> prefill_times;
  auto t0 = bench::Clock::now();
  for (int r = 0; r <= prefill_runs; ++r) {
    cache.reset();
    t0 = bench::Clock::now();
    // Only the last row's hidden state is kept (the last layer's MLP skips the others), as generate() does.
    const auto prompt = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, prompt_len), ids);
    tok = argmax_row(model.logits(model.forward_cached(prompt, cache, last)));
    prefill_times.push_back(bench::seconds_since(t0));
  }
  const double prefill_first_s = prefill_times.front();
  const double prefill_s =
      prefill_runs > 0 ? bench::median(std::vector<double>(prefill_times.begin() + 1, prefill_times.end())) : prefill_first_s;

  if (compare_rounds > 0)  // decode against the same weights streamed without the rest of the step
    return bench::decode_streams::compare(model, dir, compare_rounds, compare_tokens, [&](int n) {
      for (int k = 0; k < n; ++k) {
        auto step = model.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 1), std::vector<std::int64_t>{tok}), cache);
        tok = argmax_row(model.logits(step.reshape(DynShape<2>(1, c.hidden_size))));
      }
    });

  // Peak RSS outside the triad samples: the mark is read before each sample and reset after it.
  double peak_rss_mb = 0;
  bool rss_reset = true;
  auto sample_triad = [&] {
    if (rss_reset) peak_rss_mb = std::max(peak_rss_mb, bench::status_mb("VmHWM:"));
    triads.push_back(bench::triad_rates(index_t(1) << 24, 4).mean);
    rss_reset = rss_reset && reset_peak_rss();
  };
  std::vector<double> window_s;  // decode seconds of each window between two triad samples
  std::vector<index_t> window_tokens;
  if (triad_every > 0) sample_triad();

  std::int64_t checksum = tok;
  double decode_s = 0;
  for (index_t s = 0; s < new_tokens;) {
    const index_t n = triad_every > 0 ? std::min(triad_every, new_tokens - s) : new_tokens;
    t0 = bench::Clock::now();
    for (index_t e = s + n; s < e; ++s) {
      auto step = model.forward_cached(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 1), std::vector<std::int64_t>{tok}), cache);
      tok = argmax_row(model.logits(step.reshape(DynShape<2>(1, c.hidden_size))));
      checksum = checksum * 31 + tok;
    }
    window_s.push_back(bench::seconds_since(t0));
    window_tokens.push_back(n);
    decode_s += window_s.back();
    if (triad_every > 0) sample_triad();
  }
  // After a failed reset the mark still holds the first triad's arrays: keep the readings before it.
  if (rss_reset || triad_every == 0) peak_rss_mb = std::max(peak_rss_mb, bench::status_mb("VmHWM:"));
  else std::fprintf(stderr, "bench_llm_decode: cannot reset the peak-RSS mark; peak_rss_mb is the peak before the first triad\n");
  std::vector<double> fractions;  // per window: weight bytes/s over the mean of its two triads
  if (triad_every > 0)
    for (std::size_t w = 0; w < window_s.size(); ++w)
      fractions.push_back(bytes_per_token * double(window_tokens[w]) / window_s[w] / (0.5 * (triads[w] + triads[w + 1])));
  // Each window's figures on stderr, to see how far the bandwidth moved during the run.
  for (std::size_t w = 0; w < fractions.size(); ++w)
    std::fprintf(stderr, "window %zu: %zu tokens, %.2f GB/s decode, triads %.2f / %.2f GB/s, fraction %.3f\n", w,
                 std::size_t(window_tokens[w]), bytes_per_token * double(window_tokens[w]) / window_s[w] / 1e9, triads[w] / 1e9,
                 triads[w + 1] / 1e9, fractions[w]);

  std::printf("load_s: %.4f\n", load_s);
  std::printf("prefill_s: %.4f\n", prefill_s);
  std::printf("prefill_first_s: %.4f\n", prefill_first_s);
  std::printf("decode_tokens_per_s: %.4f\n", double(new_tokens) / decode_s);
  std::printf("peak_rss_mb: %.1f\n", peak_rss_mb);
  std::printf("weight_bytes: %.0f\n", safetensors_bytes(dir));
  std::printf("weight_bytes_per_token: %.0f\n", bytes_per_token);
  std::printf("triad_gbs: %.3f\n", bench::median(triads) / 1e9);
  std::printf("triad_gbs_min: %.3f\ntriad_gbs_max: %.3f\ntriad_samples: %zu\n",
              *std::min_element(triads.begin(), triads.end()) / 1e9, *std::max_element(triads.begin(), triads.end()) / 1e9,
              triads.size());
  std::printf("decode_gbs: %.3f\n", bytes_per_token * double(new_tokens) / decode_s / 1e9);
  if (!fractions.empty()) std::printf("decode_fraction_of_triad: %.3f\n", bench::median(fractions));
  std::fprintf(stderr, "(%s, arithmetic %s, %ld layers, %d threads, prompt %ld, %ld new tokens, cache %ld, tokens checksum %lld)\n",
               precision.c_str(), arithmetic.c_str(), long(c.num_hidden_layers), threads, long(prompt_len), long(new_tokens),
               long(cache_len), (long long)checksum);
  return 0;
}
