#pragma once
// Helpers shared by the core unit tests: a seeded generator, tensor construction from host vectors,
// and element-wise comparison against reference values computed independently in double.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <ttmoe/ttmoe.hpp>

namespace core_test {

using ttmoe::index_t;

/// splitmix64: deterministic everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1.0p-53); }
  std::int64_t index(index_t n) { return static_cast<std::int64_t>(next() % n); }

 private:
  std::uint64_t s_;
};

template <class T>
std::vector<T> random_values(std::size_t n, double lo, double hi, std::uint64_t seed) {
  Rng r(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(r.uniform(lo, hi));
  return v;
}

/// A rank-R dynamic tensor from host values.
template <class T, std::size_t R>
ttmoe::Tensor<T, ttmoe::DynShape<R>> make(const std::array<index_t, R>& e, const std::vector<T>& v) {
  return ttmoe::Tensor<T, ttmoe::DynShape<R>>::from_host(ttmoe::DynShape<R>::from_extents(e), v);
}
template <class T, std::size_t R>
ttmoe::Tensor<T, ttmoe::DynShape<R>> make_random(const std::array<index_t, R>& e, double lo, double hi,
                                                 std::uint64_t seed) {
  index_t n = 1;
  for (auto x : e) n *= x;
  return make<T, R>(e, random_values<T>(n, lo, hi, seed));
}

/// Outcome of comparing values with a reference: the first element outside atol + rtol |ref|.
struct Closeness {
  bool ok = true;
  std::string detail;
  double max_abs = 0;
};
template <class T>
Closeness compare(const std::vector<T>& got, const std::vector<double>& ref, double rtol, double atol) {
  Closeness c;
  if (got.size() != ref.size()) {
    c.ok = false;
    c.detail = "size " + std::to_string(got.size()) + " vs reference " + std::to_string(ref.size());
    return c;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = ref[i];
    if (std::isnan(r) || std::isnan(g)) {
      if (std::isnan(r) != std::isnan(g) && c.ok) {
        c.ok = false;
        std::ostringstream os;
        os.precision(17);
        os << "element " << i << ": got " << g << ", reference " << r;
        c.detail = os.str();
      }
      continue;
    }
    if (std::isinf(r) && g == r) continue;
    const double err = std::abs(g - r);
    c.max_abs = std::max(c.max_abs, err);
    if (!(err <= atol + rtol * std::abs(r)) && c.ok) {
      c.ok = false;
      std::ostringstream os;
      os.precision(17);
      os << "element " << i << ": got " << g << ", reference " << r << " (|diff| " << err << ")";
      c.detail = os.str();
    }
  }
  return c;
}

/// CHECKs `got` against `ref` with one assertion (and an informative message).
#define CHECK_CLOSE(got, ref, rtol, atol)                          \
  do {                                                             \
    const auto cmp_ = ::core_test::compare((got), (ref), (rtol), (atol)); \
    INFO(cmp_.detail);                                             \
    CHECK(cmp_.ok);                                                \
  } while (0)

/// Row-major strides of extents.
template <std::size_t R>
std::array<index_t, R> strides_of(const std::array<index_t, R>& e) {
  std::array<index_t, R> s{};
  index_t acc = 1;
  for (std::size_t i = R; i-- > 0;) {
    s[i] = acc;
    acc *= e[i];
  }
  return s;
}

/// Offset into an operand of extents `e` (rank RS, right-aligned) for output multi-index `idx`
/// (rank R) under numpy broadcasting: an independent re-implementation for the tests.
template <std::size_t R, std::size_t RS>
index_t broadcast_offset(const std::array<index_t, R>& idx, const std::array<index_t, RS>& e) {
  const auto st = strides_of(e);
  index_t off = 0;
  for (std::size_t d = 0; d < RS; ++d) {
    const index_t i = idx[R - RS + d];
    off += (e[d] == 1 ? 0 : i) * st[d];
  }
  return off;
}
/// Unravels a flat row-major position.
template <std::size_t R>
std::array<index_t, R> unravel(index_t p, const std::array<index_t, R>& e) {
  std::array<index_t, R> idx{};
  for (std::size_t d = R; d-- > 0;) {
    idx[d] = p % e[d];
    p /= e[d];
  }
  return idx;
}

/// Restores the thread count on scope exit.
struct ThreadCountGuard {
  std::size_t saved = ttmoe::cpu_backend::num_threads();
  ~ThreadCountGuard() { ttmoe::cpu_backend::set_num_threads(saved); }
};

}  // namespace core_test
