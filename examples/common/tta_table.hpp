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

namespace tta_common {

/// Table name of a method key.
inline std::string display_name(const std::string& m) {
  if (m == "noadapt") return "No-adapt";
  if (m == "tent") return "Tent";
  if (m == "eata") return "EATA";
  if (m == "sar") return "SAR";
  if (m == "moetta") return "MoETTA";
  return m;
}

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
/// tta::Report::peak_rss_kib). Without a "noadapt" row the gain column reads n/a. When the kernel did
/// not let the engine reset the peak before a run, a note under the table says the figures are
/// cumulative over the process.
inline std::string summary_table(const std::vector<std::string>& methods, const Results& res, std::size_t seeds) {
  std::string s = fmt::format("| {:<9} | {:>21} | {:>20} | {:>9} | {:>10} | {:>14} |\n", "method",
                              fmt::format("accuracy % ({} seeds)", seeds), "gain vs No-adapt (pt)", "images/s", "time (s)",
                              "peak RSS (MiB)");
  s += "|-----------|-----------------------|-----------------------|-----------|------------|----------------|\n";
  bool cumulative = false;
  const auto base = res.find("noadapt");
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
