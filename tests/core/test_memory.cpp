// The CPU device's caching pool: large buffers are reused across steps (no new mappings in a steady
// loop), small ones bypass it, and the cache cap / empty_cache return memory. The pool's policy
// (reuse of a larger cached block, the cap that follows the working set, release) is tested on a
// CachingPool over a counting fake allocator, so the counts are exact and no memory is touched.

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

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
  CHECK_FALSE(cpu::memory_pool().follows_working_set());
  cpu::follow_working_set();  // the default policy again
  CHECK(cpu::memory_pool().follows_working_set());
  CHECK(cpu::memory_pool().cache_limit() >= cpu::default_cache_limit);
}

namespace {
/// A raw allocator that hands out distinct fake addresses (never dereferenced by the pool) and counts.
struct CountingRaw {
  static inline std::size_t allocs = 0, frees = 0, freed_bytes = 0;
  static inline std::uintptr_t next = 1 << 20;
  static void* raw_alloc(std::size_t bytes) {
    ++allocs;
    next += (bytes + 4095) / 4096 * 4096 + 4096;
    return reinterpret_cast<void*>(next);
  }
  static void raw_free(void*, std::size_t bytes) { ++frees, freed_bytes += bytes; }
};
using TestPool = memory::CachingPool<CountingRaw>;
constexpr std::size_t MiB = std::size_t(1) << 20;
}  // namespace

TEST_CASE("caching pool: a request reuses a cached block of a larger class within the bound", "[memory]") {
  TestPool pool;
  REQUIRE(TestPool::size_class(3 * MiB) == 4 * MiB);
  void* four = pool.allocate(3 * MiB);
  pool.deallocate(four);
  const auto a0 = CountingRaw::allocs;
  // 1.5 MiB is class 2 MiB: none cached, so the cached 4 MiB block (the next class) serves it.
  void* p = pool.allocate(MiB + MiB / 2);
  CHECK(p == four);
  CHECK(CountingRaw::allocs == a0);
  CHECK(pool.stats().in_use_bytes == 2 * MiB);  // the class asked for: what the tensor holds
  CHECK(pool.stats().lent_bytes() == 4 * MiB);  // the block's own class
  pool.deallocate(p);
  // 0.75 MiB is class 1 MiB: a 4 MiB block is two classes up, beyond the bound, so Raw serves it.
  void* q = pool.allocate(3 * MiB / 4);
  CHECK(q != four);
  CHECK(CountingRaw::allocs == a0 + 1);
  pool.deallocate(q);
  // Above 64 MiB classes are 2 MiB apart and the bound is 1/8: a 112 MiB block serves a 100 MiB
  // request, a 114 MiB one does not.
  REQUIRE(TestPool::reuse_limit(100 * MiB) == 112 * MiB + MiB / 2);
  void* b112 = pool.allocate(112 * MiB);
  void* b114 = pool.allocate(114 * MiB);
  pool.deallocate(b114);
  pool.deallocate(b112);
  const auto a1 = CountingRaw::allocs;
  void* r = pool.allocate(100 * MiB);
  CHECK(r == b112);
  void* s = pool.allocate(100 * MiB);  // only the 114 MiB block is left: out of bounds
  CHECK(s != b114);
  CHECK(CountingRaw::allocs == a1 + 1);
  pool.deallocate(r);
  pool.deallocate(s);
  // An exact-class block is preferred over a larger one.
  void* exact = pool.allocate(100 * MiB);
  CHECK(exact == s);
  pool.deallocate(exact);
}

TEST_CASE("caching pool: the cap follows the working set, a fixed cap overrides it", "[memory]") {
  TestPool pool;
  pool.follow_working_set(MiB);  // floor far below the "step" below
  REQUIRE(pool.follows_working_set());
  auto step = [&] {  // a step's 8 activations of 4 MiB, all freed at its end
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) blocks.push_back(pool.allocate(4 * MiB));
    for (void* b : blocks) pool.deallocate(b);
  };
  step();
  CHECK(pool.working_set_bytes() == 32 * MiB);
  CHECK(pool.stats().cached_bytes() == 32 * MiB);  // all kept although the floor is 1 MiB
  CHECK(pool.cache_limit() == 33 * MiB);           // the step's 32 MiB + the floor
  const auto a0 = CountingRaw::allocs, f0 = CountingRaw::frees;
  for (int i = 0; i < 3; ++i) step();
  CHECK(CountingRaw::allocs == a0);  // the next steps map nothing
  CHECK(CountingRaw::frees == f0);

  // The fixed cap (explicit override) keeps at most 1 MiB: every block of the step goes back.
  pool.set_cache_limit(MiB);
  CHECK_FALSE(pool.follows_working_set());
  CHECK(pool.cache_limit() == MiB);
  CHECK(pool.stats().cached_bytes() == 0);  // lowering the cap released the cache
  const auto a1 = CountingRaw::allocs, f1 = CountingRaw::frees;
  step();
  CHECK(CountingRaw::allocs == a1 + 8);
  CHECK(CountingRaw::frees == f1 + 8);
}

TEST_CASE("caching pool: release restarts the working set, and the footprint stays bounded", "[memory]") {
  TestPool pool;
  pool.follow_working_set(2 * MiB);
  void* kept = pool.allocate(MiB);  // a parameter that stays in use throughout
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(8 * MiB));
  for (void* b : blocks) pool.deallocate(b);
  CHECK(pool.stats().cached_bytes() == 48 * MiB);
  pool.release_cached();
  CHECK(pool.stats().cached_bytes() == 0);
  CHECK(pool.working_set_bytes() == MiB);  // restarted from the bytes in use
  CHECK(pool.cache_limit() == 2 * MiB);    // back at the floor until a new working set shows
  // A smaller phase: two 8 MiB blocks are its working set, and only they are cached afterwards.
  void* x = pool.allocate(8 * MiB);
  void* y = pool.allocate(8 * MiB);
  pool.deallocate(x);
  pool.deallocate(y);
  CHECK(pool.stats().cached_bytes() == 16 * MiB);

  // Random traffic: reserved bytes never exceed the high-water lent bytes + the floor.
  std::mt19937_64 rng(11);
  std::vector<void*> live;
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 2 == 0) {
      live.push_back(pool.allocate(std::size_t(1 + rng() % 40) * MiB / 3));
    } else {
      const std::size_t j = std::size_t(rng() % live.size());
      pool.deallocate(live[j]);
      live.erase(live.begin() + std::ptrdiff_t(j));
    }
    const auto st = pool.stats();
    REQUIRE(st.reserved_bytes <= pool.working_set_bytes() + 2 * MiB);
    REQUIRE(st.in_use_bytes <= st.lent_bytes());
  }
  for (void* b : live) pool.deallocate(b);
  pool.deallocate(kept);
  pool.release_cached();
  CHECK(pool.stats().reserved_bytes == 0);
}
