// Device side of the CUDA component test: layers, the papers' components, a tiny ViT with three
// MoETTA steps, and finite-difference checks, on Tensor<..., ttmoe::cuda>. A separate TU from
// cuda_cases.cu so that nvcc compiles the two in parallel. No Eigen, no fmt.
#include <ttmoe/cuda.hpp>

#include "component_cases.hpp"
#include "runners.hpp"

ttmoe_parity::Results run_cuda_components_float() { return ttmoe_parity::component_cases<ttmoe::cuda, float>(); }
ttmoe_parity::Results run_cuda_components_double() { return ttmoe_parity::component_cases<ttmoe::cuda, double>(); }
std::string run_cuda_finite_differences() { return ttmoe_parity::finite_difference_cases<ttmoe::cuda>(); }
ttmoe_parity::Results run_cuda_vit_b16() { return ttmoe_parity::vit_b16_static<ttmoe::cuda>(); }
