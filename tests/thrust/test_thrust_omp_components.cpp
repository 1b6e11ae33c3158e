// The layers, the papers' components and the ViT + MoETTA pipeline on `thrust_omp` against the CPU
// backend. A TU of its own (test_thrust_omp.cpp has the core ops): the two halves compile in
// parallel, where one TU was the longest compile of the whole build.

#include <ttmoe/ttmoe.hpp>
#include <ttmoe/backend/cuda/thrust_omp.hpp>

#include <catch2/catch.hpp>

#include "check_same.hpp"
#include "component_cases.hpp"

namespace P = ttmoe_parity;
using ttmoe::thrust_omp;

TEMPLATE_TEST_CASE("thrust_omp layers, moe components, ViT and moetta steps match cpu", "[thrust]", float, double) {
  P::check_same<thrust_omp>([](auto d) { return P::component_cases<decltype(d), TestType>(); },
                            std::is_same_v<TestType, float> ? 1e-4 : 1e-10);
}
