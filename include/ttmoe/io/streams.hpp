#pragma once
// Test streams of mixed distribution shifts (MoETTA's evaluation protocol): several domains, each a
// list of labelled items, concatenated and shuffled uniformly with a seed, each item remembering its
// domain. The classical / potpourri / potpourri+ settings are domain lists; what an item refers to
// (a file, an in-memory image) is the caller's business through `ref`.
//
// Shuffling uses our own Fisher-Yates over std::mt19937_64 with a rejection-sampled bounded integer,
// because std::shuffle and std::uniform_int_distribution are implementation-defined: the same seed
// must give the same stream on every standard library.

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace ttmoe::io {

/// One element of a stream.
struct StreamItem {
  std::size_t ref = 0;     ///< index into the caller's table (file list, image array)
  std::int64_t label = 0;  ///< class index
  int domain = 0;          ///< index into Stream::domain_names
};

/// A domain before mixing: its name and items (their `domain` field is set by mix_domains).
struct DomainItems {
  std::string name;
  std::vector<StreamItem> items;
};

/// A mixed stream: the domain names and the items in stream order.
struct Stream {
  std::vector<std::string> domain_names;
  std::vector<StreamItem> items;
  /// Number of items of domain `d`.
  std::size_t count(int d) const {
    std::size_t n = 0;
    for (const auto& it : items) n += it.domain == d;
    return n;
  }
};

/// Uniform integer in [0, n) from `g`, identical on every platform (rejection sampling).
inline std::uint64_t uniform_below(std::mt19937_64& g, std::uint64_t n) {
  if (n == 0) throw std::invalid_argument("uniform_below: empty range");
  const std::uint64_t limit = std::uint64_t(-1) - (std::uint64_t(-1) % n);  // largest multiple of n
  std::uint64_t x;
  do x = g();
  while (x >= limit);
  return x % n;
}

/// Fisher-Yates shuffle with `g` (portable replacement for std::shuffle).
template <class V>
void portable_shuffle(V& v, std::mt19937_64& g) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[std::size_t(uniform_below(g, i))]);
}

/// At most `n` items of `items`, a uniform random subset (seeded) kept in its original order, so a
/// subset of a class-sorted folder still covers the classes. n == 0 or n >= size keeps everything.
inline std::vector<StreamItem> subsample(const std::vector<StreamItem>& items, std::size_t n, std::uint64_t seed) {
  if (n == 0 || n >= items.size()) return items;
  std::vector<std::size_t> idx(items.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::mt19937_64 g(seed);
  portable_shuffle(idx, g);
  idx.resize(n);
  std::sort(idx.begin(), idx.end());
  std::vector<StreamItem> out;
  out.reserve(n);
  for (auto i : idx) out.push_back(items[i]);
  return out;
}

/// Concatenates the domains (in the given order), tags each item with its domain index and
/// shuffles the whole stream uniformly with `seed` (shuffle = false keeps domain blocks, the
/// "continual" order). The result depends only on the inputs and the seed.
inline Stream mix_domains(const std::vector<DomainItems>& domains, std::uint64_t seed, bool shuffle = true) {
  Stream s;
  for (std::size_t d = 0; d < domains.size(); ++d) {
    s.domain_names.push_back(domains[d].name);
    for (StreamItem it : domains[d].items) {
      it.domain = int(d);
      s.items.push_back(it);
    }
  }
  if (shuffle) {
    std::mt19937_64 g(seed);
    portable_shuffle(s.items, g);
  }
  return s;
}

/// MoETTA's evaluation settings.
enum class Setting {
  classical,      ///< the 15 ImageNet-C corruptions at severity 5
  potpourri,      ///< + ImageNet-R, ImageNet-Sketch, ImageNet-A
  potpourri_plus  ///< + the clean ImageNet validation set
};

/// "classical", "potpourri", "potpourri+".
inline std::string setting_name(Setting s) {
  switch (s) {
    case Setting::classical: return "classical";
    case Setting::potpourri: return "potpourri";
    case Setting::potpourri_plus: return "potpourri+";
  }
  return "?";
}

/// Parses a setting name (also "potpourri_plus"); throws std::invalid_argument listing the choices.
inline Setting parse_setting(const std::string& s) {
  if (s == "classical") return Setting::classical;
  if (s == "potpourri") return Setting::potpourri;
  if (s == "potpourri+" || s == "potpourri_plus" || s == "potpourri-plus") return Setting::potpourri_plus;
  throw std::invalid_argument("unknown setting '" + s + "' (classical, potpourri or potpourri+)");
}

}  // namespace ttmoe::io
