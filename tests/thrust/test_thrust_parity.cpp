// The CUDA backend's thrust code, run on the host: every case on `thrust_host` (ThrustBackend under
// thrust's CPP system) must match the CPU backend.

#include <ttmoe/ttmoe.hpp>
#include <ttmoe/backend/cuda/thrust_host.hpp>

#include <catch2/catch.hpp>

#include "cases.hpp"
#include "check_same.hpp"

using ttmoe::cpu;
using ttmoe::thrust_host;
namespace P = ttmoe_parity;

TEMPLATE_TEST_CASE("thrust_host elementwise matches cpu", "[thrust]", float, double) {
  P::check_same([](auto d) { return P::elementwise<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host reductions and softmax match cpu", "[thrust]", float, double) {
  P::check_same([](auto d) { return P::reductions<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host matmul matches cpu", "[thrust]", float, double) {
  P::check_same([](auto d) { return P::matmuls<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host indexing matches cpu", "[thrust]", float, double) {
  P::check_same([](auto d) { return P::indexing<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}
TEMPLATE_TEST_CASE("thrust_host gradients match cpu", "[thrust]", float, double) {
  P::check_same([](auto d) { return P::gradients<decltype(d), TestType>(); }, P::thrust_tol<TestType>());
}

TEST_CASE("thrust_host scatter_add with many duplicates matches cpu", "[thrust]") {
  // index_select backward with repeated rows goes through sort_by_key + reduce_by_key.
  auto run = [](auto d) {
    using D = decltype(d);
    auto emb = P::make<double, D>(ttmoe::Shape<3, 4>(), 40).set_requires_grad();
    std::vector<std::int64_t> ids(50);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int64_t((i * 5) % 3);
    auto idx = P::make_idx<D>(ttmoe::Shape<50>(), ids);
    {
      ttmoe::autograd::Tape tape;
      auto loss = ttmoe::sum_all(ttmoe::square(ttmoe::index_select(emb, idx)));
      ttmoe::autograd::backward(tape, loss);
    }
    return P::Results{{"grad", P::host(emb.grad())}};
  };
  CHECK(P::compare(run(thrust_host{}), run(cpu{}), 1e-12) == "");
}

TEST_CASE("thrust_host memory pool reuses blocks across steps", "[thrust]") {
  using namespace ttmoe;
  auto w = P::make<float, thrust_host>(Shape<16, 8>(), 50).set_requires_grad();
  auto x = P::make<float, thrust_host>(Shape<32, 8>(), 51);
  auto step = [&] {
    {
      autograd::Tape tape;
      auto loss = mean_all(softmax(matmul<false, true>(x, w)));
      autograd::backward(tape, loss);
    }
    {
      autograd::NoGrad ng;
      assign(w, w - w.grad() * 0.1f);
    }
    w.zero_grad();
  };
  for (int i = 0; i < 3; ++i) step();  // warm up: the pool reaches its working set
  const auto before = thrust_host::memory_pool().stats();
  for (int i = 0; i < 20; ++i) step();
  const auto after = thrust_host::memory_pool().stats();
  CHECK(after.raw_allocations == before.raw_allocations);
  CHECK(after.in_use_bytes == before.in_use_bytes);
}

TEST_CASE("pool size classes", "[thrust]") {
  using Pool = ttmoe::cuda_backend::CachingPool<ttmoe::cuda_backend::HostRaw>;
  CHECK(Pool::size_class(1) == 256);
  CHECK(Pool::size_class(257) == 512);
  CHECK(Pool::size_class(std::size_t(64) << 20) == (std::size_t(64) << 20));
  CHECK(Pool::size_class((std::size_t(64) << 20) + 1) == (std::size_t(66) << 20));
  Pool p;
  void* a = p.allocate(1000);
  p.deallocate(a);
  void* b = p.allocate(900);  // same class: reused
  CHECK(a == b);
  CHECK(p.stats().raw_allocations == 1);
  p.deallocate(b);
  p.release_cached();
  CHECK(p.stats().reserved_bytes == 0);
}
