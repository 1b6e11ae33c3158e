#pragma once
// The CPU's GEMM epilogue as a pass of its own (ttmoe/backend/gemm_epilogue.hpp says what an epilogue
// is): the packed kernel (gemm_packed.hpp; AVX-512 and AVX2+FMA builds) does it in its store; other builds and shapes run
// the plain GEMM and then apply_epilogue, one pass over C, with the same result.

#include <algorithm>
#include <type_traits>

#include "ttmoe/backend/cpu/thread_pool.hpp"
#include "ttmoe/backend/gemm_epilogue.hpp"

namespace ttmoe::cpu_backend {

/// The epilogue as a pass of its own over C [M, N] that a plain GEMM (beta 0, no bias) has written:
/// bias, residual, then the activation step, as the packed kernel's store does them.
template <class Act, class T>
void apply_epilogue(index_t M, index_t N, T* C, index_t ldc, const GemmEpilogue<T>& ep) {
  if (!ep.bias && !ep.residual && std::is_void_v<Act>) return;
  parallel_for(M, std::max<index_t>(1, 16384 / std::max<index_t>(N, 1)), [&](index_t m0, index_t m1) {
    for (index_t m = m0; m < m1; ++m) {
      const GemmEpilogue<T> row = ep.at(m, 0);
      T* c = C + m * ldc;
      for (index_t n = 0; n < N; ++n) {
        T v = c[n];
        if (row.bias) v += row.bias[n];
        if (row.residual) v += row.residual[n];
        if constexpr (!std::is_void_v<Act>) v = row.template finish_scalar<Act>(v, 0, n);
        c[n] = v;
      }
    }
  });
}

}  // namespace ttmoe::cpu_backend
