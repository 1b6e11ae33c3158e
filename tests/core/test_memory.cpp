// The CPU device's caching pool: large buffers are reused across steps (no new mappings in a steady
// loop), small ones bypass it, and the cache cap / empty_cache return memory.

#include <catch2/catch.hpp>

#include <ttmoe/ttmoe.hpp>

using namespace ttmoe;

namespace {
using Big = Tensor<float, DynShape<2>>;
// One "training step": a few large temporaries and a recorded backward.
float step(Big& w, const Big& x) {
  autograd::Tape tape;
  Big h = gelu(matmul<false, true>(x, w));
  auto loss = mean_all(h * h);
  autograd::backward(tape, loss);
  const float v = loss.item();
  {
    autograd::NoGrad ng;
    assign(w, w - w.grad() * 0.01f);
  }
  w.zero_grad();
  return v;
}
}  // namespace

TEST_CASE("cpu pool: a steady loop maps no new memory", "[memory]") {
  REQUIRE(cpu::pooled_bytes <= 512 * 256 * sizeof(float));  // the tensors below are pooled
  Big w{DynShape<2>(256, 256)}, x{DynShape<2>(512, 256)};
  for (index_t i = 0; i < w.numel(); ++i) w.data()[i] = 0.1f * float((i * 7919) % 13) / 13.0f - 0.05f;
  for (index_t i = 0; i < x.numel(); ++i) x.data()[i] = float((i * 104729) % 17) / 17.0f - 0.5f;
  w.set_requires_grad();
  for (int i = 0; i < 3; ++i) step(w, x);
  const auto before = cpu::memory_pool().stats();
  for (int i = 0; i < 10; ++i) step(w, x);
  const auto after = cpu::memory_pool().stats();
  CHECK(after.raw_allocations == before.raw_allocations);
  CHECK(after.in_use_bytes == before.in_use_bytes);
  CHECK(before.raw_allocations > 0);
}

TEST_CASE("cpu pool: small buffers bypass it, large ones are counted while alive", "[memory]") {
  const auto s0 = cpu::memory_pool().stats();
  {
    Tensor<float, DynShape<1>> small{DynShape<1>(16)};
    CHECK(cpu::memory_pool().stats().in_use_bytes == s0.in_use_bytes);
    Tensor<float, DynShape<1>> big{DynShape<1>(cpu::pooled_bytes / sizeof(float))};
    CHECK(cpu::memory_pool().stats().in_use_bytes >= s0.in_use_bytes + cpu::pooled_bytes);
    std::fill(big.data(), big.data() + big.numel(), 1.0f);  // the mapping is writable
    CHECK(big.data()[big.numel() - 1] == 1.0f);
    CHECK(reinterpret_cast<std::uintptr_t>(big.data()) % cpu::alignment == 0);
  }
  CHECK(cpu::memory_pool().stats().in_use_bytes == s0.in_use_bytes);
}

TEST_CASE("cpu pool: the cache cap and empty_cache give memory back", "[memory]") {
  const std::size_t n = (std::size_t(3) << 20) / sizeof(float);
  { Tensor<float, DynShape<1>> t{DynShape<1>(n)}; }
  CHECK(cpu::memory_pool().stats().cached_bytes() >= n * sizeof(float));
  cpu::empty_cache();
  CHECK(cpu::memory_pool().stats().cached_bytes() == 0);

  cpu::set_cache_limit(0);  // no caching: a freed block is unmapped at once
  const auto r0 = cpu::memory_pool().stats().raw_allocations;
  { Tensor<float, DynShape<1>> t{DynShape<1>(n)}; }
  { Tensor<float, DynShape<1>> t{DynShape<1>(n)}; }
  CHECK(cpu::memory_pool().stats().cached_bytes() == 0);
  CHECK(cpu::memory_pool().stats().raw_allocations == r0 + 2);
  cpu::set_cache_limit(cpu::default_cache_limit);
  CHECK(cpu::memory_pool().cache_limit() == cpu::default_cache_limit);
}
