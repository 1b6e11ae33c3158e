// φ throughput: sentences/s embedding a corpus (one sentence a line) with a sentence-transformers
// folder (all-MiniLM-L6-v2 in bench/report), ttmoe's side of bench/ttmm/run_embed_bench.sh. After
// `--warmup` untimed passes over the whole corpus, `--runs` timed passes; prints the median.
//   bench_ttmm_embed --model DIR --corpus FILE [--threads 2] [--runs 3] [--warmup 1] [--batch 32]
// Output: `ttmoe_sentences_per_s: X` and `ttmoe_embed_peak_rss_mb: Y`.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "../common.hpp"
#include "ttmoe/backend/cpu/backend.hpp"  // the CPU kernels (the encoder runs on cpu)
#include "ttmoe/models/sentence_encoder.hpp"

int main(int argc, char** argv) {
  using namespace ttmoe;
  std::string model, corpus;
  int threads = 2, runs = 3, warmup = 1, batch = 32;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (!std::strcmp(argv[i], "--model")) model = next();
    else if (!std::strcmp(argv[i], "--corpus")) corpus = next();
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(next().c_str());
    else if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(next().c_str());
    else if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(next().c_str());
    else if (!std::strcmp(argv[i], "--batch")) batch = std::atoi(next().c_str());
  }
  if (model.empty() || corpus.empty() || runs < 1) {
    std::fprintf(stderr, "usage: bench_ttmm_embed --model DIR --corpus FILE [--threads 2] [--runs 3] [--warmup 1] [--batch 32]\n");
    return 2;
  }
  cpu_backend::set_num_threads(std::size_t(threads));
  std::vector<std::string> sentences;
  std::ifstream in(corpus);
  for (std::string line; std::getline(in, line);) sentences.push_back(line);
  if (sentences.empty()) {
    std::fprintf(stderr, "bench_ttmm_embed: no sentences in %s\n", corpus.c_str());
    return 1;
  }
  const auto enc = models::SentenceEncoder::load(model, {.batch_size = index_t(batch), .max_seq_length = {}});
  for (int w = 0; w < warmup; ++w) (void)enc.encode(sentences);
  std::vector<double> rates;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = bench::Clock::now();
    const auto e = enc.encode(sentences);
    const double s = bench::seconds_since(t0);
    if (e.extent(0) != sentences.size()) return 1;
    rates.push_back(double(sentences.size()) / s);
  }
  std::printf("ttmoe_sentences_per_s: %.1f\n", bench::median(rates));
  std::printf("ttmoe_embed_peak_rss_mb: %.1f\n", bench::status_mb("VmHWM:"));
  return 0;
}
