#pragma once
// Per-item seeds: one 64-bit seed for every (run seed, step, domain, slot, ...) tuple, so each random
// draw depends only on where it happens and not on which thread got there first or in which order.

#include <cstdint>

namespace ttmoe::data {

/// Combines `h` with `v` and scrambles the result (SplitMix64's finaliser): seed_mix(seed_mix(s, a), b)
/// gives unrelated streams for neighbouring (a, b).
inline std::uint64_t seed_mix(std::uint64_t h, std::uint64_t v) {
  std::uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace ttmoe::data
