#pragma once
// Test streams of mixed distribution shifts (MoETTA's evaluation protocol): several domains, each a
// list of labelled items, concatenated and shuffled uniformly with a seed, each item remembering its
// domain. The classical / potpourri / potpourri+ settings are domain lists; what an item refers to
// (a file, an in-memory image) is the caller's business through `ref`.
//
// setting_domains() turns a setting plus the data folders a run was given into the list of domains
// to mix (which folders are essential, which optional, what is warned about: see its comment).
//
// Shuffling uses our own Fisher-Yates over std::mt19937_64 with a rejection-sampled bounded integer,
// because std::shuffle and std::uniform_int_distribution are implementation-defined: the same seed
// must give the same stream on every standard library.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/data/datasets.hpp"

namespace ttmoe::data {

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

/// Where a domain of a setting comes from; decides its labels and preprocessing.
enum class DomainKind {
  corruption,   ///< one ImageNet-C corruption at one severity (1000 wnid folders; images already 224 px)
  rendition,    ///< ImageNet-R (200 wnid folders, labels through the 1000-class list)
  sketch,       ///< ImageNet-Sketch (1000 wnid folders, labels through the 1000-class list)
  adversarial,  ///< ImageNet-A (200 wnid folders, labels through the 1000-class list)
  clean         ///< the ImageNet validation set (1000 wnid folders)
};

/// True for the kinds whose class folders are a subset of the 1000 wnids and are therefore labelled
/// through the 1000-class list (imagenet_class_list) rather than by sorted folder position.
inline bool needs_class_list(DomainKind k) {
  return k == DomainKind::rendition || k == DomainKind::sketch || k == DomainKind::adversarial;
}

/// One domain of a setting: its stream name ("fog", "imagenet-r", ...), its class-folder root and kind.
struct DomainSpec {
  std::string name;
  std::filesystem::path folder;
  DomainKind kind = DomainKind::corruption;
};

/// The data folders a run was given; nullopt = not given (the --imagenet-* options).
struct SettingFolders {
  std::optional<std::filesystem::path> imagenet_c;       ///< root DIR/<corruption>/<severity>/<wnid>/
  std::optional<std::filesystem::path> imagenet_r;       ///< class folders
  std::optional<std::filesystem::path> imagenet_sketch;  ///< class folders
  std::optional<std::filesystem::path> imagenet_a;       ///< class folders
  std::optional<std::filesystem::path> imagenet_val;     ///< class folders
};

/// The domains of a setting, in stream order, and the warnings about optional folders not given
/// (the caller prints them; the library does not write to stderr).
struct SettingDomains {
  std::vector<DomainSpec> domains;
  std::vector<std::string> warnings;
};

/// The domains a setting mixes, from the folders that were given.
///
///  * every setting: the `corruptions` of ImageNet-C at `severity` (in the given order, named by the
///    corruption). ImageNet-C is essential: not given, or lacking one of the corruption folders, is a
///    DatasetError (discover_imagenet_c lists every missing one);
///  * potpourri: + ImageNet-R, ImageNet-Sketch, ImageNet-A, in that order, each only when its folder is
///    given; each one not given adds a warning. At least one of the three is essential (without any,
///    the stream would be the classical one under another name): none given is a DatasetError;
///  * potpourri+: as potpourri, + the ImageNet validation set (named "imagenet-val"), which is
///    essential here (it is what distinguishes potpourri+): not given is a DatasetError. With
///    potpourri+, R/Sketch/A are all optional (each absent one warned about).
///  * classical: folders other than ImageNet-C are not domains; R/Sketch/A given anyway add a warning
///    that they are unused (the validation set is not warned about: callers use it for EATA's Fisher).
///
/// A folder that IS given must exist (DatasetError naming its option): a typo must not silently
/// shorten the benchmark. Only the folders' existence is checked here; scanning them is the caller's.
inline SettingDomains setting_domains(Setting setting, const SettingFolders& folders,
                                      const std::vector<std::string>& corruptions, int severity) {
  SettingDomains out;
  if (!folders.imagenet_c)
    throw DatasetError("--setting " + setting_name(setting) + " needs --imagenet-c DIR (the ImageNet-C root)");
  if (corruptions.empty()) throw DatasetError("setting_domains: no ImageNet-C corruption requested");
  for (const auto& c : discover_imagenet_c(*folders.imagenet_c, severity, corruptions))
    out.domains.push_back({c, imagenet_c_folder(*folders.imagenet_c, c, severity), DomainKind::corruption});
  struct Optional {
    const std::optional<std::filesystem::path>* folder;
    const char* option;
    const char* name;
    DomainKind kind;
  };
  const Optional extra[] = {{&folders.imagenet_r, "--imagenet-r", "imagenet-r", DomainKind::rendition},
                            {&folders.imagenet_sketch, "--imagenet-sketch", "imagenet-sketch", DomainKind::sketch},
                            {&folders.imagenet_a, "--imagenet-a", "imagenet-a", DomainKind::adversarial}};
  if (setting == Setting::classical) {
    for (const auto& e : extra)
      if (*e.folder)
        out.warnings.push_back(std::string(e.option) + " is not used by the classical setting (potpourri and "
                               "potpourri+ use it)");
    return out;
  }
  if (setting == Setting::potpourri_plus && !folders.imagenet_val)
    throw DatasetError("--setting potpourri+ needs --imagenet-val DIR (the clean ImageNet validation set is what "
                       "potpourri+ adds to potpourri)");
  std::size_t given = 0;
  for (const auto& e : extra) {
    if (!*e.folder) {
      out.warnings.push_back("--setting " + setting_name(setting) + ": no " + e.option + " given, the stream has no " +
                             e.name + " domain");
      continue;
    }
    require_directory(**e.folder, e.option);
    out.domains.push_back({e.name, **e.folder, e.kind});
    ++given;
  }
  if (setting == Setting::potpourri && given == 0)
    throw DatasetError("--setting potpourri needs at least one of --imagenet-r, --imagenet-sketch, --imagenet-a "
                       "(without them the stream is the classical one)");
  if (setting == Setting::potpourri_plus) {
    require_directory(*folders.imagenet_val, "--imagenet-val");
    out.domains.push_back({"imagenet-val", *folders.imagenet_val, DomainKind::clean});
  }
  return out;
}

}  // namespace ttmoe::data
