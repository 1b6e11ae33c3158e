#pragma once
// Stream metrics of an online TTA run: cumulative top-1 accuracy (overall, per domain, and after
// every batch for plots), throughput, skipped batches and peak resident memory (per run where the
// kernel lets the peak be reset, see reset_peak_rss).

#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe::tta {

/// Correct / seen counts.
struct Tally {
  std::int64_t correct = 0, total = 0;
  /// correct / total (NaN when nothing was seen).
  double accuracy() const { return total ? double(correct) / double(total) : std::nan(""); }
};

/// Row-wise argmax of host logits [B, C]; a row whose values are all NaN predicts -1 (always wrong).
inline std::vector<std::int64_t> argmax_rows(const std::vector<double>& logits, index_t rows, index_t cols) {
  std::vector<std::int64_t> out(std::size_t(rows), -1);
  for (index_t b = 0; b < rows; ++b) {
    double best = -INFINITY;
    for (index_t c = 0; c < cols; ++c) {
      const double v = logits[std::size_t(b * cols + c)];
      if (!std::isnan(v) && (out[b] < 0 || v > best)) {
        best = v;
        out[b] = c;
      }
    }
  }
  return out;
}

/// Cumulative top-1 accuracy over a stream, overall and per domain id.
class AccuracyMeter {
 public:
  /// Adds one batch; `domains` may be empty (no per-domain split) or one id per sample.
  void update(const std::vector<std::int64_t>& predictions, const std::vector<std::int64_t>& labels,
              const std::vector<int>& domains) {
    if (predictions.size() != labels.size())
      throw std::invalid_argument("AccuracyMeter: " + std::to_string(predictions.size()) + " predictions but " +
                                  std::to_string(labels.size()) + " labels");
    if (!domains.empty() && domains.size() != labels.size())
      throw std::invalid_argument("AccuracyMeter: domain ids must be empty or one per sample");
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const bool ok = predictions[i] == labels[i];
      all_.correct += ok;
      ++all_.total;
      if (!domains.empty()) {
        auto& d = per_domain_[domains[i]];
        d.correct += ok;
        ++d.total;
      }
    }
    trace_.push_back(all_.accuracy());
  }
  /// Overall tally.
  const Tally& overall() const { return all_; }
  /// Tally per domain id.
  const std::map<int, Tally>& per_domain() const { return per_domain_; }
  /// Cumulative accuracy after each batch.
  const std::vector<double>& trace() const { return trace_; }

 private:
  Tally all_;
  std::map<int, Tally> per_domain_;
  std::vector<double> trace_;
};

/// A "Vm...:" field of /proc/self/status in KiB ("VmHWM", "VmRSS"); -1 where unavailable.
inline std::int64_t proc_status_kib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string key = field + ":";
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));  // "VmHWM:   123456 kB"
  return -1;
}

/// Peak resident set size of this process in KiB (VmHWM of /proc/self/status): since the process
/// started, or since the last successful reset_peak_rss(); -1 where unavailable.
inline std::int64_t peak_rss_kib() { return proc_status_kib("VmHWM"); }

/// Current resident set size of this process in KiB (VmRSS); -1 where unavailable.
inline std::int64_t current_rss_kib() { return proc_status_kib("VmRSS"); }

/// Resets the peak resident set size (VmHWM) to the current RSS, so that a later peak_rss_kib()
/// measures only what happened after this call. Linux (since 4.0): writing "5" to
/// /proc/self/clear_refs. Returns false where that is impossible (not Linux, /proc not mounted or
/// read-only, an older kernel rejecting the value); VmHWM then stays the process-wide peak.
inline bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  if (!f) return false;
  f.close();
  return !f.fail();
}

/// Everything a run reports.
struct Report {
  std::string method;
  double accuracy = std::nan("");          ///< cumulative top-1 over the stream
  std::map<int, Tally> per_domain;         ///< by domain id
  std::vector<double> accuracy_trace;      ///< cumulative accuracy after each batch
  std::int64_t images = 0, batches = 0;
  std::int64_t skipped_batches = 0;        ///< batches whose loss was not finite (no update applied)
  std::int64_t resets = 0;                 ///< model resets performed by the method (SAR)
  double seconds = 0, images_per_second = 0;
  std::int64_t peak_rss_kib = -1;          ///< VmHWM at the end of the run (see peak_rss_per_run)
  std::int64_t start_rss_kib = -1;         ///< VmRSS when the run started (model, buffers already held)
  /// True when VmHWM was reset at the start of the run, so peak_rss_kib is this run's own peak
  /// (including what the process already held at its start); false: the process-wide peak so far.
  bool peak_rss_per_run = false;
};

}  // namespace ttmoe::tta
