// Every device-generic case on `thrust_omp` (the CUDA backend's thrust code run in parallel by
// thrust's OpenMP system) against the CPU backend: the kernels must not race. The layers and
// components are in test_thrust_omp_components.cpp.

#include <ttmoe/ttmoe.hpp>
#include <ttmoe/backend/cuda/thrust_omp.hpp>

#include <catch2/catch.hpp>

#include "check_same.hpp"
#include "component_cases.hpp"

namespace P = ttmoe_parity;
using ttmoe::thrust_omp;

TEMPLATE_TEST_CASE("thrust_omp core ops and gradients match cpu", "[thrust]", float, double) {
  P::check_same<thrust_omp>([](auto d) { return P::all_cases<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEST_CASE("thrust_omp gradients match finite differences", "[thrust]") {
  CHECK(P::finite_difference_cases<thrust_omp>() == "");
}
