#pragma once
// The parity cases compiled per device in separate translation units: cuda_cases.cu and
// cuda_components.cu (nvcc; no Eigen or fmt) and cpu_reference.cpp (host compiler; the CPU backend).
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace ttmoe_parity {
using Results = std::vector<std::pair<std::string, std::vector<double>>>;
}  // namespace ttmoe_parity

ttmoe_parity::Results run_cuda_float();
ttmoe_parity::Results run_cuda_double();
ttmoe_parity::Results run_cpu_float();
ttmoe_parity::Results run_cpu_double();
ttmoe_parity::Results run_cuda_components_float();
ttmoe_parity::Results run_cuda_components_double();
ttmoe_parity::Results run_cpu_components_float();
ttmoe_parity::Results run_cpu_components_double();
/// ViT-B/16 logits through the static-shape entry, batch 1.
ttmoe_parity::Results run_cuda_vit_b16();
ttmoe_parity::Results run_cpu_vit_b16();
/// "" when the gradients on the GPU match central differences, else the failures.
std::string run_cuda_finite_differences();
/// Raw cudaMalloc calls made during 20 training steps after a warm-up (expected 0).
std::size_t cuda_pool_raw_allocations_in_steady_state();
