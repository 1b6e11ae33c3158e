#pragma once
// Results tables of a test-time-adaptation experiment: one row per method, aggregated over seeds,
// with the gain over No-adapt; and accuracy per domain.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ttmoe/tta/metrics.hpp>
#include <ttmoe/tta/registry.hpp>

namespace tta_common {

/// Table name of a method key (from the registry; an unregistered key prints as itself).
using ttmoe::tta::display_name;

/// Mean and population standard deviation (ddof 0, as numpy's default) of `v`.
struct MeanStd {
  double mean = std::nan(""), std = std::nan("");
};
inline MeanStd mean_std(const std::vector<double>& v) {
  if (v.empty()) return {};
  double s = 0, q = 0;
  for (double x : v) s += x;
  const double m = s / double(v.size());
  for (double x : v) q += (x - m) * (x - m);
  return {m, std::sqrt(q / double(v.size()))};
}

/// Every report of a run, by method then seed order.
using Results = std::map<std::string, std::vector<ttmoe::tta::Report>>;

/// The summary table: method | accuracy mean +- std over seeds | gain over No-adapt (mean +- std of
/// the per-seed differences: seeds share the stream, so the paired std is the honest spread) |
/// images/s | time | peak memory (the largest of the seeds' per-run peaks, MiB; see
/// tta::Report::peak_rss_kib). Without a row of the registry's reference method (No-adapt) the gain
/// column reads n/a. When the kernel did
/// not let the engine reset the peak before a run, a note under the table says the figures are
/// cumulative over the process.
inline std::string summary_table(const std::vector<std::string>& methods, const Results& res, std::size_t seeds) {
  std::string s = fmt::format("| {:<9} | {:>21} | {:>20} | {:>9} | {:>10} | {:>14} |\n", "method",
                              fmt::format("accuracy % ({} seeds)", seeds), "gain vs No-adapt (pt)", "images/s", "time (s)",
                              "peak RSS (MiB)");
  s += "|-----------|-----------------------|-----------------------|-----------|------------|----------------|\n";
  bool cumulative = false;
  const auto base = res.find(ttmoe::tta::reference_method().key);
  for (const auto& m : methods) {
    std::vector<double> acc, gain, ips, sec;
    std::int64_t peak = -1;
    const auto& runs = res.at(m);
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& r = runs[i];
      acc.push_back(100 * r.accuracy), ips.push_back(r.images_per_second), sec.push_back(r.seconds);
      if (base != res.end() && i < base->second.size()) gain.push_back(100 * (r.accuracy - base->second[i].accuracy));
      peak = std::max(peak, r.peak_rss_kib);
      cumulative |= !r.peak_rss_per_run;
    }
    const auto a = mean_std(acc), g = mean_std(gain);
    const std::string peak_s = peak < 0 ? std::string("n/a") : fmt::format("{:.0f}", double(peak) / 1024.0);
    const std::string gain_s = gain.empty() ? std::string("n/a") : fmt::format("{:+.2f} +- {:.2f}", g.mean, g.std);
    s += fmt::format("| {:<9} | {:>13.2f} +- {:<4.2f} | {:>21} | {:>9.1f} | {:>10.1f} | {:>14} |\n", display_name(m), a.mean,
                     a.std, gain_s, mean_std(ips).mean, mean_std(sec).mean, peak_s);
  }
  if (cumulative)
    s += "note: the peak-memory high-water mark could not be reset (/proc/self/clear_refs), so peak RSS is the\n"
         "      process's peak up to the end of each run, including the runs before it.\n";
  return s;
}

/// A leading column of paper_row: header, the row's value, width.
struct RowLabel {
  std::string header, value;
  int width = 9;
};

/// A paper-style results row (Table 1 of MoETTA): the leading label columns, then one column per
/// method holding "accuracy mean +- std" over seeds; header line and row line, each ending in '\n'.
inline std::string paper_row(const std::vector<std::string>& methods, const Results& res,
                             const std::vector<RowLabel>& labels) {
  std::string head = "|", row = "|";
  for (const auto& l : labels) {
    head += fmt::format(" {:<{}} |", l.header, l.width);
    row += fmt::format(" {:<{}} |", l.value, l.width);
  }
  for (const auto& m : methods) {
    std::vector<double> acc;
    for (const auto& r : res.at(m)) acc.push_back(100 * r.accuracy);
    const auto a = mean_std(acc);
    head += fmt::format(" {:>13} |", display_name(m));
    row += fmt::format(" {:>13} |", fmt::format("{:.2f} +- {:.2f}", a.mean, a.std));
  }
  return head + "\n" + row + "\n";
}

/// Per-domain accuracy (%, mean over seeds): one row per domain, one column per method.
inline std::string domain_table(const std::vector<std::string>& methods, const Results& res,
                                const std::vector<std::string>& domains) {
  std::string s = fmt::format("| {:<18} |", "domain");
  for (const auto& m : methods) s += fmt::format(" {:>8} |", display_name(m));
  s += "\n|--------------------|";
  for (std::size_t i = 0; i < methods.size(); ++i) s += "----------|";
  s += "\n";
  for (std::size_t d = 0; d < domains.size(); ++d) {
    s += fmt::format("| {:<18} |", domains[d]);
    for (const auto& m : methods) {
      std::vector<double> v;
      for (const auto& r : res.at(m))
        if (auto it = r.per_domain.find(int(d)); it != r.per_domain.end()) v.push_back(100 * it->second.accuracy());
      s += fmt::format(" {:>8.2f} |", mean_std(v).mean);
    }
    s += "\n";
  }
  return s;
}

}  // namespace tta_common
