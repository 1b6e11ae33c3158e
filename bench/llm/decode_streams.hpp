// `bench_llm_decode --compare R` (issue #14, helper decode18): where a whole-model BF16 decode loses
// against its own GEMV kernel. Over the model's OWN loaded weights, in the same process and the same
// minutes, each round times
//   decode  a few greedy decode steps (forward_cached + logits + argmax), as the bench's decode does
//   ops     the same weights through cpu_backend::linear_bf16_gemv_group in the decode's order and
//           grouping (q|k|v, o, gate|up, down per layer, then the head): one pool job per op, as the
//           decode runs them, and nothing else in between (no attention, norms, RoPE, allocation)
//   layer   the same GEMVs with ONE pool job per layer (the head one more): fewer hand-offs (AVX512-BF16
//           builds, whose `vdpbf16ps` GEMV the bf16 decode runs; 0 elsewhere)
//   read    a plain read of the same bytes, one job per op with the GEMV's items: what a read-only
//           stream of exactly these pages gets
//   triad   bench::triad_rates over 3 x 64 MiB
//   ops_4k, read_4k   ops and read over a second mapping of the same checkpoint file with
//           MADV_NOHUGEPAGE, so 4 KiB page-table entries even where the page cache holds the file in
//           2 MiB folios (which the kernel maps with 2 MiB entries otherwise, hint or not): the same
//           physical pages, only the page-table entries' size differs from the model's mapping
//           (single-file checkpoints only)
// and prints each round's GB/s on stderr and the medians (and per-round ratios) as `compare_*` lines.
// TTMOE_COMPARE_GEMV=r4,r1p8192,... adds a row per named shape of the `vdpbf16ps` GEMV kernel
// (bf16dot::gemv_rows_by: rows per pass, prefetch distance; helper decode19), timed like ops.
// The ops mode also times each kind of op on its own (compare_op_<kind>_gbs), to see whether the
// small k/v products, the 8192-deep down projection or the 525 MB head stream slower.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "../common.hpp"
#include "../triad.hpp"
#include "ttmoe/io/bf16_matrix.hpp"
#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/io/safetensors_mmap.hpp"
#include "ttmoe/ttmoe.hpp"

namespace bench::decode_streams {

/// One parallel region of a decode step: weights that read the same x.
struct Op {
  const char* kind;
  std::vector<const ttmoe::io::Bf16Matrix*> ws;
};

/// The decode's BF16 products in its order: per layer q|k|v, o, gate|up, down; then the head (the
/// untied head, or the tied BF16 embedding table). Empty where the model's weights are not BF16.
template <class Model>
std::vector<std::vector<Op>> decode_ops(const Model& m) {
  std::vector<std::vector<Op>> layers;
  for (const auto& l : m.model.layers) {
    const auto& a = l.self_attn;
    const auto& f = l.mlp;
    if (!a.q_proj.weight_bf16.defined()) return {};
    layers.push_back({{"qkv", {&a.q_proj.weight_bf16, &a.k_proj.weight_bf16, &a.v_proj.weight_bf16}},
                      {"o", {&a.o_proj.weight_bf16}},
                      {"gateup", {&f.gate_proj.weight_bf16, &f.up_proj.weight_bf16}},
                      {"down", {&f.down_proj.weight_bf16}}});
  }
  const ttmoe::io::Bf16Matrix* head = m.lm_head.weight_bf16.defined() ? &m.lm_head.weight_bf16 : nullptr;
  if constexpr (requires { m.model.embed_tokens.weight_bf16; })
    if (!head && m.config.tie_word_embeddings && m.model.embed_tokens.weight_bf16.defined())
      head = &m.model.embed_tokens.weight_bf16;
  if (!head) return {};
  layers.push_back({{"head", {head}}});
  return layers;
}

/// decode_ops' list over another mapping of the checkpoint `file` (the same tensors, the same
/// physical pages), each tensor's pages mapped 4 KiB at a time, with `like`'s shapes; the views keep
/// the file mapped. Empty when the file lacks a tensor.
inline std::vector<std::vector<Op>> decode_ops_4k(const std::vector<std::vector<Op>>& like,
                                                  const std::shared_ptr<const ttmoe::io::SafetensorsFile>& file,
                                                  std::vector<std::unique_ptr<ttmoe::io::Bf16Matrix>>& store) {
  static const char* names[4][3] = {{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
                                    {"self_attn.o_proj", nullptr, nullptr},
                                    {"mlp.gate_proj", "mlp.up_proj", nullptr},
                                    {"mlp.down_proj", nullptr, nullptr}};
  std::vector<std::vector<Op>> out;
  for (std::size_t l = 0; l < like.size(); ++l) {
    std::vector<Op> ops;
    for (std::size_t o = 0; o < like[l].size(); ++o) {
      Op op{like[l][o].kind, {}};
      for (std::size_t i = 0; i < like[l][o].ws.size(); ++i) {
        const std::string key = like[l][o].kind == std::string("head")
                                    ? (file->contains("lm_head.weight") ? "lm_head.weight" : "model.embed_tokens.weight")
                                    : "model.layers." + std::to_string(l) + "." + names[o][i] + ".weight";
        if (!file->contains(key)) return {};
        const auto& t = file->info(key);
        const auto* w = like[l][o].ws[i];
        if (t.bytes.size() != w->bytes()) return {};
        auto m = std::make_unique<ttmoe::io::Bf16Matrix>(ttmoe::io::Bf16Matrix::view(
            file, reinterpret_cast<const std::uint16_t*>(t.bytes.data()), w->rows, w->cols));
        m->arithmetic = w->arithmetic;
        // MADV_NOHUGEPAGE: 4 KiB entries even over 2 MiB folios, which the kernel otherwise maps
        // with 2 MiB entries whatever the mapping asked for.
        const std::size_t page = std::size_t(::sysconf(_SC_PAGESIZE));
        const auto first = reinterpret_cast<std::uintptr_t>(t.bytes.data()) / page * page;
        const auto end = (reinterpret_cast<std::uintptr_t>(t.bytes.data()) + t.bytes.size() + page - 1) / page * page;
        ::madvise(reinterpret_cast<void*>(first), end - first, MADV_NOHUGEPAGE);
        ttmoe::io::detail::prefault_read(t.bytes);
        op.ws.push_back(m.get());
        store.push_back(std::move(m));
      }
      ops.push_back(std::move(op));
    }
    out.push_back(std::move(ops));
  }
  return out;
}

/// Rows per work item of a matrix `cols` wide: linear_bf16_gemv_group's split (kGemvItemBytes).
inline ttmoe::index_t item_rows(ttmoe::index_t cols) {
  return std::max<ttmoe::index_t>(16, ttmoe::cpu_backend::kGemvItemBytes / (2 * cols));
}

/// Items of a list of matrices, in order: (matrix, first row, end row).
struct Item {
  const ttmoe::io::Bf16Matrix* w;
  ttmoe::index_t o0, o1;
};
inline std::vector<Item> items_of(const std::vector<const ttmoe::io::Bf16Matrix*>& ws) {
  std::vector<Item> items;
  for (const auto* w : ws) {
    const ttmoe::index_t chunk = item_rows(w->cols);
    for (ttmoe::index_t o = 0; o < w->rows; o += chunk) items.push_back({w, o, std::min(w->rows, o + chunk)});
  }
  return items;
}

/// XOR of the 64-bit words of [p, p + bytes): a plain read the compiler vectorises.
inline std::uint64_t read_bytes(const void* p, std::size_t bytes) {
  const auto* v = static_cast<const std::uint64_t*>(p);
  std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  std::size_t i = 0, n = bytes / 8;
  for (; i + 4 <= n; i += 4) a0 ^= v[i], a1 ^= v[i + 1], a2 ^= v[i + 2], a3 ^= v[i + 3];
  for (; i < n; ++i) a0 ^= v[i];
  return a0 ^ a1 ^ a2 ^ a3;
}

/// The comparison (file comment). `decode_tokens(n)` runs n decode steps. Prints to stdout/stderr.
template <class Model>
int compare(const Model& model, const std::filesystem::path& dir, int rounds, int tokens_per_round,
            const std::function<void(int)>& decode_tokens) {
  namespace cb = ttmoe::cpu_backend;
  using ttmoe::index_t;
  const auto layers = decode_ops(model);
  if (layers.empty()) {
    std::fprintf(stderr, "bench_llm_decode --compare: the model's weights are not BF16 (use --precision bf16)\n");
    return 2;
  }
  double bytes = 0;
  index_t widest = 0, longest = 0;
  std::map<std::string, double> kind_bytes;
  for (const auto& ops : layers)
    for (const auto& op : ops)
      for (const auto* w : op.ws) {
        bytes += double(w->bytes());
        kind_bytes[op.kind] += double(w->bytes());
        widest = std::max(widest, w->cols);
        longest = std::max(longest, w->rows);
      }
  std::vector<float> x(std::size_t(widest), 0.f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) * 0.01f;
  std::vector<std::vector<float>> ys(3, std::vector<float>(std::size_t(longest)));
  std::map<std::string, double> kind_seconds;

  // A second mapping of a single-file checkpoint with 4 KiB entries (ops_4k, read_4k).
  std::vector<std::vector<Op>> layers_4k;
  std::vector<std::unique_ptr<ttmoe::io::Bf16Matrix>> store_4k;
  if (std::filesystem::exists(dir / "model.safetensors"))
    layers_4k = decode_ops_4k(layers, std::make_shared<const ttmoe::io::SafetensorsFile>(dir / "model.safetensors"), store_4k);
  // ops: one linear_bf16_gemv_group per op, timing each kind (of the model's own mapping).
  auto ops_over = [&](const std::vector<std::vector<Op>>& list, bool per_kind) {
    for (const auto& ops : list)
      for (const auto& op : ops) {
        std::array<cb::Bf16GemvPart, 3> parts;
        for (std::size_t i = 0; i < op.ws.size(); ++i) parts[i] = {op.ws[i], nullptr, ys[i].data(), nullptr};
        const auto t0 = Clock::now();
        cb::linear_bf16_gemv_group(x.data(), std::span<const cb::Bf16GemvPart>(parts.data(), op.ws.size()));
        if (per_kind) kind_seconds[op.kind] += seconds_since(t0);
      }
  };
  auto ops_pass = [&] { ops_over(layers, true); };
  auto ops_4k_pass = [&] { ops_over(layers_4k, false); };
  // layer: every GEMV of a layer (and the head) as one job over all its items.
  std::vector<std::vector<Item>> layer_items;
  for (const auto& ops : layers) {
    std::vector<const ttmoe::io::Bf16Matrix*> ws;
    for (const auto& op : ops) ws.insert(ws.end(), op.ws.begin(), op.ws.end());
    layer_items.push_back(items_of(ws));
  }
  // Only where the `vdpbf16ps` GEMV exists (the kernel the bf16 decode runs); elsewhere not timed.
#if defined(TTMOE_BF16DOT_GEMM)
  constexpr bool with_layer = true;
#else
  constexpr bool with_layer = false;
#endif
  auto layer_pass = [&] {
#if defined(TTMOE_BF16DOT_GEMM)
    std::vector<std::uint16_t> xb(std::size_t((widest + cb::bf16dot::kGemvStep - 1) / cb::bf16dot::kGemvStep * cb::bf16dot::kGemvStep));
    cb::bf16dot::round_row(x.data(), widest, xb.data());
    for (const auto& items : layer_items)
      cb::ThreadPool::instance().parallel_items(index_t(items.size()), [&] {
        return [&](index_t i) {
          const Item& it = items[std::size_t(i)];
          cb::bf16dot::gemv_rows(xb.data(), *it.w, nullptr, nullptr, ys[0].data(), it.o0, it.o1);
        };
      });
#endif
  };
  // read: one job per op over the op's items, each item's bytes read plainly.
  std::vector<std::vector<Item>> op_items, op_items_4k;
  for (const auto& ops : layers)
    for (const auto& op : ops) op_items.push_back(items_of(op.ws));
  for (const auto& ops : layers_4k)
    for (const auto& op : ops) op_items_4k.push_back(items_of(op.ws));
  std::atomic<std::uint64_t> sink{0};
  auto read_over = [&](const std::vector<std::vector<Item>>& list) {
    for (const auto& items : list)
      cb::ThreadPool::instance().parallel_items(index_t(items.size()), [&] {
        return [&](index_t i) {
          const Item& it = items[std::size_t(i)];
          sink.fetch_xor(read_bytes(it.w->bits + it.o0 * it.w->cols, std::size_t(it.o1 - it.o0) * std::size_t(it.w->cols) * 2),
                         std::memory_order_relaxed);
        };
      });
  };
  auto read_pass = [&] { read_over(op_items); };
  auto read_4k_pass = [&] { read_over(op_items_4k); };

  // Kernel variants (TTMOE_COMPARE_GEMV=name,name,...; bench A/B only): bf16dot::gemv_rows_by over the
  // ops' items, one job per op, x rounded once per pass: r<R> with R rows per pass and no prefetch
  // (r4: bw17's kernel), r<R>p<B> with a prefetcht0 of every line B bytes ahead (r1p8192: gemv_rows
  // since decode19); a `far` suffix makes the two threads start from the two halves of each op's
  // items instead of taking adjacent items. Their order rotates from round to round.
  struct Variant {
    std::string name;
    void (*rows)(const std::uint16_t*, const ttmoe::io::Bf16Matrix&, const float*, const float*, float*, index_t, index_t);
    bool far;
  };
  std::vector<Variant> variants;
#if defined(TTMOE_BF16DOT_GEMM)
  {
    namespace bd = cb::bf16dot;
    const std::map<std::string, decltype(Variant::rows)> known = {
        {"r1", &bd::gemv_rows_by<1>},          {"r2", &bd::gemv_rows_by<2>},          {"r4", &bd::gemv_rows_by<4>},
        {"r8", &bd::gemv_rows_by<8>},          {"r1p2048", &bd::gemv_rows_by<1, 2048>}, {"r1p4096", &bd::gemv_rows_by<1, 4096>},
        {"r1p8192", &bd::gemv_rows_by<1, 8192>}, {"r1p16384", &bd::gemv_rows_by<1, 16384>}, {"r2p8192", &bd::gemv_rows_by<2, 8192>},
        {"r4p8192", &bd::gemv_rows_by<4, 8192>}};
    const char* env = std::getenv("TTMOE_COMPARE_GEMV");
    std::string list = env ? env : "";
    for (std::size_t b = 0; b < list.size();) {
      std::size_t e = list.find(',', b);
      if (e == std::string::npos) e = list.size();
      std::string name = list.substr(b, e - b);
      const bool far = name.size() > 3 && name.ends_with("far");
      const auto it = known.find(far ? name.substr(0, name.size() - 3) : name);
      if (it == known.end()) {
        std::fprintf(stderr, "TTMOE_COMPARE_GEMV: unknown variant '%s'\n", name.c_str());
        return 2;
      }
      variants.push_back({name, it->second, far});
      b = e + 1;
    }
  }
#endif
  auto variant_pass = [&](const Variant& v) {
#if defined(TTMOE_BF16DOT_GEMM)
    std::vector<std::uint16_t> xb(std::size_t((widest + cb::bf16dot::kGemvStep - 1) / cb::bf16dot::kGemvStep * cb::bf16dot::kGemvStep));
    cb::bf16dot::round_row(x.data(), widest, xb.data());
    for (const auto& items : op_items) {
      const index_t n = index_t(items.size()), half = (n + 1) / 2;
      cb::ThreadPool::instance().parallel_items(n, [&] {
        return [&](index_t i) {
          // far: counter values alternate between the first and the second half of the items.
          const index_t k = v.far ? (i % 2 == 0 ? i / 2 : half + i / 2) : i;
          const Item& it = items[std::size_t(k)];
          v.rows(xb.data(), *it.w, nullptr, nullptr, ys[0].data(), it.o0, it.o1);
        };
      });
    }
#else
    (void)v;
#endif
  };
  std::vector<std::vector<double>> var_gbs(variants.size()), var_over_ops(variants.size());

  const double token_bytes = bytes;  // the decode streams these bytes per token (the bench's own count adds nothing)
  std::vector<double> dec, ops, lay, rd, tri, dec_over_ops, ops_over_read, lay_over_ops, dec_over_tri, ops_over_tri;
  std::vector<double> ops4, rd4, ops_over_4k, read_over_4k;
  const bool with_4k = !layers_4k.empty();
  ops_pass(), layer_pass(), read_pass();  // warm-up
  if (with_4k) ops_4k_pass(), read_4k_pass();
  for (const auto& v : variants) variant_pass(v);
  kind_seconds.clear();
  auto timed = [&](auto&& f) {
    const auto t0 = Clock::now();
    for (int k = 0; k < tokens_per_round; ++k) f();
    return double(tokens_per_round) * token_bytes / seconds_since(t0);
  };
  for (int r = 0; r < rounds; ++r) {
    auto t0 = Clock::now();
    decode_tokens(tokens_per_round);
    dec.push_back(double(tokens_per_round) * token_bytes / seconds_since(t0));
    ops.push_back(timed(ops_pass));
    lay.push_back(with_layer ? timed(layer_pass) : 0.0);
    rd.push_back(timed(read_pass));
    if (with_4k) {
      ops4.push_back(timed(ops_4k_pass));
      rd4.push_back(timed(read_4k_pass));
      ops_over_4k.push_back(ops.back() / ops4.back());
      read_over_4k.push_back(rd.back() / rd4.back());
    }
    for (std::size_t j = 0; j < variants.size(); ++j) {  // the order rotates with the round
      const std::size_t v = (j + std::size_t(r)) % variants.size();
      var_gbs[v].push_back(timed([&] { variant_pass(variants[v]); }));
      var_over_ops[v].push_back(var_gbs[v].back() / ops.back());
    }
    tri.push_back(triad_rates(ttmoe::index_t(1) << 24, 4).mean);
    dec_over_ops.push_back(dec.back() / ops.back());
    ops_over_read.push_back(ops.back() / rd.back());
    lay_over_ops.push_back(lay.back() / ops.back());  // 0 where the layer mode is not timed
    dec_over_tri.push_back(dec.back() / tri.back());
    ops_over_tri.push_back(ops.back() / tri.back());
    std::fprintf(stderr, "round %d: triad %.1f read %.1f ops %.1f layer %.1f decode %.1f GB/s; decode/ops %.3f", r,
                 tri.back() / 1e9, rd.back() / 1e9, ops.back() / 1e9, lay.back() / 1e9, dec.back() / 1e9,
                 dec_over_ops.back());
    if (with_4k) std::fprintf(stderr, "; 4 KiB pages: read %.1f ops %.1f", rd4.back() / 1e9, ops4.back() / 1e9);
    for (std::size_t v = 0; v < variants.size(); ++v)
      std::fprintf(stderr, "; %s %.1f", variants[v].name.c_str(), var_gbs[v].back() / 1e9);
    std::fprintf(stderr, "\n");
  }
  std::printf("compare_weight_bytes: %.0f\n", token_bytes);
  std::printf("compare_triad_gbs: %.2f\ncompare_read_gbs: %.2f\ncompare_ops_gbs: %.2f\ncompare_layer_gbs: %.2f\ncompare_decode_gbs: %.2f\n",
              median(tri) / 1e9, median(rd) / 1e9, median(ops) / 1e9, median(lay) / 1e9, median(dec) / 1e9);
  std::printf("compare_decode_over_ops: %.3f\ncompare_ops_over_read: %.3f\ncompare_layer_over_ops: %.3f\n"
              "compare_decode_over_triad: %.3f\ncompare_ops_over_triad: %.3f\n",
              median(dec_over_ops), median(ops_over_read), median(lay_over_ops), median(dec_over_tri), median(ops_over_tri));
  if (with_4k)
    std::printf("compare_read_4k_gbs: %.2f\ncompare_ops_4k_gbs: %.2f\ncompare_read_over_4k: %.3f\ncompare_ops_over_4k: %.3f\n",
                median(rd4) / 1e9, median(ops4) / 1e9, median(read_over_4k), median(ops_over_4k));
  for (std::size_t v = 0; v < variants.size(); ++v)
    std::printf("compare_gemv_%s_gbs: %.2f\ncompare_gemv_%s_over_ops: %.3f\n", variants[v].name.c_str(), median(var_gbs[v]) / 1e9,
                variants[v].name.c_str(), median(var_over_ops[v]));
  for (const auto& [kind, s] : kind_seconds)
    std::printf("compare_op_%s_gbs: %.2f\n", kind.c_str(), kind_bytes[kind] * rounds * tokens_per_round / s / 1e9);
  std::printf("compare_sink: %llu\n", (unsigned long long)(sink.load() & 1));
  return 0;
}

}  // namespace bench::decode_streams
