#pragma once
// Results tables of a DomainBed experiment, printed as DomainBed's collect_results.py prints them:
// one row per algorithm (model), one column per held-out domain with "mean +/- err" over trials, where
// err = 100 * std(acc / sqrt(n)) (numpy's population std, i.e. std / sqrt(n): the standard error DomainBed
// reports), an "Avg" column with the mean of the per-domain means, "X" where a domain has no result,
// every cell left-aligned in a 20-character column (cut at 20) and joined by two spaces.

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tta_table.hpp"

namespace domainbed_common {

/// One model's held-out accuracies (fractions): per_domain[d] has one value per trial (may be empty).
struct TableRow {
  std::string name;
  std::vector<std::vector<double>> per_domain;
};

/// DomainBed's format_mean: "85.5 +/- 0.2" (percent; err = population std / sqrt(n)), or "X" without data.
inline std::string format_mean(const std::vector<double>& accuracies) {
  if (accuracies.empty()) return "X";
  const auto ms = tta_common::mean_std(accuracies);
  return fmt::format("{:.1f} +/- {:.1f}", 100 * ms.mean, 100 * ms.std / std::sqrt(double(accuracies.size())));
}

/// The mean of the per-domain means in percent, or nullopt when a domain has no data ("X").
inline std::optional<double> average_of_domains(const TableRow& row) {
  if (row.per_domain.empty()) return std::nullopt;
  double sum = 0;
  for (const auto& d : row.per_domain) {
    if (d.empty()) return std::nullopt;
    sum += tta_common::mean_std(d).mean;
  }
  return 100 * sum / double(row.per_domain.size());
}

/// The table: a "-------- <title>" line, the header (Algorithm, the domains, Avg) and one line per row.
inline std::string domainbed_table(const std::string& title, const std::vector<std::string>& domains,
                                   const std::vector<TableRow>& rows) {
  constexpr std::size_t width = 20;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      std::string c = cells[i].substr(0, width);
      c.resize(width, ' ');
      s += (i ? "  " : "") + c;
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::vector<std::string> header{"Algorithm"};
  header.insert(header.end(), domains.begin(), domains.end());
  header.push_back("Avg");
  std::string out = "-------- " + title + "\n" + line(header);
  for (const auto& r : rows) {
    std::vector<std::string> cells{r.name};
    for (std::size_t d = 0; d < domains.size(); ++d)
      cells.push_back(format_mean(d < r.per_domain.size() ? r.per_domain[d] : std::vector<double>{}));
    const auto avg = r.per_domain.size() == domains.size() ? average_of_domains(r) : std::nullopt;
    cells.push_back(avg ? fmt::format("{:.1f}", *avg) : "X");
    out += line(cells);
  }
  return out;
}

}  // namespace domainbed_common
