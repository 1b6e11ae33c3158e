#pragma once
// DomainBed's two model-selection rules over the records of runs (domainbed_records.hpp), as
// domainbed/model_selection.py defines them:
//   * training-domain validation (IIDAccuracySelectionMethod): within a run, the checkpoint with the
//     best mean `out` accuracy over the TRAINING environments; its validation accuracy is that mean,
//     its test accuracy the held-out environment's `in` accuracy;
//   * test-domain validation, "oracle" (OracleSelectionMethod): within a run, the LAST checkpoint (no
//     early stopping); its validation accuracy is the held-out environment's `out` accuracy, its test
//     accuracy the held-out `in` accuracy.
// Across runs of one trial with different hyper-parameters, both rules keep the run whose chosen
// checkpoint has the best validation accuracy (select_run). Ties keep the first, as Python's max().

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/training/domainbed_records.hpp"

namespace ttmoe::training {

/// Which of DomainBed's rules picks the checkpoint.
enum class SelectionRule {
  TrainingDomainValidation,  ///< best mean `out` accuracy of the training domains
  Oracle,                    ///< last checkpoint, validated on the held-out domain's `out` split
};

/// The rule's name as DomainBed's tables print it.
inline std::string selection_rule_name(SelectionRule r) {
  return r == SelectionRule::Oracle ? "test-domain validation set (oracle)" : "training-domain validation set";
}

/// A chosen checkpoint of one run.
struct Selection {
  std::size_t record = 0;         ///< index into the run's records
  std::int64_t step = 0;          ///< its step
  double validation_accuracy = 0; ///< what the rule maximised
  double test_accuracy = 0;       ///< the held-out environment's `in` accuracy there
};

/// Applies `rule` to the records of ONE run (one held-out environment, one trial). Throws
/// std::invalid_argument for no records, records of different runs, or a test_env outside the records.
inline Selection select_checkpoint(const std::vector<CheckpointRecord>& run, SelectionRule rule) {
  if (run.empty()) throw std::invalid_argument("select_checkpoint: the run has no records");
  const auto& first = run.front();
  const auto envs = first.in_acc.size();
  if (first.test_env < 0 || std::size_t(first.test_env) >= envs || envs < 2)
    throw std::invalid_argument("select_checkpoint: test_env " + std::to_string(first.test_env) + " with " +
                                std::to_string(envs) + " environments in the records");
  const auto test = std::size_t(first.test_env);
  for (const auto& r : run)
    if (r.test_env != first.test_env || r.trial_seed != first.trial_seed || r.in_acc.size() != envs ||
        r.out_acc.size() != envs)
      throw std::invalid_argument("select_checkpoint: records of different runs (step " + std::to_string(r.step) +
                                  " has test_env " + std::to_string(r.test_env) + ", trial " +
                                  std::to_string(r.trial_seed) + ")");
  auto chosen = [&](std::size_t i, double val) { return Selection{i, run[i].step, val, run[i].in_acc[test]}; };
  if (rule == SelectionRule::Oracle) {
    std::size_t last = 0;
    for (std::size_t i = 1; i < run.size(); ++i)
      if (run[i].step > run[last].step) last = i;
    return chosen(last, run[last].out_acc[test]);
  }
  Selection best{};
  for (std::size_t i = 0; i < run.size(); ++i) {
    double sum = 0;
    for (std::size_t e = 0; e < envs; ++e)
      if (e != test) sum += run[i].out_acc[e];
    const double val = sum / double(envs - 1);
    if (i == 0 || val > best.validation_accuracy) best = chosen(i, val);
  }
  return best;
}

/// Index of the run (hyper-parameter candidate) whose selection has the best validation accuracy.
inline std::size_t select_run(const std::vector<Selection>& candidates) {
  if (candidates.empty()) throw std::invalid_argument("select_run: no candidates");
  std::size_t best = 0;
  for (std::size_t i = 1; i < candidates.size(); ++i)
    if (candidates[i].validation_accuracy > candidates[best].validation_accuracy) best = i;
  return best;
}

}  // namespace ttmoe::training
