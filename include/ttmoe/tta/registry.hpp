#pragma once
// The method registry: every test-time-adaptation method the library ships, by key ("noadapt",
// "tent", "eata", "sar", "moetta"), with its table name, the hyper-parameters it has, the papers'
// values of them, and a factory that builds it for any model type. Examples read the registry for
// their command-line choices, table rows, hyper-parameter search and printing, so adding a method
// means adding one entry here (and one case in make_method, tta/make_method.hpp), never a string
// comparison in an example. This header is the data alone (no method, no tensor), so table and
// search code can use it without the library's templates.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ttmoe::tta {

/// The tunable hyper-parameters of a method, one struct for all of them; a method reads only those
/// its MethodInfo::has lists (the learning rate when it adapts at all).
struct Hyper {
  double lr = 0;             ///< learning rate at batch 64 (0 for No-adapt)
  double margin = 0.4;       ///< entropy margin factor: E0 = margin * ln C (EATA, SAR, MoETTA)
  double lambda = 0.2;       ///< MoETTA: balance-loss weight, alpha_t = lambda * running mean entropy
  std::int64_t experts = 9;  ///< MoETTA: experts per MoE-LayerNorm
  /// EATA: redundancy margin on |cos(p, m)| (0.05 in the paper, for 1000 classes). With few classes
  /// every confident prediction has |cos| near 1/sqrt(C) against the running mean prediction (0.32
  /// for C = 10), so 0.05 filters out every sample after the first batch: it must be re-chosen.
  double d_margin = 0.05;
  bool operator==(const Hyper&) const = default;
};

/// Which of Hyper's fields beyond the learning rate a method uses.
struct HyperFields {
  bool margin = false;    ///< entropy margin factor
  bool d_margin = false;  ///< EATA's redundancy margin
  bool lambda = false;    ///< MoETTA's balance weight
  bool experts = false;   ///< MoETTA's expert count
};

/// The methods the registry knows (make_method switches over it, so a new one that is not built is
/// a compiler warning, not a silent fallthrough).
enum class MethodKind { no_adapt, tent, eata, sar, moetta };

/// One registry entry.
struct MethodInfo {
  MethodKind kind;
  std::string key;           ///< command-line / file key, equal to the method's name()
  std::string display_name;  ///< row / legend name in tables and figures
  bool adapts = true;        ///< false: the unadapted reference (no learning rate, nothing tuned)
  bool needs_fisher = false; ///< wants clean source images (EATA's Fisher regulariser)
  HyperFields has;           ///< the hyper-parameters it has beyond the learning rate
  Hyper paper;               ///< the papers' values (IMPLEMENTATION_FACTS.md)
};

/// Every method, in table order; the first is the reference (No-adapt) that gains are measured
/// against. Paper values: Tent 5e-4, EATA 6e-4, SAR 5e-4, MoETTA 1e-3 at batch 64; margin 0.4;
/// EATA d_margin 0.05; MoETTA lambda 0.2 and 9 experts.
inline const std::vector<MethodInfo>& method_registry() {
  static const std::vector<MethodInfo> methods{
      {MethodKind::no_adapt, "noadapt", "No-adapt", false, false, {}, Hyper{}},
      {MethodKind::tent, "tent", "Tent", true, false, {}, Hyper{5e-4}},
      {MethodKind::eata, "eata", "EATA", true, true, {.margin = true, .d_margin = true}, Hyper{6e-4}},
      {MethodKind::sar, "sar", "SAR", true, false, {.margin = true}, Hyper{5e-4}},
      {MethodKind::moetta, "moetta", "MoETTA", true, false, {.margin = true, .lambda = true, .experts = true}, Hyper{1e-3}},
  };
  return methods;
}

/// The keys of every registered method, in table order.
inline std::vector<std::string> method_keys() {
  std::vector<std::string> keys;
  for (const auto& m : method_registry()) keys.push_back(m.key);
  return keys;
}

/// The reference method (the first entry: No-adapt).
inline const MethodInfo& reference_method() { return method_registry().front(); }

/// The entry for `key`, or nullptr when no method has it.
inline const MethodInfo* find_method(std::string_view key) {
  for (const auto& m : method_registry())
    if (m.key == key) return &m;
  return nullptr;
}

/// The entry for `key`; throws std::invalid_argument naming the key and the known ones.
inline const MethodInfo& method_info(std::string_view key) {
  if (const MethodInfo* m = find_method(key)) return *m;
  std::string known;
  for (const auto& m : method_registry()) known += (known.empty() ? "" : ", ") + m.key;
  throw std::invalid_argument("tta: unknown method '" + std::string(key) + "' (known: " + known + ")");
}

/// The table name of `key` (the key itself for an unregistered name, so ad-hoc rows still print).
inline std::string display_name(std::string_view key) {
  const MethodInfo* m = find_method(key);
  return m ? m->display_name : std::string(key);
}

}  // namespace ttmoe::tta
