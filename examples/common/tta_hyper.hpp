#pragma once
// Test-time-adaptation hyper-parameters per method and the validation search that chooses them.
// The search is a small coordinate grid, run on a VALIDATION stream only (for ImageNet-C style
// experiments: the four extra corruptions on held-out source images), never on the test stream:
//   1. each adapting method's learning rate (at batch 64, scaled linearly with the batch as the
//      papers do) from multiples of its paper default;
//      (for EATA jointly with its redundancy margin, see Hyper::d_margin);
//   2. then, at that rate, MoETTA's balance weight lambda and expert count, and the entropy margin
//      factor of EATA / SAR / MoETTA where the margin grid has more than one value.
// Ties keep the earlier candidate (the paper default comes first), so a flat validation curve
// keeps the published settings. The chosen values are stored as JSON next to the model.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <ttmoe/tta/registry.hpp>

namespace tta_common {

/// One method's hyper-parameters (the library's, shared with tta::make_method).
using Hyper = ttmoe::tta::Hyper;

/// Hyper-parameters by method key (a tta::method_registry() key).
using HyperSet = std::map<std::string, Hyper>;

/// The papers' settings of every registered method (tta::MethodInfo::paper).
inline HyperSet paper_defaults() {
  HyperSet h;
  for (const auto& m : ttmoe::tta::method_registry()) h[m.key] = m.paper;
  return h;
}

/// The candidate values the search tries, each list starting with the paper's value's role.
struct SearchGrid {
  std::vector<double> lr_multipliers{1, 4, 16, 64};  ///< times the paper default
  std::vector<double> lambdas{0.2, 0.05, 0.8};
  std::vector<std::int64_t> experts{9, 3};
  std::vector<double> margins{0.4};                  ///< one value: the margin is not searched
  std::vector<double> d_margins{0.05, 0.35, 0.5};    ///< EATA, searched jointly with its learning rate
};

/// One evaluated candidate: method, values, validation accuracy (0..1).
struct Trial {
  std::string method;
  Hyper hyper;
  double accuracy = 0;
};

/// Runs the coordinate search for `methods` (No-adapt is evaluated once, with its defaults, as the
/// reference) with `evaluate(method, hyper)` returning validation accuracy in [0,1]. Returns the
/// chosen set; every trial is appended to `trials` in the order it ran.
inline HyperSet search(const std::vector<std::string>& methods, const SearchGrid& grid,
                       const std::function<double(const std::string&, const Hyper&)>& evaluate,
                       std::vector<Trial>& trials) {
  HyperSet chosen;
  for (const auto& m : methods) {
    const ttmoe::tta::MethodInfo* info = ttmoe::tta::find_method(m);
    if (!info) throw std::invalid_argument("tta_common::search: unknown method '" + m + "'");
    Hyper best = info->paper;
    if (!info->adapts) {
      trials.push_back({m, best, evaluate(m, best)});
      chosen[m] = best;
      continue;
    }
    double best_acc = -1;
    auto consider = [&](const Hyper& h) {
      for (const auto& t : trials)  // a candidate already run (the current best) is not rerun
        if (t.method == m && t.hyper == h) return;
      const double a = evaluate(m, h);
      trials.push_back({m, h, a});
      if (a > best_acc) best_acc = a, best = h;
    };
    // EATA: rate and redundancy margin jointly. While the margin filters out every sample no rate
    // matters, and at the paper's rate no margin does, so one coordinate at a time cannot find them.
    const double lr0 = best.lr;
    const std::vector<double> d_margins = info->has.d_margin ? grid.d_margins : std::vector<double>{best.d_margin};
    for (double d : d_margins)
      for (double k : grid.lr_multipliers) {
        Hyper h = info->paper;
        h.lr = lr0 * k, h.d_margin = d;
        consider(h);
      }
    if (info->has.lambda)
      for (double l : grid.lambdas) {
        Hyper h = best;
        h.lambda = l;
        consider(h);
      }
    if (info->has.experts)
      for (auto e : grid.experts) {
        Hyper h = best;
        h.experts = e;
        consider(h);
      }
    if (info->has.margin && grid.margins.size() > 1)
      for (double g : grid.margins) {
        Hyper h = best;
        h.margin = g;
        consider(h);
      }
    chosen[m] = best;
  }
  return chosen;
}

/// JSON of a set (and, optionally, the trials that chose it and a free-form note).
inline nlohmann::json to_json(const HyperSet& set, const std::vector<Trial>& trials = {}, const std::string& note = {}) {
  nlohmann::json j;
  for (const auto& [m, h] : set)
    j["chosen"][m] = {{"lr_at_batch_64", h.lr}, {"margin", h.margin}, {"lambda", h.lambda}, {"experts", h.experts},
                   {"d_margin", h.d_margin}};
  for (const auto& t : trials)
    j["trials"].push_back({{"method", t.method},
                           {"lr_at_batch_64", t.hyper.lr},
                           {"margin", t.hyper.margin},
                           {"lambda", t.hyper.lambda},
                           {"experts", t.hyper.experts},
                           {"d_margin", t.hyper.d_margin},
                           {"validation_accuracy", t.accuracy}});
  if (!note.empty()) j["note"] = note;
  return j;
}

/// Writes `j` to `path` atomically (temporary file, then rename).
inline void save_json(const nlohmann::json& j, const std::filesystem::path& path) {
  const auto tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error(tmp + ": cannot open for writing");
    f << j.dump(2) << "\n";
    if (!f) throw std::runtime_error(tmp + ": write failed");
  }
  std::filesystem::rename(tmp, path);
}

/// Reads the "chosen" set of a file written by save_json(to_json(...)); throws std::runtime_error
/// naming the file and the field on a malformed file.
inline HyperSet load(const std::filesystem::path& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error(path.string() + ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + ": not JSON (" + e.what() + ")");
  }
  if (!j.contains("chosen") || !j["chosen"].is_object()) throw std::runtime_error(path.string() + ": no 'chosen' object");
  HyperSet s;
  for (const auto& [m, v] : j["chosen"].items()) {
    try {
      s[m] = {v.at("lr_at_batch_64").get<double>(), v.at("margin").get<double>(), v.at("lambda").get<double>(),
              v.at("experts").get<std::int64_t>(), v.at("d_margin").get<double>()};
    } catch (const std::exception& e) {
      throw std::runtime_error(path.string() + ": chosen." + m + ": " + e.what());
    }
  }
  return s;
}

/// The trials as a markdown table (validation accuracy in %), in the order they ran.
inline std::string trials_table(const std::vector<Trial>& trials) {
  std::string s = "| method   | lr (batch 64) | margin | lambda | experts | d_margin | validation acc % |\n"
                  "|----------|---------------|--------|--------|---------|----------|------------------|\n";
  for (const auto& t : trials)
    s += fmt::format("| {:<8} | {:>13.2e} | {:>6.2f} | {:>6.2f} | {:>7} | {:>8.2f} | {:>16.2f} |\n", t.method, t.hyper.lr,
                     t.hyper.margin, t.hyper.lambda, t.hyper.experts, t.hyper.d_margin, 100 * t.accuracy);
  return s;
}

}  // namespace tta_common
