#pragma once
// Multi-head attention head by head on the CPU: the timm form on a fused qkv activation, and the Llama
// form (causal, grouped-query: q, k and v as separate tensors). For the first: one parallel region over
// the (sample, head) pairs, taken one at a time from a shared counter, each running its whole chain (scores, softmax, weighted values; or the
// five steps of the VJP) on one thread with serial GEMMs.
//
// Why not the generic composition (a batched GEMM over the heads, a softmax over all of a sample's
// rows, another batched GEMM): that is six parallel regions per sample in the backward, a sample's
// 12 x 197 x 197 scores (1.8 MB) fall out of L2 between them, and the softmax VJP needs a zeroed
// scratch to accumulate into. Per head, the scores (155 KB) stay in L2 from the GEMM that writes them
// to the GEMM that reads them, dS overwrites dP in place, and the threads synchronise once.
//
// The probabilities are not kept for the backward: it recomputes each head's P from q and k into a
// per-thread scratch (one more T x T x hd GEMM per head, about 1% of a ViT-B/16 MoETTA step), which
// saves B H T^2 floats per attention layer on the tape (15 MB per block at batch 8, 13% of the step's
// peak RSS). The recomputation runs the forward's own serial code on the same inputs, so P, and every
// gradient, is bit-identical to keeping it. A caller that passes a probabilities buffer gets P there.
//
// Layouts as in ops/attention.hpp: qkv [B, T, 3D] (q | k | v, head h owning columns h*hd.. of each),
// probabilities [B, H, T, T], output [B, T, D], the qkv gradient [B, T, 3D].

#include <algorithm>

#include "ttmoe/backend/cpu/gemm.hpp"
#include "ttmoe/backend/cpu/reduce.hpp"
#include "ttmoe/core/device.hpp"
#include "ttmoe/core/storage.hpp"

namespace ttmoe::cpu_backend {

/// The fused attention forwards and VJPs (see the file comment).
struct AttentionKernels {
  /// p = softmax(scale q k^T) for one head: q points at the head's first q column of a sample's
  /// [T, 3D] rows (k is Dm columns further). Serial; the forward and the recomputing backward share it.
  template <class T>
  static void head_probabilities(const T* q, index_t Tn, index_t hd, index_t Dm, T scale, T* p) {
    GemmKernels::serial_gemm(false, true, Tn, Tn, hd, scale, q, 3 * Dm, q + Dm, 3 * Dm, T(0), p, Tn);
    for (index_t r = 0; r < Tn; ++r) detail::softmax_row(p + r * Tn, p + r * Tn, Tn);
  }

  /// out[b, :, h] = softmax(scale q k^T) v for every sample b and head h; when `probs` is not null the
  /// probabilities also go to probs[b, h] ([B, H, T, T]), else they live in a per-thread scratch.
  template <class T>
  static void qkv_attention_forward(const T* qkv, index_t B, index_t Tn, index_t H, index_t hd, T scale, T* probs,
                                    T* out) {
    const index_t Dm = H * hd, D3 = 3 * Dm, TT = Tn * Tn;
    ThreadPool::instance().parallel_items(B * H, [&] {
      return [&, scratch = probs ? nullptr : make_buffer<T, cpu>(TT)](index_t bh) {
        const index_t b = bh / H, h = bh % H;
        const T* q = qkv + b * Tn * D3 + h * hd;
        T* p = probs ? probs + bh * TT : scratch->data();
        head_probabilities(q, Tn, hd, Dm, scale, p);
        GemmKernels::serial_gemm(false, false, Tn, hd, Tn, T(1), p, Tn, q + 2 * Dm, D3, T(0), out + b * Tn * Dm + h * hd,
                                 Dm);
      };
    });
  }

  /// Bidirectional attention over PACKED sequences (nn/packed_attention.hpp says what they are):
  /// sequence b owns rows offsets[b] .. offsets[b+1]-1 of qkv [N, 3D] and of out [N, D], and out =
  /// softmax(scale q k^T + bias_h) v per sequence and head h, where `bias` (may be null) is a score
  /// table [H, table, table] whose top-left L x L block each sequence adds. One parallel region over
  /// the (sequence, head) pairs, each running its scores, softmax and weighted values serially: a
  /// batch of 32 short sentences is otherwise three pool hand-offs per sentence and layer (measured
  /// 11% of a sentence-embedding run in run_on_all and the workers' polling), each for a few
  /// microseconds of work.
  template <class T>
  static void packed_qkv_attention_forward(const T* qkv, const index_t* offsets, index_t count, index_t H,
                                           index_t hd, T scale, const T* bias, index_t table, T* out) {
    const index_t Dm = H * hd, D3 = 3 * Dm;
    index_t longest = 0;
    for (index_t b = 0; b < count; ++b) longest = std::max(longest, offsets[b + 1] - offsets[b]);
    if (longest == 0) return;
    ThreadPool::instance().parallel_items(count * H, [&] {
      return [&, scratch = make_buffer<T, cpu>(longest * longest)](index_t bh) {
        const index_t b = bh / H, h = bh % H, L = offsets[b + 1] - offsets[b];
        if (L == 0) return;
        const T* q = qkv + offsets[b] * D3 + h * hd;
        T* p = scratch->data();
        T beta = T(0);
        if (bias) {  // the scores GEMM accumulates onto the bias block (beta = 1)
          for (index_t r = 0; r < L; ++r) std::copy_n(bias + (h * table + r) * table, L, p + r * L);
          beta = T(1);
        }
        GemmKernels::serial_gemm(false, true, L, L, hd, scale, q, D3, q + Dm, D3, beta, p, L);
        for (index_t r = 0; r < L; ++r) detail::softmax_row(p + r * L, p + r * L, L);
        GemmKernels::serial_gemm(false, false, L, hd, L, T(1), p, L, q + 2 * Dm, D3, T(0), out + offsets[b] * Dm + h * hd,
                                 Dm);
      };
    });
  }

  /// The VJP: from g = dL/d(out) [B, T, D] writes (beta 0) or adds (beta 1) dq, dk, dv into dqkv.
  /// dP = g V^T, dV = P^T g, dS = P * (dP - rowsum(dP * P)), dQ = scale dS K, dK = scale dS^T Q.
  /// `probs` null: each head's P is recomputed from q and k (see the file comment).
  template <class T>
  static void qkv_attention_backward(const T* g, const T* qkv, const T* probs, index_t B, index_t Tn, index_t H,
                                     index_t hd, T scale, T beta, T* dqkv) {
    const index_t Dm = H * hd, D3 = 3 * Dm, TT = Tn * Tn;
    ThreadPool::instance().parallel_items(B * H, [&] {
      // dP, then dS in place, and the recomputed P: scratch per thread, from the caching pool (reused
      // call after call).
      return [&, scratch = make_buffer<T, cpu>(TT), p_scratch = probs ? nullptr : make_buffer<T, cpu>(TT)](index_t bh) {
        T* ds = scratch->data();
        const index_t b = bh / H, h = bh % H;
        const T* q = qkv + b * Tn * D3 + h * hd;
        const T* go = g + b * Tn * Dm + h * hd;
        const T* p = probs;
        if (probs) {
          p += bh * TT;
        } else {
          head_probabilities(q, Tn, hd, Dm, scale, p_scratch->data());
          p = p_scratch->data();
        }
        T* dq = dqkv + b * Tn * D3 + h * hd;
        GemmKernels::serial_gemm(false, true, Tn, Tn, hd, T(1), go, Dm, q + 2 * Dm, D3, T(0), ds, Tn);
        GemmKernels::serial_gemm(true, false, Tn, hd, Tn, T(1), p, Tn, go, Dm, beta, dq + 2 * Dm, D3);
        for (index_t r = 0; r < Tn; ++r) detail::softmax_backward_row(p + r * Tn, ds + r * Tn, ds + r * Tn, Tn, false);
        GemmKernels::serial_gemm(false, false, Tn, hd, Tn, scale, ds, Tn, q + Dm, D3, beta, dq, D3);
        GemmKernels::serial_gemm(true, false, Tn, hd, Tn, scale, ds, Tn, q, D3, beta, dq + Dm, D3);
      };
    });
  }

  /// p = softmax(scale q k^T) with the causal mask for one head: q, k [T, hd] contiguous; row r keeps
  /// keys 0..r and is exactly 0 beyond (as the additive -inf mask gives). Serial.
  template <class T>
  static void causal_head_probabilities(const T* q, const T* k, index_t Tn, index_t hd, T scale, T* p) {
    GemmKernels::serial_gemm(false, true, Tn, Tn, hd, scale, q, hd, k, hd, T(0), p, Tn);
    for (index_t r = 0; r < Tn; ++r) {
      detail::softmax_row(p + r * Tn, p + r * Tn, r + 1);
      std::fill(p + r * Tn + r + 1, p + (r + 1) * Tn, T(0));
    }
  }

  /// Causal grouped-query attention: q [B, H, T, hd], k [B, KV, T, hd], v [B, T, KV hd] (as the value
  /// projection writes it); query head h reads kv head h / (H / KV). out [B, T, H hd] (the merged
  /// heads). One parallel region over (sample, query head), each a serial chain on a T x T scratch.
  template <class T>
  static void causal_gqa_attention_forward(const T* q, const T* k, const T* v, index_t B, index_t H, index_t KV,
                                           index_t Tn, index_t hd, T scale, T* out) {
    const index_t G = H / KV;
    ThreadPool::instance().parallel_items(B * H, [&] {
      return [&, scratch = make_buffer<T, cpu>(Tn * Tn)](index_t bh) {
        const index_t b = bh / H, kvh = (bh % H) / G;
        T* p = scratch->data();
        causal_head_probabilities(q + bh * Tn * hd, k + (b * KV + kvh) * Tn * hd, Tn, hd, scale, p);
        GemmKernels::serial_gemm(false, false, Tn, hd, Tn, T(1), p, Tn, v + b * Tn * KV * hd + kvh * hd, KV * hd, T(0),
                                 out + b * Tn * H * hd + (bh % H) * hd, H * hd);
      };
    });
  }

  /// Query rows per work item of cached_causal_gqa_attention_forward: a 64 x 2048 score block (512
  /// KiB at the longest cache) stays in L2 from the GEMM that writes it to the one that reads it, and
  /// 64 rows keep the masked triangle a GEMM computes past the diagonal small (a 64 x 32 average).
  static constexpr index_t kCachedQueryBlock = 64;

  /// Causal grouped-query attention of t new queries per sequence over a KV cache (the many-row
  /// inference path, e.g. a prompt's prefill): q [B, H, t, hd]; kc, vc [B, KV, Tm, hd] already hold
  /// the t new keys and values at positions lengths[b] .. lengths[b] + t - 1; query i of sequence b
  /// attends to positions 0 .. lengths[b] + i. out [B, t, H hd]. Why blocked GEMMs: one query at a
  /// time (nn/kv_cache.hpp's loop) reads all of a head's keys and values per query from one thread;
  /// here a block of 64 queries shares each key and value as the packed GEMM's operand, the blocks
  /// run on every pool thread (taken from a counter, longest first), and a block's scores stop at its
  /// last query's position, so the causal upper half is skipped except inside the diagonal block.
  template <class T>
  static void cached_causal_gqa_attention_forward(const T* q, const T* kc, const T* vc, const index_t* lengths,
                                                  index_t B, index_t H, index_t KV, index_t t, index_t Tm,
                                                  index_t hd, T scale, T* out) {
    const index_t G = H / KV, QB = kCachedQueryBlock, blocks = (t + QB - 1) / QB, ldo = H * hd;
    index_t longest = 0;
    for (index_t b = 0; b < B; ++b) longest = std::max(longest, lengths[b] + t);
    ThreadPool::instance().parallel_items(B * H * blocks, [&] {
      return [&, scratch = make_buffer<T, cpu>(std::min(QB, t) * longest)](index_t item) {
        // Items run last block first: those hold the most keys, so the tail of the job is short ones.
        const index_t blk = blocks - 1 - item / (B * H), bh = item % (B * H), b = bh / H, h = bh % H;
        const index_t i0 = blk * QB, m = std::min(QB, t - i0), first = lengths[b] + i0, n = first + m;
        const T* kh = kc + (b * KV + h / G) * Tm * hd;
        const T* vh = vc + (b * KV + h / G) * Tm * hd;
        T* p = scratch->data();
        GemmKernels::serial_gemm(false, true, m, n, hd, scale, q + (bh * t + i0) * hd, hd, kh, hd, T(0), p, n);
        for (index_t r = 0; r < m; ++r) {  // row r sees keys 0 .. first + r; exactly 0 past them
          detail::softmax_row(p + r * n, p + r * n, first + r + 1);
          std::fill(p + r * n + first + r + 1, p + (r + 1) * n, T(0));
        }
        GemmKernels::serial_gemm(false, false, m, hd, n, T(1), p, n, vh, hd, T(0), out + (b * t + i0) * ldo + h * hd, ldo);
      };
    });
  }

  /// Its VJP from g = dL/d(out) [B, T, H hd]: each of dq, dk, dv (null: not wanted) is written
  /// (its beta 0) or added to (beta 1). One parallel region over (sample, kv head), each running the
  /// query heads that share it one after another, so a task owns its dk and dv rows (no races, no
  /// reduction pass); P is recomputed per head (nothing but q, k, v is kept).
  template <class T>
  static void causal_gqa_attention_backward(const T* g, const T* q, const T* k, const T* v, index_t B, index_t H,
                                            index_t KV, index_t Tn, index_t hd, T scale, T* dq, T beta_q, T* dk,
                                            T beta_k, T* dv, T beta_v) {
    const index_t G = H / KV, TT = Tn * Tn, ldv = KV * hd, ldg = H * hd;
    ThreadPool::instance().parallel_items(B * KV, [&] {
      return [&, p_buf = make_buffer<T, cpu>(TT), ds_buf = make_buffer<T, cpu>(TT)](index_t bk) {
        const index_t b = bk / KV, kvh = bk % KV;
        const T* kb = k + bk * Tn * hd;
        const T* vb = v + b * Tn * ldv + kvh * hd;
        T *p = p_buf->data(), *ds = ds_buf->data();
        for (index_t j = 0; j < G; ++j) {
          const index_t h = kvh * G + j, bh = b * H + h;
          const T* qh = q + bh * Tn * hd;
          const T* go = g + b * Tn * ldg + h * hd;
          causal_head_probabilities(qh, kb, Tn, hd, scale, p);
          GemmKernels::serial_gemm(false, true, Tn, Tn, hd, T(1), go, ldg, vb, ldv, T(0), ds, Tn);  // dP = dO V^T
          if (dv)  // dV (+)= P^T dO, summed over the heads sharing this kv head
            GemmKernels::serial_gemm(true, false, Tn, hd, Tn, T(1), p, Tn, go, ldg, j == 0 ? beta_v : T(1),
                                     dv + b * Tn * ldv + kvh * hd, ldv);
          for (index_t r = 0; r < Tn; ++r) {  // dS = P * (dP - rowsum(dP * P)), 0 where masked
            detail::softmax_backward_row(p + r * Tn, ds + r * Tn, ds + r * Tn, r + 1, false);
            std::fill(ds + r * Tn + r + 1, ds + (r + 1) * Tn, T(0));
          }
          if (dq) GemmKernels::serial_gemm(false, false, Tn, hd, Tn, scale, ds, Tn, kb, hd, beta_q, dq + bh * Tn * hd, hd);
          if (dk)
            GemmKernels::serial_gemm(true, false, Tn, hd, Tn, scale, ds, Tn, qh, hd, j == 0 ? beta_k : T(1),
                                     dk + bk * Tn * hd, hd);
        }
      };
    });
  }
};

}  // namespace ttmoe::cpu_backend
