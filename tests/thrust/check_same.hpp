#pragma once
// The comparison every host-system thrust case makes: run the same device-generic case on `cpu` and
// on `thrust_host` (or `thrust_omp`), and require every named result to agree within a per-type
// tolerance. Include after <ttmoe/ttmoe.hpp> and <ttmoe/backend/cuda/thrust_host.hpp>.
#include <catch2/catch.hpp>

#include <type_traits>

#include "cases.hpp"

namespace ttmoe_parity {

/// Relative tolerance (|a - b| <= tol * max(1, |b|)) of thrust_host against cpu: the two sum in
/// different orders (and the CPU LayerNorm accumulates float rows in double).
template <class T>
constexpr double thrust_tol() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

/// REQUIREs that run_on(Dev{}) matches run_on(cpu{}) within `tol`.
template <class Dev = ttmoe::thrust_host, class F>
void check_same(F run_on, double tol) {
  const auto ref = run_on(ttmoe::cpu{});
  const auto got = run_on(Dev{});
  REQUIRE(!ref.empty());
  INFO("first mismatch");
  CHECK(compare(got, ref, tol) == "");
}

}  // namespace ttmoe_parity
