// Device side of the CUDA parity test: the shared cases on Tensor<..., ttmoe::cuda>.
// Includes only <ttmoe/cuda.hpp> (no Eigen, no fmt, no CPU backend).
#include <ttmoe/cuda.hpp>

#include "cases.hpp"
#include "runners.hpp"

ttmoe_parity::Results run_cuda_float() { return ttmoe_parity::all_cases<ttmoe::cuda, float>(); }
ttmoe_parity::Results run_cuda_double() { return ttmoe_parity::all_cases<ttmoe::cuda, double>(); }

std::size_t cuda_pool_raw_allocations_in_steady_state() {
  using namespace ttmoe;
  using D = ttmoe::cuda;
  auto w = ttmoe_parity::make<float, D>(Shape<64, 32>(), 50).set_requires_grad();
  auto x = ttmoe_parity::make<float, D>(Shape<128, 32>(), 51);
  auto ids = ttmoe_parity::make_idx<D>(Shape<6>(), {0, 3, 3, 5, 1, 0});
  auto step = [&] {
    {
      autograd::Tape tape;
      auto h = matmul<false, true>(x, w);
      auto loss = eval(mean_all(softmax(h)) + sum_all(square(index_select(w, ids))) * 0.01f);
      autograd::backward(tape, loss);
    }
    {
      autograd::NoGrad ng;
      assign(w, w - w.grad() * 0.1f);
    }
    w.zero_grad();
  };
  for (int i = 0; i < 3; ++i) step();
  D::synchronize();
  const auto before = D::memory_pool().stats().raw_allocations;
  for (int i = 0; i < 20; ++i) step();
  D::synchronize();
  return D::memory_pool().stats().raw_allocations - before;
}
