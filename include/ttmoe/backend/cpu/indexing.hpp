#pragma once
// Index-driven copies on the CPU: gather along an axis, strided block copies (concat, narrow,
// permute), top-k. Indices are validated by the op layer before they reach these loops.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "ttmoe/backend/cpu/thread_pool.hpp"

namespace ttmoe::cpu_backend {

/// Gathers, copies and selections.
struct IndexKernels {
  /// out[o, j, i] = x[o, idx[o, j, i], i] for j < m.
  template <class T>
  static void gather_axis(const T* x, const std::int64_t* idx, T* out, index_t outer, index_t n, index_t inner,
                          index_t m) {
    parallel_for(outer, std::max<index_t>(1, 4096 / std::max<index_t>(1, m * inner)), [&](index_t b, index_t e) {
      for (index_t o = b; o < e; ++o)
        for (index_t j = 0; j < m; ++j)
          for (index_t i = 0; i < inner; ++i) {
            const index_t q = (o * m + j) * inner + i;
            out[q] = x[(o * n + static_cast<index_t>(idx[q])) * inner + i];
          }
    });
  }

  /// out[j, :] = x[idx[j], :] for j < m, rows of `row` elements (index_select; parallel over rows).
  template <class T>
  static void gather_rows(const T* x, const std::int64_t* idx, T* out, index_t row, index_t m) {
    parallel_for(m, std::max<index_t>(1, 8192 / std::max<index_t>(1, row)), [&](index_t b, index_t e) {
      for (index_t j = b; j < e; ++j)
        std::memcpy(out + j * row, x + static_cast<index_t>(idx[j]) * row, std::size_t(row) * sizeof(T));
    });
  }

  /// dx[idx[j], :] += g[j, :] for j < m (index_select's VJP). Several j may hit one row, so the work
  /// is split by columns: each element still adds its sources in j order (deterministic).
  template <class T>
  static void scatter_add_rows(T* dx, const T* g, const std::int64_t* idx, index_t row, index_t m) {
    constexpr index_t kColumns = 64;  // a chunk of a row: one cache line per 16 floats
    const index_t chunks = (row + kColumns - 1) / kColumns;
    parallel_for(chunks, std::max<index_t>(1, 4096 / std::max<index_t>(1, m)), [&](index_t b, index_t e) {
      const index_t c0 = b * kColumns, c1 = std::min(row, e * kColumns);
      for (index_t j = 0; j < m; ++j) {
        T* d = dx + static_cast<index_t>(idx[j]) * row;
        const T* s = g + j * row;
        for (index_t i = c0; i < c1; ++i) d[i] += s[i];
      }
    });
  }

  /// Copies `rows` blocks of `len` elements: dst[r * dst_stride + k] (+)= src[r * src_stride + k].
  template <class T>
  static void copy_blocks(T* dst, index_t dst_stride, const T* src, index_t src_stride, index_t rows, index_t len,
                          bool accumulate) {
    parallel_for(rows, std::max<index_t>(1, 8192 / std::max<index_t>(1, len)), [&](index_t b, index_t e) {
      for (index_t r = b; r < e; ++r) {
        T* d = dst + r * dst_stride;
        const T* s = src + r * src_stride;
        if (accumulate) {
          for (index_t k = 0; k < len; ++k) d[k] += s[k];
        } else {
          std::memcpy(d, s, len * sizeof(T));
        }
      }
    });
  }

  /// out = x with axes permuted: out extents are ext[perm[d]]; (accumulate: out += permuted x).
  template <class T, std::size_t R>
  static void permute(const T* x, T* out, const std::array<index_t, R>& ext, const std::array<std::size_t, R>& perm,
                      bool accumulate) {
    std::array<index_t, R> in_stride{}, out_ext{};
    index_t acc = 1;
    for (std::size_t d = R; d-- > 0;) {
      in_stride[d] = acc;
      acc *= ext[d];
    }
    for (std::size_t d = 0; d < R; ++d) out_ext[d] = ext[perm[d]];
    const index_t inner = out_ext[R - 1], rows = acc / std::max<index_t>(1, inner);
    const index_t inner_stride = in_stride[perm[R - 1]];
    parallel_for(rows, 64, [&](index_t b, index_t e) {
      for (index_t r = b; r < e; ++r) {
        index_t rr = r, off = 0;
        for (std::size_t d = R - 1; d-- > 0;) {
          off += (rr % out_ext[d]) * in_stride[perm[d]];
          rr /= out_ext[d];
        }
        T* o = out + r * inner;
        const T* s = x + off;
        if (accumulate) {
          for (index_t k = 0; k < inner; ++k) o[k] += s[k * inner_stride];
        } else {
          for (index_t k = 0; k < inner; ++k) o[k] = s[k * inner_stride];
        }
      }
    });
  }

  /// Top-k of each row of length n (descending; ties -> lower index first). NaN ranks highest.
  template <class T>
  static void topk(const T* x, T* values, std::int64_t* indices, index_t rows, index_t n, index_t k) {
    parallel_for(rows, std::max<index_t>(1, 4096 / std::max<index_t>(1, n)), [&](index_t b, index_t e) {
      std::vector<index_t> order(n);
      for (index_t r = b; r < e; ++r) {
        const T* xr = x + r * n;
        std::iota(order.begin(), order.end(), index_t(0));
        auto greater = [&](index_t a, index_t c) {
          const T va = xr[a], vc = xr[c];
          const bool na = va != va, nc = vc != vc;
          if (na != nc) return na;
          if (va != vc) return va > vc;
          return a < c;
        };
        std::partial_sort(order.begin(), order.begin() + k, order.end(), greater);
        for (index_t j = 0; j < k; ++j) {
          values[r * k + j] = xr[order[j]];
          indices[r * k + j] = static_cast<std::int64_t>(order[j]);
        }
      }
    });
  }
};

}  // namespace ttmoe::cpu_backend
