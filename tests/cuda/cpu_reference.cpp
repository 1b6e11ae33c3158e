// Host side of the CUDA parity test: the same cases on the CPU backend (Eigen / fmt live here only).
#include <ttmoe/ttmoe.hpp>

#include "cases.hpp"
#include "component_cases.hpp"
#include "runners.hpp"

ttmoe_parity::Results run_cpu_float() { return ttmoe_parity::all_cases<ttmoe::cpu, float>(); }
ttmoe_parity::Results run_cpu_double() { return ttmoe_parity::all_cases<ttmoe::cpu, double>(); }
ttmoe_parity::Results run_cpu_components_float() { return ttmoe_parity::component_cases<ttmoe::cpu, float>(); }
ttmoe_parity::Results run_cpu_components_double() { return ttmoe_parity::component_cases<ttmoe::cpu, double>(); }
ttmoe_parity::Results run_cpu_vit_b16() { return ttmoe_parity::vit_b16_static<ttmoe::cpu>(); }
