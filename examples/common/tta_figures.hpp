#pragma once
// Figures of a test-time-adaptation experiment shared by the paper examples: the cumulative
// accuracy over the stream, one line per method (legend names from the method registry).

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <ttmoe/plot/lines.hpp>
#include <ttmoe/tta/metrics.hpp>
#include <ttmoe/tta/registry.hpp>

namespace tta_common {

/// Cumulative accuracy over the stream, one line per method (the given seed's reports).
/// `reports[k]` is method `methods[k]`'s run; `batch` converts batch indices into images seen.
inline void save_cumulative_accuracy(const std::vector<std::string>& methods,
                                     const std::vector<ttmoe::tta::Report>& reports, std::int64_t batch,
                                     const std::filesystem::path& path, const std::string& title) {
  ttmoe::plot::LinePlot p;
  p.title = title;
  p.xlabel = "images seen";
  p.ylabel = "cumulative accuracy (%)";
  for (std::size_t k = 0; k < methods.size(); ++k) {
    ttmoe::plot::Series s{ttmoe::tta::display_name(methods[k]), {}, {}, {}};
    const auto& r = reports[k];
    for (std::size_t i = 0; i < r.accuracy_trace.size(); ++i) {
      s.x.push_back(double(std::min<std::int64_t>(std::int64_t(i + 1) * batch, r.images)));
      s.y.push_back(100 * r.accuracy_trace[i]);
    }
    p.series.push_back(std::move(s));
  }
  ttmoe::plot::save(p, path);
}

}  // namespace tta_common
