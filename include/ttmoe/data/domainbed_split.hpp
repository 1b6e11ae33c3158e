#pragma once
// DomainBed's in/out split of one environment, reproduced exactly so a ttmoe run and a DomainBed run
// hold out the same images.
//
// DomainBed (domainbed/lib/misc.py, train.py) does, for environment `env` of trial `trial_seed`:
//   seed = int(md5(str((trial_seed, env)).encode()).hexdigest(), 16) % 2**31      # seed_hash
//   keys = list(range(len(env_dataset))); np.random.RandomState(seed).shuffle(keys)
//   out = keys[:int(len * holdout_fraction)]; in = keys[int(len * holdout_fraction):]
// `str` of a Python tuple of two ints is "(a, b)". numpy's legacy RandomState seeded with an int is
// MT19937's init_genrand (std::mt19937 seeds identically), and its list shuffle is Fisher-Yates from the
// end drawing j in [0, i] by masked rejection on 32-bit outputs. The MD5 comes from OpenSSL's libcrypto
// (link OpenSSL::Crypto); the rest is plain C++.

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace ttmoe::data {

/// The MD5 digest of `text` (16 bytes), through OpenSSL's EVP interface.
inline std::array<unsigned char, 16> md5_digest(const std::string& text) {
  std::array<unsigned char, 16> d{};
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), d.data(), &len, EVP_md5(), nullptr) != 1 || len != d.size())
    throw std::runtime_error("md5_digest: OpenSSL EVP_Digest(MD5) failed");
  return d;
}

/// DomainBed's misc.seed_hash(trial_seed, env): the MD5 of the tuple's Python repr "(t, e)" read as a
/// big-endian integer, mod 2^31 (= the low 31 bits of the digest's last four bytes).
inline std::uint32_t domainbed_seed_hash(std::int64_t trial_seed, std::int64_t env) {
  const auto d = md5_digest("(" + std::to_string(trial_seed) + ", " + std::to_string(env) + ")");
  const std::uint32_t low = (std::uint32_t(d[12]) << 24) | (std::uint32_t(d[13]) << 16) |
                            (std::uint32_t(d[14]) << 8) | std::uint32_t(d[15]);
  return low & 0x7fffffffu;
}

/// numpy's random_interval(max): a uniform integer in [0, max] by masking 32-bit MT19937 outputs to the
/// smallest all-ones mask covering max and rejecting values above it (max < 2^32 here).
inline std::uint32_t numpy_random_interval(std::mt19937& g, std::uint32_t max) {
  if (max == 0) return 0;
  std::uint32_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  std::uint32_t v;
  while ((v = std::uint32_t(g()) & mask) > max) {
  }
  return v;
}

/// np.random.RandomState(seed).shuffle(list(range(n))): the same permutation, element for element.
inline std::vector<std::size_t> numpy_shuffled_range(std::size_t n, std::uint32_t seed) {
  if (n > 0xffffffffull) throw std::invalid_argument("numpy_shuffled_range: more than 2^32 items");
  std::vector<std::size_t> keys(n);
  for (std::size_t i = 0; i < n; ++i) keys[i] = i;
  std::mt19937 g(seed);
  for (std::size_t i = n; i-- > 1;) std::swap(keys[i], keys[numpy_random_interval(g, std::uint32_t(i))]);
  return keys;
}

/// The two halves of one environment, as indices into its file list (DomainBed's order, not sorted).
struct EnvironmentSplit {
  std::vector<std::size_t> in;   ///< training part (80 % by default)
  std::vector<std::size_t> out;  ///< held-out part: validation for training domains, oracle for the test one
};

/// DomainBed's split of an environment of `n` items: the first int(n * holdout_fraction) keys of the
/// seeded shuffle are `out`, the rest `in`. holdout_fraction must lie in [0, 1].
inline EnvironmentSplit domainbed_split(std::size_t n, std::int64_t trial_seed, std::int64_t env,
                                        double holdout_fraction = 0.2) {
  if (!(holdout_fraction >= 0.0 && holdout_fraction <= 1.0))
    throw std::invalid_argument("domainbed_split: holdout_fraction must be in [0, 1], got " +
                                std::to_string(holdout_fraction));
  const auto keys = numpy_shuffled_range(n, domainbed_seed_hash(trial_seed, env));
  // Python's int() truncates toward zero, as the cast does for non-negative values.
  const auto n_out = std::size_t(double(n) * holdout_fraction);
  EnvironmentSplit s;
  s.out.assign(keys.begin(), keys.begin() + std::ptrdiff_t(n_out));
  s.in.assign(keys.begin() + std::ptrdiff_t(n_out), keys.end());
  return s;
}

}  // namespace ttmoe::data
