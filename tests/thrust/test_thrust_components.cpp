// The layers, the papers' components and the ViT + MoETTA pipeline on `thrust_host` (the CUDA
// backend's thrust code run on the host) against the CPU backend, and finite-difference gradient
// checks run on thrust_host itself.

#include <ttmoe/ttmoe.hpp>
#include <ttmoe/backend/cuda/thrust_host.hpp>

#include <catch2/catch.hpp>

#include "check_same.hpp"
#include "component_cases.hpp"

namespace P = ttmoe_parity;

TEMPLATE_TEST_CASE("thrust_host layer_norm and grouped_layernorm match cpu", "[thrust]", float, double) {
  P::check_same([](auto d) { return P::layer_norms<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host attention, attention_gqa, rope, rmsnorm, mlp and losses match cpu", "[thrust]", float,
                   double) {
  P::check_same([](auto d) { return P::layers<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host tiny llama-family LM matches cpu", "[thrust]", float, double) {
  // The tied embedding's gradient sums the head GEMM's and the lookup's contributions in a
  // backend-dependent order: float agrees to ~1e-5 relative, double to 1e-12.
  P::check_same([](auto d) { return P::llama_lm<decltype(d), TestType>(); },
                std::is_same_v<TestType, float> ? 1e-4 : 1e-12);
}
TEMPLATE_TEST_CASE("thrust_host moe_layernorm, routers, aux losses, moe_ffn, lora_merge and sparse_softmax match cpu",
                   "[thrust]", float, double) {
  P::check_same([](auto d) { return P::moe_components<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host tiny ViT and 3 moetta steps match cpu", "[thrust]", float, double) {
  // Three SGD steps compound rounding differences, hence the looser float tolerance.
  P::check_same([](auto d) { return P::vit_moetta<decltype(d), TestType>(); },
                std::is_same_v<TestType, float> ? 1e-4 : 1e-10);
}
TEST_CASE("thrust_host gradients match finite differences", "[thrust]") {
  CHECK(P::finite_difference_cases<ttmoe::thrust_host>() == "");
}
TEST_CASE("cpu gradients match finite differences (control for the thrust_host check)", "[thrust]") {
  CHECK(P::finite_difference_cases<ttmoe::cpu>() == "");
}
