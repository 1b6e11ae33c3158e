#pragma once
// A preallocated key/value cache for causal decoding and the attention kernel that reads it.
// Layout [layers, B, KV, T_max, head_dim]: one sequence's keys of one head are contiguous, so a
// decode step streams them front to back. Every sequence has its own length (no padding tokens are
// attended): prompts of different lengths are prefilled together right-padded, and the padded tail
// is simply overwritten by the next decode step. Inference only (never recorded on a tape); the
// kernel runs on host-accessible memory (the CPU backend). A step of many tokens (a prompt) goes to
// the backend's blocked kernel where it has one (FusedCachedAttentionBackend); decode steps keep the
// query-by-query loop here.

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/backend/cpu/decode_attention.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/core/error.hpp"
#include "ttmoe/core/tensor.hpp"

namespace ttmoe::nn {

/// Keys and values of every layer for B sequences, up to `capacity()` positions each.
template <class T = float, class D = cpu>
struct KVCache {
  Tensor<T, DynShape<5>, D> k, v;  ///< [layers, B, KV, T_max, hd]
  std::vector<index_t> lengths;    ///< positions filled per sequence (the next token's position)

  KVCache() = default;
  /// Allocates a cache for `batch` sequences, zero-filled. Only written positions are ever read; the
  /// fill is there so the pages are mapped now and not by the first prompt's stores: with transparent
  /// huge pages each store into a fresh 2 MiB page zeroes all of it, so a 512-token prefill into a
  /// 2048-position cache would pay for zeroing the whole cache (~6% of that prefill, docs/design.md),
  /// and a cache is made once and reset() for the next prompts.
  KVCache(index_t layers, index_t batch, index_t kv_heads, index_t capacity, index_t head_dim)
      : k(Tensor<T, DynShape<5>, D>::zeros(DynShape<5>(layers, batch, kv_heads, capacity, head_dim))),
        v(Tensor<T, DynShape<5>, D>::zeros(DynShape<5>(layers, batch, kv_heads, capacity, head_dim))),
        lengths(static_cast<std::size_t>(batch), 0) {}

  index_t layers() const { return k.extent(0); }
  index_t batch() const { return k.extent(1); }
  index_t kv_heads() const { return k.extent(2); }
  index_t capacity() const { return k.extent(3); }
  index_t head_dim() const { return k.extent(4); }
  /// Forgets every sequence (the storage is kept for the next prompts).
  void reset() { std::fill(lengths.begin(), lengths.end(), 0); }
};

/// From this many new tokens per step kv_cache_attention hands the attention to the backend's blocked
/// kernel (FusedCachedAttentionBackend) where it has one; fewer (decode) keep the query-by-query loop
/// below, whose per-query cost is a single pass over the keys and values.
inline constexpr index_t kCachedAttentionMinRows = 16;

namespace detail {
/// a * b + c, fused where the target has a fused multiply-add instruction: there GCC fuses
/// `c += a * b` by itself at -O3 but not at -O1 / -O2, so spelling it out gives the same sums at every
/// level. Elsewhere the plain product and sum (the only form such a target computes at any level):
/// std::fma without the instruction is a call into the maths library per element, which would also
/// stop the loops below from vectorising.
inline float mul_add(float a, float b, float c) {
#if defined(__FMA__) || defined(FP_FAST_FMAF) || defined(__aarch64__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// q . k in float with 8 independent partial sums (the compiler vectorises them; one running sum
/// would serialise on the add latency), each a chain of mul_add: where the target fuses, the same
/// sums as cpu_backend::scores8's, which the decode loop runs on 8 keys at a time.
template <class T>
inline float dot(const T* a, const T* b, index_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (index_t u = 0; u < 8; ++u) acc[u] = mul_add(float(a[e + u]), float(b[e + u]), acc[u]);
  for (; e < n; ++e) acc[0] = mul_add(float(a[e]), float(b[e]), acc[0]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
}  // namespace detail

/// One layer's step: stores the new keys k_new [B, KV, t, hd] (RoPE applied) and values
/// v_new [B, t, KV, hd] at positions lengths[b] + i, then writes causal attention of q [B, H, t, hd]
/// over positions [0, lengths[b] + i] to out [B, t, H * hd]. Query head h reads kv head h / (H / KV).
/// Does not advance `lengths` (all layers of a step share them).
template <class T, class D>
void kv_cache_attention(KVCache<T, D>& cache, index_t layer, const T* q, const T* k_new, const T* v_new, T* out,
                        index_t heads, index_t t, T scale) {
  static_assert(std::is_same_v<D, cpu>, "kv_cache_attention runs on host memory (CPU backend)");
  const index_t B = cache.batch(), KV = cache.kv_heads(), Tm = cache.capacity(), hd = cache.head_dim();
  const index_t H = heads, g = H / KV;
  for (index_t b = 0; b < B; ++b)
    if (cache.lengths[std::size_t(b)] + t > Tm)
      throw ValueError("kv_cache_attention: sequence " + std::to_string(b) + " needs " +
                       std::to_string(cache.lengths[std::size_t(b)] + t) + " positions, the cache holds " +
                       std::to_string(Tm));
  T* kc = cache.k.data() + layer * B * KV * Tm * hd;
  T* vc = cache.v.data() + layer * B * KV * Tm * hd;
  for (index_t b = 0; b < B; ++b)
    for (index_t h = 0; h < KV; ++h)
      for (index_t i = 0; i < t; ++i) {
        const index_t dst = ((b * KV + h) * Tm + cache.lengths[std::size_t(b)] + i) * hd;
        std::copy_n(k_new + ((b * KV + h) * t + i) * hd, hd, kc + dst);
        std::copy_n(v_new + ((b * t + i) * KV + h) * hd, hd, vc + dst);
      }
  if constexpr (FusedCachedAttentionBackend<D, T>) {
    if (t >= kCachedAttentionMinRows) {  // a prompt: blocked GEMMs on every thread
      Backend<D>::cached_causal_gqa_attention_forward(q, kc, vc, cache.lengths.data(), B, H, KV, t, Tm, hd, scale, out);
      return;
    }
  }
  // One item per (sequence, query head), taken from a shared counter by the pool's threads, each
  // with its own scratch: every item's arithmetic is the serial loop's, so the result does not depend
  // on the threads. Why parallel: at batch 1 this ran on the calling thread alone while the other
  // waited, about 5-8% of a 1B model's decode step at 512-640 positions (docs/design.md, decode16).
  cpu_backend::ThreadPool::instance().parallel_items(B * H, [&] {
    return [&, p = std::vector<float>(), acc = std::vector<float>(static_cast<std::size_t>(hd))](index_t item) mutable {
      const index_t b = item / H, h = item % H;
      const T* kh = kc + (b * KV + h / g) * Tm * hd;
      const T* vh = vc + (b * KV + h / g) * Tm * hd;
      for (index_t i = 0; i < t; ++i) {
        const T* qi = q + ((b * H + h) * t + i) * hd;
        const index_t n = cache.lengths[std::size_t(b)] + i + 1;  // causal: keys up to this position
        p.resize(std::size_t(n));
        float mx = -INFINITY;
        index_t first = 0;  // keys before this one have their scores
#if defined(TTMOE_DECODE_ATTENTION_AVX)
        // 8 keys at a time, the same sums as detail::dot (cpu_backend::scores8).
        if constexpr (std::is_same_v<T, float>)
          if (hd % 8 == 0)
            for (; first + 8 <= n; first += 8) cpu_backend::scores8(qi, kh + first * hd, hd, p.data() + first);
        for (index_t j = 0; j < first; ++j) mx = std::max(mx, p[std::size_t(j)] *= float(scale));
#endif
        for (index_t j = first; j < n; ++j) {
          p[std::size_t(j)] = detail::dot(qi, kh + j * hd, hd) * float(scale);
          mx = std::max(mx, p[std::size_t(j)]);
        }
        float sum = 0.f;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        std::fill(acc.begin(), acc.end(), 0.f);
        index_t done = 0;  // keys already in acc
#if defined(TTMOE_DECODE_ATTENTION_AVX)
        if constexpr (std::is_same_v<T, float>)
          if (hd % 8 == 0) {
            cpu_backend::weighted_rows(p.data(), vh, n, hd, acc.data());  // the loop below, in registers
            done = n;
          }
#endif
        for (index_t j = done; j < n; ++j) {
          const float w = p[std::size_t(j)];
          const T* vj = vh + j * hd;
          // detail::mul_add: the multiply-add the compiler forms at -O3 anyway, at every level.
          for (index_t e = 0; e < hd; ++e) acc[std::size_t(e)] = detail::mul_add(w, float(vj[e]), acc[std::size_t(e)]);
        }
        T* o = out + (b * t + i) * H * hd + h * hd;
        for (index_t e = 0; e < hd; ++e) o[e] = static_cast<T>(acc[std::size_t(e)] / sum);
      }
    };
  });
}

}  // namespace ttmoe::nn
