#pragma once
// Backend<cuda>: ThrustBackend under the CUDA system (one thrust::transform per fused expression,
// reductions / indexing / top-k as thrust algorithms) with GEMM through cuBLAS and hand-written
// warp-per-row kernels for LayerNorm and last-axis softmax (row_kernels.cuh says why). Requires nvcc.

#if defined(__CUDACC__) && !defined(__CUDACC_RELAXED_CONSTEXPR__)
// The kernel trees index std::array (constexpr host functions) in device code.
#error "ttmoe: compile CUDA translation units with --expt-relaxed-constexpr"
#endif

#include <cublas_v2.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "ttmoe/backend/backend.hpp"
#include "ttmoe/backend/cuda/device.hpp"
#include "ttmoe/backend/cuda/row_kernels.cuh"
#include "ttmoe/backend/cuda/thrust_backend.hpp"

namespace ttmoe {

namespace cuda_backend {
inline void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("ttmoe cublas: ") + what + " failed with status " + std::to_string(int(s)));
}
/// The cuBLAS handle bound to ttmoe's stream (created on first use, never destroyed).
inline cublasHandle_t cublas_handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t hh{};
    check_cublas(cublasCreate(&hh), "cublasCreate");
    check_cublas(cublasSetStream(hh, stream()), "cublasSetStream");
    return hh;
  }();
  return h;
}
inline cublasOperation_t op(bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }
}  // namespace cuda_backend

/// The GPU kernels.
template <>
struct Backend<cuda> : cuda_backend::ThrustBackend<cuda> {
  using Base = cuda_backend::ThrustBackend<cuda>;

  /// LayerNorm rows with grouped affine parameters (see ThrustBackend::layer_norm): a warp per row.
  template <class T>
  static void layer_norm(const T* x, T* y, T* stats, const T* gamma, const T* beta, index_t rows, index_t dim,
                         index_t rows_per_group, T eps) {
    if (rows == 0) return;
    namespace R = cuda_backend::rows;
    R::layer_norm_forward<T><<<R::row_grid(rows), R::row_block(), 0, cuda_backend::stream()>>>(x, y, stats, gamma, beta, rows, dim,
                                                                                 rows_per_group, eps);
    R::check_launch("layer_norm_forward");
  }

  /// Its VJP: dx a warp per row; dgamma / dbeta as column sums over each group's rows, cut into
  /// slices (added in order afterwards) when there are too few groups to fill the GPU.
  template <class T>
  static void layer_norm_backward(const T* x, const T* go, const T* stats, const T* gamma, T* dx, T* dgamma,
                                  T* dbeta, index_t rows, index_t dim, index_t rows_per_group) {
    if (rows == 0 || dim == 0) return;
    namespace R = cuda_backend::rows;
    if (dx) {
      R::layer_norm_input_grad<T><<<R::row_grid(rows), R::row_block(), 0, cuda_backend::stream()>>>(x, go, stats, gamma, dx, rows,
                                                                                      dim, rows_per_group);
      R::check_launch("layer_norm_input_grad");
    }
    if (!dgamma && !dbeta) return;
    const index_t groups = rows / rows_per_group, col_blocks = (dim + R::kWarp - 1) / R::kWarp;
    // About two blocks per SM in total, with at least 64 rows per slice.
    constexpr index_t kTargetBlocks = 264;
    const index_t wanted = (kTargetBlocks + groups * col_blocks - 1) / (groups * col_blocks);
    const index_t parts = std::max<index_t>(1, std::min<index_t>(wanted, rows_per_group / 64));
    const index_t part_rows = (rows_per_group + parts - 1) / parts, items = groups * parts;
    const dim3 grid(unsigned(col_blocks), unsigned(std::min<index_t>(items, 65535)));
    if (parts == 1) {
      R::layer_norm_param_grad<T><<<grid, R::row_block(), 0, cuda_backend::stream()>>>(
          x, go, stats, dgamma, dbeta, nullptr, nullptr, dim, rows_per_group, items, parts, part_rows, true);
      R::check_launch("layer_norm_param_grad");
      return;
    }
    cuda_backend::detail::Scratch<T, cuda> pw(items * dim), pb(items * dim);
    R::layer_norm_param_grad<T><<<grid, R::row_block(), 0, cuda_backend::stream()>>>(x, go, stats, dgamma, dbeta, pw.p, pb.p, dim,
                                                                       rows_per_group, items, parts, part_rows, false);
    R::check_launch("layer_norm_param_grad");
    const index_t out = groups * dim;
    R::add_slices<T><<<unsigned((out + 255) / 256), 256, 0, cuda_backend::stream()>>>(pw.p, pb.p, dgamma, dbeta, groups, dim, parts);
    R::check_launch("layer_norm add_slices");
  }

  /// Softmax / log-softmax along an axis: a warp per row for the last axis (inner == 1), else thrust.
  template <class T>
  static void softmax(const T* x, T* y, index_t outer, index_t n, index_t inner, bool log) {
    if (inner != 1 || outer == 0 || n == 0) return Base::softmax(x, y, outer, n, inner, log);
    namespace R = cuda_backend::rows;
    R::softmax_rows<T><<<R::row_grid(outer), R::row_block(), 0, cuda_backend::stream()>>>(x, y, outer, n, log);
    R::check_launch("softmax_rows");
  }
  /// Its VJP, likewise.
  template <class T>
  static void softmax_backward(const T* y, const T* g, T* dx, index_t outer, index_t n, index_t inner, bool log) {
    if (inner != 1 || outer == 0 || n == 0) return Base::softmax_backward(y, g, dx, outer, n, inner, log);
    namespace R = cuda_backend::rows;
    R::softmax_rows_backward<T><<<R::row_grid(outer), R::row_block(), 0, cuda_backend::stream()>>>(y, g, dx, outer, n, log);
    R::check_launch("softmax_rows_backward");
  }

  /// Row-major C = alpha op(A) op(B) + beta C. cuBLAS is column-major, and a row-major matrix is its
  /// transpose in column-major, so C^T = op(B)^T op(A)^T is computed: swap the operands and M/N.
  template <class T>
  static void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, const T* B,
                   index_t ldb, T beta, T* C, index_t ldc) {
    if (M == 0 || N == 0) return;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (K > 0) {
        auto h = cuda_backend::cublas_handle();
        const int m = int(N), n = int(M), k = int(K);
        if constexpr (std::is_same_v<T, float>)
          cuda_backend::check_cublas(cublasSgemm(h, cuda_backend::op(tb), cuda_backend::op(ta), m, n, k, &alpha, B,
                                                 int(ldb), A, int(lda), &beta, C, int(ldc)),
                                     "cublasSgemm");
        else
          cuda_backend::check_cublas(cublasDgemm(h, cuda_backend::op(tb), cuda_backend::op(ta), m, n, k, &alpha, B,
                                                 int(ldb), A, int(lda), &beta, C, int(ldc)),
                                     "cublasDgemm");
        return;
      }
    }
    Base::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // K == 0 or other types
  }

  /// Batched row-major GEMM with element strides (stride 0 reuses an operand): cublas*gemmStridedBatched.
  template <class T>
  static void gemm_batched(index_t batch, bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A,
                           index_t lda, index_t stride_a, const T* B, index_t ldb, index_t stride_b, T beta, T* C,
                           index_t ldc, index_t stride_c) {
    if (batch == 0 || M == 0 || N == 0) return;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (K > 0) {
        auto h = cuda_backend::cublas_handle();
        const int m = int(N), n = int(M), k = int(K);
        using ll = long long;
        if constexpr (std::is_same_v<T, float>)
          cuda_backend::check_cublas(
              cublasSgemmStridedBatched(h, cuda_backend::op(tb), cuda_backend::op(ta), m, n, k, &alpha, B, int(ldb),
                                        ll(stride_b), A, int(lda), ll(stride_a), &beta, C, int(ldc), ll(stride_c),
                                        int(batch)),
              "cublasSgemmStridedBatched");
        else
          cuda_backend::check_cublas(
              cublasDgemmStridedBatched(h, cuda_backend::op(tb), cuda_backend::op(ta), m, n, k, &alpha, B, int(ldb),
                                        ll(stride_b), A, int(lda), ll(stride_a), &beta, C, int(ldc), ll(stride_c),
                                        int(batch)),
              "cublasDgemmStridedBatched");
        return;
      }
    }
    Base::gemm_batched(batch, ta, tb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c);
  }
};

static_assert(BackendFor<cuda, float> && BackendFor<cuda, double>, "ttmoe: Backend<cuda> misses a required kernel");

}  // namespace ttmoe
