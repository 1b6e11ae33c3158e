#pragma once
// Line charts (e.g. cumulative accuracy over a stream, one line per method) rendered to an Image:
// title, axes with nice ticks, grid, axis labels, coloured lines and a legend box.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ttmoe/plot/canvas.hpp"

namespace ttmoe::plot {

/// One line: y values at x = x0 + i * dx (or at explicit xs when given).
struct Series {
  std::string name;
  std::vector<double> y;
  std::vector<double> x;  ///< empty: 1, 2, 3, ...
  std::optional<Rgb> colour;  ///< default: palette(index)
};

/// A line chart.
struct LinePlot {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
  std::optional<double> ymin, ymax;  ///< default: the data range, padded
  int width = 960, height = 600;
};

/// Renders `p` (non-finite points are skipped, breaking the line).
inline io::Image render(const LinePlot& p) {
  Canvas cv(p.width, p.height);
  const int s = 2;  // text scale: stb_easy_font is 12 px tall at 1, too small for a figure
  const int left = 110, right = 30, top = 84, bottom = 80;
  const int x0 = left, x1 = p.width - right, y0 = top, y1 = p.height - bottom;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& se : p.series)
    for (std::size_t i = 0; i < se.y.size(); ++i) {
      const double x = se.x.empty() ? double(i + 1) : se.x[i];
      if (!std::isfinite(se.y[i])) continue;
      xmin = std::min(xmin, x), xmax = std::max(xmax, x);
      ymin = std::min(ymin, se.y[i]), ymax = std::max(ymax, se.y[i]);
    }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (xmax <= xmin) xmax = xmin + 1;
  const double pad = std::max(1e-9, (ymax - ymin) * 0.05);
  ymin = p.ymin.value_or(ymin - pad), ymax = p.ymax.value_or(ymax + pad);
  if (ymax <= ymin) ymax = ymin + 1;
  auto px = [&](double x) { return x0 + (x - xmin) / (xmax - xmin) * (x1 - x0); };
  auto py = [&](double y) { return y1 - (y - ymin) / (ymax - ymin) * (y1 - y0); };
  const Rgb grid{0.88f, 0.88f, 0.88f}, ink{0, 0, 0};
  // Grid and ticks.
  const double ys = nice_step(ymax - ymin), xs = nice_step(xmax - xmin, 8);
  for (double v = std::ceil(ymin / ys) * ys; v <= ymax + ys * 1e-9; v += ys) {
    const int y = int(std::lround(py(v)));
    cv.fill_rect(x0, y, x1, y + 1, grid);
    const std::string l = tick_label(v, ys);
    cv.text(x0 - 8 - Canvas::text_width(l, s), y - 10, l, ink, s);
  }
  for (double v = std::ceil(xmin / xs) * xs; v <= xmax + xs * 1e-9; v += xs) {
    const int x = int(std::lround(px(v)));
    cv.fill_rect(x, y0, x + 1, y1, grid);
    cv.text_centered(x, y1 + 8, tick_label(v, xs), ink, s);
  }
  cv.outline(x0, y0, x1 + 1, y1 + 1, ink);
  // Lines.
  for (std::size_t k = 0; k < p.series.size(); ++k) {
    const auto& se = p.series[k];
    const Rgb c = se.colour.value_or(palette(k));
    for (std::size_t i = 1; i < se.y.size(); ++i) {
      const double xa = se.x.empty() ? double(i) : se.x[i - 1], xb = se.x.empty() ? double(i + 1) : se.x[i];
      if (std::isfinite(se.y[i - 1]) && std::isfinite(se.y[i])) cv.line(px(xa), py(se.y[i - 1]), px(xb), py(se.y[i]), c, 3);
    }
    if (se.y.size() == 1 && std::isfinite(se.y[0])) {  // one point: a marker at its own x
      const double xp = px(se.x.empty() ? 1.0 : se.x[0]);
      cv.fill_rect(int(xp) - 5, int(py(se.y[0])) - 5, int(xp) + 6, int(py(se.y[0])) + 6, c);
    }
  }
  // Labels.
  cv.text_centered(p.width / 2, 10, p.title, ink, s);
  cv.text_centered((x0 + x1) / 2, y1 + 44, p.xlabel, ink, s);
  cv.text(8, y0 - 32, p.ylabel, ink, s);  // above the axis: the font cannot rotate
  // Legend (top-right inside the axes, on white so lines under it do not obscure it).
  if (!p.series.empty()) {
    int w = 0;
    for (const auto& se : p.series) w = std::max(w, Canvas::text_width(se.name, s));
    const int lh = 28, bw = w + 70, bh = int(p.series.size()) * lh + 12;
    const int bx = x1 - bw - 10, by = y0 + 10;
    cv.fill_rect(bx, by, bx + bw, by + bh, {1, 1, 1});
    cv.outline(bx, by, bx + bw, by + bh, {0.6f, 0.6f, 0.6f});
    for (std::size_t k = 0; k < p.series.size(); ++k) {
      const int y = by + 8 + int(k) * lh;
      const Rgb c = p.series[k].colour.value_or(palette(k));
      cv.line(bx + 10, y + 11, bx + 50, y + 11, c, 4);
      cv.text(bx + 60, y, p.series[k].name, ink, s);
    }
  }
  return cv.image();
}

/// Renders and writes a PNG.
inline void save(const LinePlot& p, const std::filesystem::path& path) { io::save_png(render(p), path); }

}  // namespace ttmoe::plot
