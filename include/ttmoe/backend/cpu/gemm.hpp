#pragma once
// Row-major GEMM on the CPU: C = alpha * op(A) op(B) + beta * C. In AVX-512 and AVX2+FMA builds,
// float GEMMs large enough to split over the pool run ttmoe's own packed kernel (gemm_packed.hpp, which says
// why); otherwise Eigen's single-threaded kernel runs on each block of C produced by splitting the
// larger of M and N across the thread pool (so GEMM shares the one parallel runtime). With
// TTMOE_USE_CBLAS (target ttmoe::blas) float/double GEMMs go to CBLAS instead, which uses its own
// threads; ttmoe never calls it from inside a pool job.

#include <Eigen/Core>
#include <algorithm>

#include "ttmoe/backend/cpu/gemm_packed.hpp"
#include "ttmoe/backend/cpu/gemm_epilogue.hpp"
#include "ttmoe/backend/cpu/thread_pool.hpp"

#if defined(TTMOE_USE_CBLAS)
#include <cblas.h>
#endif

namespace ttmoe::cpu_backend {

namespace detail {
template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using ConstMap = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using MutMap = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// Serial Eigen GEMM on one block. op(A) is M x K, op(B) is K x N.
template <class T>
void eigen_gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, const T* B,
                index_t ldb, T beta, T* C, index_t ldc) {
  ConstMap<T> a(A, ta ? K : M, ta ? M : K, Eigen::OuterStride<>(lda));
  ConstMap<T> b(B, tb ? N : K, tb ? K : N, Eigen::OuterStride<>(ldb));
  MutMap<T> c(C, M, N, Eigen::OuterStride<>(ldc));
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == T(0)) {
      c.noalias() = alpha * (opa * opb);
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * (opa * opb);
    }
  };
  if (!ta && !tb) run(a, b);
  else if (ta && !tb) run(a.transpose(), b);
  else if (!ta && tb) run(a, b.transpose());
  else run(a.transpose(), b.transpose());
}
}  // namespace detail

/// GEMM and batched GEMM.
struct GemmKernels {
  /// One GEMM on the calling thread (batched GEMMs run one matrix per thread): the packed kernel
  /// (AVX-512 or AVX2+FMA builds) for float matrices of at least one micro-tile (attention's per-head products), else Eigen.
  template <class T>
  static void serial_gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda,
                          const T* B, index_t ldb, T beta, T* C, index_t ldc) {
  #if defined(TTMOE_PACKED_GEMM)
    if constexpr (std::is_same_v<T, float>) {
      // Narrow widths only where a tile shape fits them: a padded sliver would waste too much.
      if (M >= packed::MR && K >= 16 && (N >= 2 * packed::NR || N % packed::AltTile::NR == 0)) {
        packed::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // serial inside a pool job
        return;
      }
    }
  #endif
    detail::eigen_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  /// C[M,N] = alpha * op(A) op(B) + beta * C with row-major operands and leading dimensions.
  template <class T>
  static void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, const T* B,
            index_t ldb, T beta, T* C, index_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
      for (index_t i = 0; i < M; ++i)
        for (index_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
      return;
    }
  #if defined(TTMOE_USE_CBLAS)
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (!ThreadPool::in_parallel()) {
        const auto oa = ta ? CblasTrans : CblasNoTrans, ob = tb ? CblasTrans : CblasNoTrans;
        if constexpr (std::is_same_v<T, float>)
          cblas_sgemm(CblasRowMajor, oa, ob, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        else
          cblas_dgemm(CblasRowMajor, oa, ob, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
      }
    }
  #endif
  #if defined(TTMOE_PACKED_GEMM)
    if constexpr (std::is_same_v<T, float>) {
      if (packed::suits(M, N, K)) {
        packed::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
      }
    }
  #endif
    const double flops = 2.0 * double(M) * double(N) * double(K);
    const std::size_t nt = ThreadPool::instance().num_threads();
    if (nt == 1 || flops < 2e6 || ThreadPool::in_parallel()) {
      detail::eigen_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    // Split the larger output dimension; keep blocks a multiple of 16 for the micro-kernel.
    const bool split_m = M >= N;
    const index_t total = split_m ? M : N;
    ThreadPool::instance().parallel_for(total, 16, [&](index_t b, index_t e) {
      if (split_m) {
        const T* a = ta ? A + b : A + b * lda;
        detail::eigen_gemm(ta, tb, e - b, N, K, alpha, a, lda, B, ldb, beta, C + b * ldc, ldc);
      } else {
        const T* bb = tb ? B + b * ldb : B + b;
        detail::eigen_gemm(ta, tb, M, e - b, K, alpha, A, lda, bb, ldb, beta, C + b, ldc);
      }
    });
  }

  /// C[M,N] = alpha * op(A) op(B) + bias (bias [N] added to every row; C is not read): nn.Linear's
  /// forward, gemm_epilogue with a bias alone.
  template <class T>
  static void gemm_bias(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda,
                        const T* B, index_t ldb, const T* bias, T* C, index_t ldc) {
    GemmEpilogue<T> ep;
    ep.bias = bias;
    gemm_epilogue<void>(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc, ep);
  }

  /// C[M,N] = alpha * op(A) op(B) finished by `ep` (bias, residual, activation Act or its VJP; see
  /// GemmEpilogue; C is not read). The packed kernel (AVX-512 or AVX2+FMA builds) does the epilogue as it stores each tile;
  /// otherwise the GEMM writes C and one more pass applies it.
  template <class Act, class T>
  static void gemm_epilogue(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda,
                            const T* B, index_t ldb, T* C, index_t ldc, const GemmEpilogue<T>& ep) {
    if (M == 0 || N == 0) return;
  #if defined(TTMOE_PACKED_GEMM)
    if constexpr (std::is_same_v<T, float>) {
      if (K > 0 && packed::suits(M, N, K)
  #if defined(TTMOE_USE_CBLAS)
          && ThreadPool::in_parallel()  // CBLAS takes the rest, as in gemm()
  #endif
      ) {
        packed::gemm<Act>(ta, tb, M, N, K, alpha, A, lda, B, ldb, T(0), C, ldc, ep);
        return;
      }
    }
  #endif
    gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, T(0), C, ldc);
    apply_epilogue<Act>(M, N, C, ldc, ep);
  }

  /// Batched GEMM over `batch` independent problems with element strides between them
  /// (a stride of 0 reuses one operand for every problem).
  template <class T>
  static void gemm_batched(index_t batch, bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda,
                    index_t stride_a, const T* B, index_t ldb, index_t stride_b, T beta, T* C, index_t ldc,
                    index_t stride_c) {
    const std::size_t nt = ThreadPool::instance().num_threads();
    if (batch >= nt && !ThreadPool::in_parallel()) {
      ThreadPool::instance().parallel_for(batch, 1, [&](index_t b, index_t e) {
        for (index_t i = b; i < e; ++i)
          serial_gemm(ta, tb, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta, C + i * stride_c, ldc);
      });
    } else {
      for (index_t i = 0; i < batch; ++i)
        gemm(ta, tb, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta, C + i * stride_c, ldc);
    }
  }
};

}  // namespace ttmoe::cpu_backend
