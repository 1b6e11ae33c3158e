// Runs the shared parity cases on the GPU and on the CPU and compares them. Exit code 0 = all equal.
#include <cstdio>

#include "cases.hpp"
#include "runners.hpp"

int main() {
  int failures = 0;
  auto report = [&](const char* what, const std::string& diff) {
    std::printf("%-32s %s\n", what, diff.empty() ? "ok" : diff.c_str());
    if (!diff.empty()) ++failures;
  };
  // float: GPU libm (exp / erf / tanh) and cuBLAS summation order differ from the CPU in the last ulps.
  report("float cuda vs cpu", ttmoe_parity::compare(run_cuda_float(), run_cpu_float(), 1e-4));
  report("double cuda vs cpu", ttmoe_parity::compare(run_cuda_double(), run_cpu_double(), 1e-10));
  report("float components cuda vs cpu", ttmoe_parity::compare(run_cuda_components_float(), run_cpu_components_float(), 1e-3));
  report("double components cuda vs cpu",
         ttmoe_parity::compare(run_cuda_components_double(), run_cpu_components_double(), 1e-9));
  report("vit_b16 static shapes cuda vs cpu", ttmoe_parity::compare(run_cuda_vit_b16(), run_cpu_vit_b16(), 1e-3));
  report("finite differences on cuda", run_cuda_finite_differences());
  const auto raw = cuda_pool_raw_allocations_in_steady_state();
  report("pool steady state", raw == 0 ? "" : std::to_string(raw) + " cudaMalloc calls in 20 steps");
  return failures == 0 ? 0 : 1;
}
