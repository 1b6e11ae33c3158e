// Batch-1 BF16 decode (issue #14, "Performance"): the GEMVs of one Llama-3.2-1B decoder layer
// (q, k, v, o, gate, up, down: 2048 wide, 8 KV heads, intermediate 8192) through
// cpu_backend::linear_bf16, against a STREAM-style triad timed in the same process, in alternating
// rounds so a shared machine's drift hits both alike. Prints `name: value` lines:
//   bf16_gemv_gbps            weight bytes streamed per second (each weight read once per token)
//   triad_gbps                c = a + s b over 3 x 64 MiB on the same thread pool
//   bf16_gemv_fraction_of_triad   the ratio (issue target >= 0.85)
//   read_gbps, read_fraction_of_triad   a plain read of the triad's arrays in the same rounds: the
//                             read-only ceiling a GEMV can reach (bf16dot_gemv_fraction_of_read)
// With `--rss DIR` it instead loads the HF folder DIR with BF16 weights (mapped), prefills a short
// prompt into a 2048-token KV cache, decodes a few tokens and prints peak RSS (getrusage) over the
// weight bytes on disk (issue target <= 1.15). With `--rows R1,R2,...` it times the layer's 7
// projections at R activation rows through each of linear_bf16's two kernels (the dot-product kernel
// and the packed GEMM), alternating, and prints `rows_R_packed_over_dot: t_packed / t_dot` (below 1:
// the GEMM wins; kPackedGemmMinRows is set from these); AVX512-BF16 builds also print
// `rows_R_bf16dot_over_dot`: the `vdpbf16ps` GEMM (gemm_bf16dot.hpp) over the dot-product kernel (x
// holds BF16-exact values, so that kernel computes what the rounded path below the threshold does).
// With `--pages DIR` it times the model's batch-1 path (BF16 activations, the `bf16` arithmetic of
// bench_llm_decode) on the same weight bytes held three ways, alternating with a triad in each
// round: `heap` (std::vector, 4 KiB pages where THP is `madvise`), `file` (written to DIR, mapped and
// prefaulted as load_llama maps a checkpoint: page-cache pages of 4 KiB) and `huge` (anonymous
// memory with MADV_HUGEPAGE, io::copy_to_huge_pages), printing `pages_{heap,file,huge}_gbps`, their
// ratios to the same rounds' triad and `pages_huge_over_file`.
// With `--peak` (AVX512-BF16 builds) it measures the `vdpbf16ps` peak and the prefill GEMM's rates
// (bf16dot_peak.hpp). Threads: $TTMOE_BENCH_THREADS (default 2).
#include <ttmoe/models/llm.hpp>
#include <ttmoe/ttmoe.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bf16dot_peak.hpp"
#include "common.hpp"

using namespace ttmoe;

namespace {

/// Peak RSS of this process so far in bytes (Linux reports ru_maxrss in KiB).
double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

/// Sum of the tensor bytes of every *.safetensors file in `dir` (the weights on disk).
double weight_bytes_on_disk(const std::filesystem::path& dir) {
  double total = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") {
      io::SafetensorsFile f(e.path());
      for (const auto& t : f.tensors()) total += double(t.bytes.size());
    }
  return total;
}

int rss_mode(const std::filesystem::path& dir) {
  auto m = models::load_llama<float>(dir, models::WeightPrecision::bf16);
  const double after_load = peak_rss_bytes();
  auto cache = m.make_cache(1, std::min<index_t>(2048, m.config.max_position_embeddings));
  std::vector<std::int64_t> prompt(64);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = std::int64_t((i * 7919) % m.config.vocab_size);
  auto ids = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, prompt.size()), prompt);
  auto h = m.forward_cached(ids, cache);
  for (int t = 0; t < 8; ++t) {
    auto one = IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 1), {std::int64_t(t + 1)});
    h = m.forward_cached(one, cache);
    (void)m.logits(h);
  }
  const double weights = weight_bytes_on_disk(dir);
  std::printf("weights_on_disk_mb: %.1f\npeak_rss_after_load_mb: %.1f\npeak_rss_mb: %.1f\n", weights / 1e6,
              after_load / 1e6, peak_rss_bytes() / 1e6);
  std::printf("peak_rss_over_weights: %.3f\n", peak_rss_bytes() / weights);
  return 0;
}

/// One decoder layer at Llama-3.2-1B widths ([out, in] of q, k, v, o, gate, up, down) with random
/// BF16 weights.
std::vector<io::Bf16Matrix> layer_weights() {
  const index_t hidden = 2048, kv = 512, inter = 8192;
  const std::vector<std::pair<index_t, index_t>> shapes{{hidden, hidden}, {kv, hidden},    {kv, hidden},
                                                        {hidden, hidden}, {inter, hidden}, {inter, hidden},
                                                        {hidden, inter}};
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.f, 0.02f);
  std::vector<io::Bf16Matrix> ws;
  for (auto [o, i] : shapes) {
    std::vector<float> v(std::size_t(o * i));
    for (auto& x : v) x = d(rng);
    ws.push_back(io::Bf16Matrix::from_floats(v.data(), o, i));
  }
  return ws;
}

/// This process's anonymous memory in transparent huge pages, MB (/proc/self/smaps_rollup; -1 where
/// unavailable): whether the `huge` copies really got 2 MiB pages.
double anon_huge_mb() {
  std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (!f) return -1;
  char line[256];
  double kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "AnonHugePages: %lf", &kb) == 1) break;
  std::fclose(f);
  return kb / 1024.0;
}

/// The STREAM-style arrays both timing modes alternate with: 3 x 64 MiB of floats, far past the
/// caches, on ttmoe's thread pool. triad() is c = a + 3 b; read() only reads the three arrays (XOR
/// of their words, which vectorises with no reordering question): what a read-only stream such as a
/// decode step's GEMVs can get in the same minute. The triad also writes, and on this VM the two do
/// not move together (docs/design.md, #14 decode). Both move bytes() bytes per call.
struct StreamArrays {
  static constexpr index_t n = index_t{1} << 24;
  std::vector<float> a = std::vector<float>(n, 1.f), b = std::vector<float>(n, 2.f), c = std::vector<float>(n, 0.f);
  std::atomic<std::uint32_t> sink{0};

  static double bytes() { return 3.0 * sizeof(float) * double(n); }
  void triad() {
    cpu_backend::parallel_for(n, cpu_backend::kElementwiseGrain, [&](index_t lo, index_t hi) {
      for (index_t i = lo; i < hi; ++i) c[std::size_t(i)] = a[std::size_t(i)] + 3.f * b[std::size_t(i)];
    });
  }
  void read() {
    cpu_backend::parallel_for(n, cpu_backend::kElementwiseGrain, [&](index_t lo, index_t hi) {
      std::uint32_t acc = 0;
      for (const auto* arr : {a.data(), b.data(), c.data()}) {
        const auto* wv = reinterpret_cast<const std::uint32_t*>(arr);
        for (index_t i = lo; i < hi; ++i) acc ^= wv[i];
      }
      sink.fetch_xor(acc, std::memory_order_relaxed);
    });
  }
};

/// --pages DIR: the model's batch-1 GEMV (bf16 arithmetic, one group per projection as
/// nn::Linear runs it) on heap, file-mapped and huge-page copies of one layer's weights.
int pages_mode(const std::filesystem::path& dir) {
  // $TTMOE_BENCH_LAYERS copies of the layer (default 1): a whole model's worth of weights also
  // outgrows what the caches hold of the page tables (a 4 KiB page's entry per 4 KiB of weight).
  std::vector<io::Bf16Matrix> heap;
  const auto one = layer_weights();
  for (int l = 0; l < bench::env_int("TTMOE_BENCH_LAYERS", 1); ++l)
    for (const auto& w : one) {
      auto copy = std::make_shared<std::vector<std::uint16_t>>(w.bits, w.bits + w.bytes() / 2);
      heap.push_back(io::Bf16Matrix::view(copy, copy->data(), w.rows, w.cols));
      heap.back().arithmetic = io::Bf16Arithmetic::bf16_activations;
    }
  // The file: the matrices back to back, mapped read-only and prefaulted (models::load_llama's way).
  const auto path = dir / "bench_bf16_decode_pages.bin";
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw std::runtime_error("cannot write " + path.string());
    for (const auto& w : heap) std::fwrite(w.bits, 1, w.bytes(), f);
    std::fclose(f);
  }
  auto mapped = std::make_shared<io::detail::MappedFile>(path);
  std::filesystem::remove(path);  // the mapping keeps the bytes
  io::detail::prefault_read(mapped->bytes());
  std::vector<io::Bf16Matrix> file, huge;
  std::size_t at = 0;
  for (const auto& w : heap) {
    file.push_back(io::Bf16Matrix::view(mapped, reinterpret_cast<const std::uint16_t*>(mapped->bytes().data() + at), w.rows, w.cols));
    at += w.bytes();
    huge.push_back(io::copy_to_huge_pages(w));
    file.back().arithmetic = huge.back().arithmetic = w.arithmetic;
  }
  double weight_bytes = 0;
  for (const auto& w : heap) weight_bytes += double(w.bytes());
  std::vector<float> x(8192, 0.5f), y(8192);
  auto layer = [&](const std::vector<io::Bf16Matrix>& ws) {
    for (const auto& w : ws) cpu_backend::linear_bf16(x.data(), 1, w, nullptr, nullptr, y.data());
  };
  StreamArrays arrays;
  const int rounds = bench::env_int("TTMOE_BENCH_REPS", 15);
  const int reps = std::max(1, 8 / int(heap.size() / one.size()));  // passes per timing: about 8 layers' worth
  std::vector<double> rate[3], frac[3], huge_over_file, triad_rate;
  const std::vector<io::Bf16Matrix>* sets[3] = {&heap, &file, &huge};
  for (auto* s : sets) layer(*s);
  arrays.triad();
  for (int r = 0; r < rounds; ++r) {
    double g[3];
    // The order rotates each round so no layout always follows the triad.
    for (int k = 0; k < 3; ++k) {
      const int i = (k + r) % 3;
      const auto t0 = bench::Clock::now();
      for (int rep = 0; rep < reps; ++rep) layer(*sets[i]);
      g[i] = reps * weight_bytes / bench::seconds_since(t0);
    }
    const auto t0 = bench::Clock::now();
    for (int k = 0; k < 4; ++k) arrays.triad();
    const double t = 4 * StreamArrays::bytes() / bench::seconds_since(t0);
    triad_rate.push_back(t);
    for (int i = 0; i < 3; ++i) rate[i].push_back(g[i]), frac[i].push_back(g[i] / t);
    huge_over_file.push_back(g[2] / g[1]);
  }
  const char* names[3] = {"heap", "file", "huge"};
  std::printf("triad_gbps: %.2f\n", bench::median(triad_rate) / 1e9);
  for (int i = 0; i < 3; ++i)
    std::printf("pages_%s_gbps: %.2f\npages_%s_fraction_of_triad: %.3f\n", names[i], bench::median(rate[i]) / 1e9,
                names[i], bench::median(frac[i]));
  std::printf("pages_huge_over_file: %.3f\n", bench::median(huge_over_file));
  std::printf("anon_huge_pages_mb: %.1f\n", anon_huge_mb());
  return 0;
}

#if defined(TTMOE_PACKED_GEMM)
/// --rows: the dot-product kernel against the packed GEMM at each row count in `list` (comma-separated).
int rows_mode(const std::string& list) {
  const auto ws = layer_weights();
  const int rounds = bench::env_int("TTMOE_BENCH_REPS", 5);
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const index_t rows = std::stoul(list.substr(at, comma - at));
    at = comma + 1;
    std::vector<float> x(std::size_t(rows * 8192), 0.5f), y(std::size_t(rows * 8192));
    auto run = [&](auto kernel) {
      const auto t0 = bench::Clock::now();
      for (const auto& w : ws) kernel(x.data(), rows, w, nullptr, nullptr, y.data());
      return bench::seconds_since(t0);
    };
    std::vector<double> ratio, dot_ratio;
    run(cpu_backend::linear_bf16_dot), run(cpu_backend::linear_bf16_packed);  // warm-up
    for (int r = 0; r < rounds; ++r) {
      const double dot = run(cpu_backend::linear_bf16_dot);
      ratio.push_back(run(cpu_backend::linear_bf16_packed) / dot);
#if defined(TTMOE_BF16DOT_GEMM)
      dot_ratio.push_back(run(cpu_backend::bf16dot::linear) / dot);
#endif
    }
    std::printf("rows_%zu_packed_over_dot: %.3f\n", std::size_t(rows), bench::median(ratio));
    if (!dot_ratio.empty()) std::printf("rows_%zu_bf16dot_over_dot: %.3f\n", std::size_t(rows), bench::median(dot_ratio));
    std::fflush(stdout);
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  cpu_backend::set_num_threads(std::size_t(bench::env_int("TTMOE_BENCH_THREADS", 2)));
  if (argc == 3 && std::string(argv[1]) == "--rss") return rss_mode(argv[2]);
  if (argc == 3 && std::string(argv[1]) == "--pages") return pages_mode(argv[2]);
#if defined(TTMOE_BF16DOT_GEMM)
  if (argc == 2 && std::string(argv[1]) == "--peak") return bench::bf16peak::peak_mode();
#endif
#if defined(TTMOE_PACKED_GEMM)
  if (argc == 3 && std::string(argv[1]) == "--rows") return rows_mode(argv[2]);
#endif

  auto ws = layer_weights();
  // $TTMOE_BENCH_WEIGHT_OFFSET (bytes, even; unset: as allocated, which for glibc's large blocks is
  // 16 bytes past a page): each matrix moved to that offset past a 64-byte boundary, to see what rows
  // that straddle cache lines cost (a mapped checkpoint's tensors lie wherever the file puts them).
  if (const int off = bench::env_int("TTMOE_BENCH_WEIGHT_OFFSET", -1); off >= 0)
    for (auto& w : ws) {
      auto buf = std::make_shared<std::vector<std::uint16_t>>(w.bytes() / 2 + 64);
      const auto base = reinterpret_cast<std::uintptr_t>(buf->data());
      auto* at = reinterpret_cast<std::uint16_t*>((base + 63) / 64 * 64 + std::uintptr_t(off));
      std::copy(w.bits, w.bits + w.bytes() / 2, at);
      const auto arithmetic = w.arithmetic;
      w = io::Bf16Matrix::view(buf, at, w.rows, w.cols);
      w.arithmetic = arithmetic;
    }
  std::printf("weight_offset_mod_64: %zu\n", std::size_t(reinterpret_cast<std::uintptr_t>(ws[0].bits) % 64));
  double weight_bytes = 0;
  for (const auto& w : ws) weight_bytes += double(w.bytes());
  const index_t inter = 8192;
  std::vector<float> x(inter, 0.5f), y(inter);
  auto layer = [&] {
    for (const auto& w : ws) cpu_backend::linear_bf16(x.data(), 1, w, nullptr, nullptr, y.data());
  };

  StreamArrays arrays;
  const double triad_bytes = StreamArrays::bytes();

  // Alternating rounds; each round times a few repetitions of each and keeps the rate.
  const int rounds = bench::env_int("TTMOE_BENCH_REPS", 15);
  std::vector<double> gemv_rate, triad_rate, dot_gemv_rate, read_rate, read_over_triad, dot_over_read;
  layer(), arrays.triad(), arrays.read();  // warm-up: pool start, first touches
  for (int r = 0; r < rounds; ++r) {
    auto t0 = bench::Clock::now();
    for (int k = 0; k < 8; ++k) layer();
    gemv_rate.push_back(8 * weight_bytes / bench::seconds_since(t0));
    t0 = bench::Clock::now();
    for (int k = 0; k < 4; ++k) arrays.triad();
    triad_rate.push_back(4 * triad_bytes / bench::seconds_since(t0));
    t0 = bench::Clock::now();
    for (int k = 0; k < 4; ++k) arrays.read();
    read_rate.push_back(4 * triad_bytes / bench::seconds_since(t0));
    read_over_triad.push_back(read_rate.back() / triad_rate.back());
#if defined(TTMOE_BF16DOT_GEMM)
    // The vdpbf16ps GEMV (x rounded to BF16) on the same weights, in the same rounds.
    t0 = bench::Clock::now();
    for (int k = 0; k < 8; ++k)
      for (const auto& w : ws) cpu_backend::bf16dot::gemv(x.data(), w, nullptr, nullptr, y.data());
    dot_gemv_rate.push_back(8 * weight_bytes / bench::seconds_since(t0));
    dot_over_read.push_back(dot_gemv_rate.back() / read_rate.back());
#endif
  }
  const double g = bench::median(gemv_rate), t = bench::median(triad_rate);
  std::printf("bf16_gemv_layer_mb: %.1f\nbf16_gemv_gbps: %.2f\ntriad_gbps: %.2f\nbf16_gemv_fraction_of_triad: %.3f\n",
              weight_bytes / 1e6, g / 1e9, t / 1e9, g / t);
  std::printf("read_gbps: %.2f (rounds %.1f-%.1f)\nread_fraction_of_triad: %.3f (rounds %.3f-%.3f)\n",
              bench::median(read_rate) / 1e9, *std::min_element(read_rate.begin(), read_rate.end()) / 1e9,
              *std::max_element(read_rate.begin(), read_rate.end()) / 1e9, bench::median(read_over_triad),
              *std::min_element(read_over_triad.begin(), read_over_triad.end()),
              *std::max_element(read_over_triad.begin(), read_over_triad.end()));
  if (!dot_gemv_rate.empty())
    std::printf("bf16dot_gemv_gbps: %.2f\nbf16dot_gemv_over_dot_kernel: %.3f\nbf16dot_gemv_fraction_of_read: %.3f\n",
                bench::median(dot_gemv_rate) / 1e9, bench::median(dot_gemv_rate) / g, bench::median(dot_over_read));
  if (bench::env_int("TTMOE_BENCH_PER_ROUND", 0))  // each round's rates, to see the VM's fast and slow minutes
    for (int r = 0; r < rounds; ++r)
      std::printf("round %d: triad %.1f read %.1f gemv %.1f GB/s\n", r, triad_rate[std::size_t(r)] / 1e9,
                  read_rate[std::size_t(r)] / 1e9, (dot_gemv_rate.empty() ? gemv_rate : dot_gemv_rate)[std::size_t(r)] / 1e9);
  std::printf("sink: %u\n", arrays.sink.load());
  return 0;
}
