#pragma once
// Backend<cuda>: ThrustBackend under the CUDA system (one thrust::transform per fused expression,
// reductions / indexing / top-k as thrust algorithms) with GEMM through cuBLAS. Requires nvcc.

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

}  // namespace ttmoe
