#pragma once
// The parity cases compiled per device in separate translation units: cuda_cases.cu (nvcc; no Eigen
// or fmt) and cpu_reference.cpp (host compiler; the CPU backend).
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
/// Raw cudaMalloc calls made during 20 training steps after a warm-up (expected 0).
std::size_t cuda_pool_raw_allocations_in_steady_state();
