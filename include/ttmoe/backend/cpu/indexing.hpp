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

namespace detail {
/// a . b over n elements with 16 partial sums (lane u adds the products of elements 16 s + u in order
/// of s, then the lanes and the tail are added in order): independent chains the compiler turns into
/// one vector of sums, where a single running sum would wait on every add.
template <class T>
T row_dot(const T* a, const T* b, index_t n) {
  constexpr index_t L = 16;
  T lanes[L] = {};
  index_t c = 0;
  for (; c + L <= n; c += L)
    for (index_t u = 0; u < L; ++u) lanes[u] += a[c + u] * b[c + u];
  T sum = T(0);
  for (index_t u = 0; u < L; ++u) sum += lanes[u];
  for (; c < n; ++c) sum += a[c] * b[c];
  return sum;
}
}  // namespace detail

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

  /// out[i, :] = residual[i, :] (null: 0) + sum over j < k of gate[q] * parts[part[q]][row[q], :],
  /// q = i k + j (part -1 or a null part: nothing; a null gate: 1), rows of `width` elements: a
  /// mixture of experts' combine in one pass (GatedRowsBackend). out may be residual (in place).
  template <class T>
  static void gated_rows(const T* const* parts, const std::int64_t* part, const std::int64_t* row, const T* gate,
                         const T* residual, T* out, index_t width, index_t n, index_t k) {
    parallel_for(n, std::max<index_t>(1, 8192 / std::max<index_t>(1, width * k)), [&](index_t b, index_t e) {
      for (index_t i = b; i < e; ++i) {
        T* o = out + i * width;
        if (residual && residual != out) std::copy(residual + i * width, residual + (i + 1) * width, o);
        bool written = residual != nullptr;
        for (index_t q = i * k; q < (i + 1) * k; ++q) {
          if (part[q] < 0 || !parts[part[q]]) continue;
          const T w = gate ? gate[q] : T(1);
          const T* x = parts[part[q]] + static_cast<index_t>(row[q]) * width;
          if (written)
            for (index_t c = 0; c < width; ++c) o[c] += w * x[c];
          else
            for (index_t c = 0; c < width; ++c) o[c] = w * x[c];
          written = true;
        }
        if (!written) std::fill(o, o + width, T(0));
      }
    });
  }

  /// gated_rows' VJP in one pass over the picks: row row[q] of dparts[part[q]] = gate[q] g[q / k, :]
  /// (added where add_part[part[q]]), dgate[q] = g[q / k, :] . that row of the part (0 for a dropped
  /// pick; added where add_gate); null targets skipped (GatedRowsBackend).
  template <class T>
  static void gated_rows_vjp(const T* g, const T* const* parts, const std::int64_t* part, const std::int64_t* row,
                             const T* gate, T* const* dparts, const bool* add_part, T* dgate, bool add_gate,
                             index_t width, index_t n, index_t k) {
    parallel_for(n * k, std::max<index_t>(1, 8192 / std::max<index_t>(1, width)), [&](index_t b, index_t e) {
      for (index_t q = b; q < e; ++q) {
        const T* gi = g + q / k * width;
        const std::int64_t p = part[q];
        if (p < 0) {
          if (dgate && !add_gate) dgate[q] = T(0);
          continue;
        }
        const index_t r = static_cast<index_t>(row[q]) * width;
        if (T* d = dparts ? dparts[p] : nullptr) {
          const T w = gate[q];
          d += r;
          if (add_part[p])
            for (index_t c = 0; c < width; ++c) d[c] += w * gi[c];
          else
            for (index_t c = 0; c < width; ++c) d[c] = w * gi[c];
        }
        if (dgate) {
          const T dot = detail::row_dot(gi, parts[p] + r, width);
          dgate[q] = add_gate ? dgate[q] + dot : dot;
        }
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
