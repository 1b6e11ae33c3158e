#pragma once
// The CPU executor for fused elementwise kernels: coalesce dimensions, split the output into one
// contiguous range per thread, walk each range row by row and run the inner dimension in xsimd
// batches with a scalar tail.

#include <algorithm>
#include <array>
#include <utility>

#include "ttmoe/simd/math.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/core/broadcast.hpp"
#include "ttmoe/expr/kernel.hpp"
#include "ttmoe/expr/coalesce.hpp"

namespace ttmoe::cpu_backend {

/// Elements per thread below which a loop is not split (thread wake-up costs more than it saves).
inline constexpr index_t kElementwiseGrain = 1 << 15;

namespace detail {
// Runs `body(kernel, j_begin, j_end, out_offset_of_row)` over output positions [b, e), row by row.
template <std::size_t R, class K, class Body>
void for_rows(K& k, const std::array<index_t, R>& ext, index_t b, index_t e, Body&& body) {
  if constexpr (R == 0) {
    k.set_row(std::array<index_t, R>{}, 0);
    if (b < e) body(k, 0, 1, 0);
    return;
  } else {
  const index_t inner = ext[R - 1];
  index_t row = b / inner, col = b % inner, pos = b;
  std::array<index_t, R> idx{};
  while (pos < e) {
    index_t r = row;
    for (std::size_t d = R - 1; d-- > 0;) {
      idx[d] = r % ext[d];
      r /= ext[d];
    }
    k.set_row(idx, row * inner);
    const index_t n = std::min(inner - col, e - pos);
    body(k, col, col + n, row * inner);
    pos += n;
    col = 0;
    ++row;
  }
  }
}

// Runs `body(kernel, j_begin, j_end, out_offset_of_row)` over every output position of `ext`: the
// dimensions coalesced, the positions split into one contiguous range per thread, each thread
// walking its range row by row with its own copy of the kernel (kernels hold per-row state).
template <std::size_t R, class K, class Body>
void parallel_rows(K kernel, std::array<index_t, R> ext, Body&& body) {
  expr::coalesce(ext, kernel);
  index_t n = 1;
  for (auto x : ext) n *= x;
  parallel_for(n, kElementwiseGrain, [&](index_t b, index_t e) {
    K k = kernel;
    for_rows<R>(k, ext, b, e, body);
  });
}
}  // namespace detail

/// Fused elementwise execution and the small buffer primitives views need.
struct ElementwiseKernels {
  /// out[i] = kernel value at output position i, for every i of `ext`.
  template <class T, std::size_t R, class K>
  static void evaluate(K kernel, T* out, std::array<index_t, R> ext) {
    detail::parallel_rows<R>(std::move(kernel), ext, [&](K& kk, index_t j0, index_t j1, index_t off) {
      using B = batch<T>;
      constexpr index_t W = B::size;
      T* o = out + off;
      index_t j = j0;
      for (; j + W <= j1; j += W) vm::store(o + j, kk.template eval<B>(j));
      for (; j < j1; ++j) o[j] = kk.template eval<T>(j);
    });
  }

  /// Runs the fused VJP: for every output position, recompute the forward values and push grad_out
  /// into the sinks of the leaves that need a gradient.
  template <class T, std::size_t R, class K>
  static void evaluate_backward(K kernel, const T* grad_out, std::array<index_t, R> ext) {
    detail::parallel_rows<R>(std::move(kernel), ext, [&](K& kk, index_t j0, index_t j1, index_t off) {
      using B = batch<T>;
      constexpr index_t W = B::size;
      const T* g = grad_out + off;
      index_t j = j0;
      for (; j + W <= j1; j += W) {
        typename K::template Cache<B> c;
        kk.template fwd<B>(j, c);
        kk.template bwd<B>(j, c, vm::load<B>(g + j));
      }
      for (; j < j1; ++j) {
        typename K::template Cache<T> c;
        kk.template fwd<T>(j, c);
        kk.template bwd<T>(j, c, g[j]);
      }
    });
  }

  /// dst[i] += src[i] for i < n.
  template <class T>
  static void add_inplace(T* dst, const T* src, index_t n) {
    parallel_for(n, kElementwiseGrain, [&](index_t b, index_t e) {
      using B = batch<T>;
      constexpr index_t W = B::size;
      index_t i = b;
      for (; i + W <= e; i += W) vm::store(dst + i, vm::load<B>(dst + i) + vm::load<B>(src + i));
      for (; i < e; ++i) dst[i] += src[i];
    });
  }

  /// Sums `src` (laid out with extents `out`) over the dimensions along which an operand of extents
  /// `leaf` was broadcast, adding the result into `dst` (laid out as `leaf`).
  template <class T, std::size_t RL, std::size_t R>
  static void reduce_broadcast_add(T* dst, const std::array<index_t, RL>& leaf, const T* src, const std::array<index_t, R>& out) {
    // Walk src rows with the leaf's broadcast strides: a leaf kernel over dst used as a write target.
    expr::LeafKernel<T, R> k;
    k.base = dst;
    k.stride = broadcast_strides<R>(leaf, out);
    std::array<index_t, R> ext = out;
    expr::coalesce(ext, k);
    index_t n = 1;
    for (auto x : ext) n *= x;
    auto add_rows = [&](auto& kk, index_t j0, index_t j1, index_t off) {
      T* d = const_cast<T*>(kk.row);
      const T* s = src + off;
      if (kk.inner_contiguous) {
        for (index_t j = j0; j < j1; ++j) d[j] += s[j];
      } else {
        T acc = 0;
        for (index_t j = j0; j < j1; ++j) acc += s[j];
        d[0] += acc;
      }
    };
    // Rows may run in parallel only when no two of them reach the same destination: when the leaf
    // is broadcast along no outer (row) dimension, e.g. a per-row scale [N, 1] of an [N, D] product
    // (the MoE layer's gates), whose gradient is one row sum per destination. Then each thread takes
    // whole rows (a split inside a row would add two partial sums into one element) and the sums
    // come out the same as serially. Otherwise rows are summed serially.
    bool rows_disjoint = true;
    for (std::size_t d = 0; d + 1 < R; ++d) rows_disjoint = rows_disjoint && (ext[d] == 1 || k.stride[d] != 0);
    index_t inner = 1;
    if constexpr (R > 0) inner = ext[R - 1];
    if (rows_disjoint && inner > 0) {
      const index_t rows = n / inner;
      parallel_for(rows, std::max<index_t>(1, kElementwiseGrain / inner), [&](index_t b, index_t e) {
        auto kk = k;
        detail::for_rows<R>(kk, ext, b * inner, e * inner, add_rows);
      });
    } else {
      detail::for_rows<R>(k, ext, 0, n, add_rows);
    }
  }
};

}  // namespace ttmoe::cpu_backend
