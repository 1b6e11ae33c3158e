#pragma once
// Hand-written CUDA kernels for row-wise work: LayerNorm with grouped affine parameters (the plain
// LayerNorm and MoETTA's per-sample MoE-LayerNorm) and softmax over the last axis (attention rows,
// logits). nvcc only; Backend<cuda> uses them in place of ThrustBackend's versions.
//
// Why not thrust: thrust::for_each gives one thread per row, so each thread walks its own row of
// 197-1000 elements while its neighbours walk rows a whole row-length apart. No load is coalesced,
// and a per-sample attention softmax (12 x 197 rows) occupies a few thousand threads of a GPU that
// holds a hundred thousand. Here a warp owns a row: its 32 lanes read 32 consecutive values per
// load and combine partial sums with warp shuffles, with no shared memory and no atomics, so every
// result is deterministic. The LayerNorm parameter gradient sums columns over rows; a block of 32x8
// threads reads 32 consecutive columns of 8 rows at a time and reduces its 8 row slices in shared
// memory, and large groups are cut into slices whose partial sums are added in a fixed order.

#include <cuda_runtime.h>

#include <algorithm>

#include "ttmoe/backend/cuda/device.hpp"
#include "ttmoe/core/config.hpp"
#include "ttmoe/expr/vmath.hpp"

namespace ttmoe::cuda_backend::rows {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // 256-thread blocks: one warp per row

template <class T>
__device__ inline T warp_sum(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
/// Max over the warp; NaN wins (as in every ttmoe max).
template <class T>
__device__ inline T warp_max(T v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = vm::max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Grid of one warp per row.
inline dim3 row_grid(index_t rows) { return dim3(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock)); }
inline dim3 row_block() { return dim3(kWarp, kRowsPerBlock); }

template <class T>
__global__ void layer_norm_forward(const T* x, T* y, T* stats, const T* gamma, const T* beta, index_t rows,
                                   index_t dim, index_t rpg, T eps) {
  const index_t n = index_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (n >= rows) return;
  const T* r = x + n * dim;
  T s = 0;
  for (index_t d = threadIdx.x; d < dim; d += kWarp) s += r[d];
  const T mu = warp_sum(s) / T(dim);
  T v = 0;
  for (index_t d = threadIdx.x; d < dim; d += kWarp) v += (r[d] - mu) * (r[d] - mu);
  const T rs = T(1) / vm::sqrt(warp_sum(v) / T(dim) + eps);
  if (stats && threadIdx.x == 0) {
    stats[2 * n] = mu;
    stats[2 * n + 1] = rs;
  }
  const T* ga = gamma ? gamma + (n / rpg) * dim : nullptr;
  const T* be = beta ? beta + (n / rpg) * dim : nullptr;
  T* o = y + n * dim;
  for (index_t d = threadIdx.x; d < dim; d += kWarp) {
    T h = (r[d] - mu) * rs;
    if (ga) h *= ga[d];
    if (be) h += be[d];
    o[d] = h;
  }
}

template <class T>
__global__ void layer_norm_input_grad(const T* x, const T* go, const T* stats, const T* gamma, T* dx, index_t rows,
                                      index_t dim, index_t rpg) {
  const index_t n = index_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (n >= rows) return;
  const T mu = stats[2 * n], rs = stats[2 * n + 1];
  const T* r = x + n * dim;
  const T* g = go + n * dim;
  const T* ga = gamma ? gamma + (n / rpg) * dim : nullptr;
  T m1 = 0, m2 = 0;
  for (index_t d = threadIdx.x; d < dim; d += kWarp) {
    const T dh = ga ? g[d] * ga[d] : g[d];
    m1 += dh;
    m2 += dh * (r[d] - mu) * rs;
  }
  m1 = warp_sum(m1) / T(dim);
  m2 = warp_sum(m2) / T(dim);
  T* o = dx + n * dim;
  for (index_t d = threadIdx.x; d < dim; d += kWarp) {
    const T dh = ga ? g[d] * ga[d] : g[d];
    o[d] += rs * (dh - m1 - (r[d] - mu) * rs * m2);
  }
}

/// Column sums of go * xhat and go over the rows of each work item (a slice of one group), for 32
/// columns per block. `direct`: one slice per group, so add straight into dgamma / dbeta [G, dim];
/// otherwise write the item's row of the partial buffers pw / pb [items, dim].
template <class T>
__global__ void layer_norm_param_grad(const T* x, const T* go, const T* stats, T* dgamma, T* dbeta, T* pw, T* pb,
                                      index_t dim, index_t rpg, index_t items, index_t parts, index_t part_rows,
                                      bool direct) {
  __shared__ T sw[kRowsPerBlock][kWarp + 1], sb[kRowsPerBlock][kWarp + 1];
  const index_t d = index_t(blockIdx.x) * kWarp + threadIdx.x;
  for (index_t item = blockIdx.y; item < items; item += gridDim.y) {  // grid-stride: gridDim.y <= 65535
    const index_t g = item / parts, p = item % parts;
    const index_t n0 = g * rpg + p * part_rows;
    const index_t n1 = n0 + part_rows < (g + 1) * rpg ? n0 + part_rows : (g + 1) * rpg;
    T aw = 0, ab = 0;
    if (d < dim)
      for (index_t n = n0 + threadIdx.y; n < n1; n += kRowsPerBlock) {
        const T gr = go[n * dim + d];
        aw += gr * (x[n * dim + d] - stats[2 * n]) * stats[2 * n + 1];
        ab += gr;
      }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && d < dim) {
      for (int k = 1; k < kRowsPerBlock; ++k) {
        aw += sw[k][threadIdx.x];
        ab += sb[k][threadIdx.x];
      }
      if (direct) {
        if (dgamma) dgamma[g * dim + d] += aw;
        if (dbeta) dbeta[g * dim + d] += ab;
      } else {
        pw[item * dim + d] = aw;
        pb[item * dim + d] = ab;
      }
    }
    __syncthreads();  // the shared rows are rewritten by the next item
  }
}

/// dgamma[g, d] += sum over the group's slices of pw (likewise dbeta), slices in order.
template <class T>
__global__ void add_slices(const T* pw, const T* pb, T* dgamma, T* dbeta, index_t groups, index_t dim,
                           index_t parts) {
  const index_t q = index_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= groups * dim) return;
  const index_t g = q / dim, d = q % dim;
  T aw = 0, ab = 0;
  for (index_t p = 0; p < parts; ++p) {
    aw += pw[(g * parts + p) * dim + d];
    ab += pb[(g * parts + p) * dim + d];
  }
  if (dgamma) dgamma[q] += aw;
  if (dbeta) dbeta[q] += ab;
}

/// Softmax (or log-softmax) of each row of n values; in place when x == y. An all -inf row uses
/// max 0 (as the other backends).
template <class T>
__global__ void softmax_rows(const T* x, T* y, index_t rows, index_t n, bool log) {
  const index_t row = index_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* xr = x + row * n;
  T* yr = y + row * n;
  const T ninf = -static_cast<T>(INFINITY);
  T m = ninf;
  for (index_t k = threadIdx.x; k < n; k += kWarp) m = vm::max(m, xr[k]);
  m = warp_max(m);
  if (m == ninf) m = 0;
  T s = 0;
  for (index_t k = threadIdx.x; k < n; k += kWarp) s += vm::exp(xr[k] - m);
  s = warp_sum(s);
  if (log) {
    const T ls = m + vm::log(s);
    for (index_t k = threadIdx.x; k < n; k += kWarp) yr[k] = xr[k] - ls;
  } else {
    const T inv = T(1) / s;
    for (index_t k = threadIdx.x; k < n; k += kWarp) yr[k] = vm::exp(xr[k] - m) * inv;
  }
}

/// dx += y * (g - sum(g * y)) for softmax, g - exp(y) * sum(g) for log-softmax (y = the output).
template <class T>
__global__ void softmax_rows_backward(const T* y, const T* g, T* dx, index_t rows, index_t n, bool log) {
  const index_t row = index_t(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  if (row >= rows) return;
  const T* yr = y + row * n;
  const T* gr = g + row * n;
  T* o = dx + row * n;
  T s = 0;
  for (index_t k = threadIdx.x; k < n; k += kWarp) s += log ? gr[k] : gr[k] * yr[k];
  s = warp_sum(s);
  for (index_t k = threadIdx.x; k < n; k += kWarp) o[k] += log ? gr[k] - vm::exp(yr[k]) * s : yr[k] * (gr[k] - s);
}

/// Throws if the last kernel launch failed (bad configuration); execution errors surface at the next
/// synchronisation.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace ttmoe::cuda_backend::rows
