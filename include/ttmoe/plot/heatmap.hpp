#pragma once
// Heat maps of small square matrices (e.g. expert-by-expert cosine similarity per MoE layer) tiled
// in a grid, each tile titled, with one shared colour bar so tiles are comparable.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/plot/canvas.hpp"

namespace ttmoe::plot {

/// One n x m matrix (row-major) with a title.
struct HeatTile {
  std::string title;
  int rows = 0, cols = 0;
  std::vector<double> values;
};

/// A grid of heat-map tiles sharing the colour range [vmin, vmax].
struct HeatmapGrid {
  std::string title;
  std::vector<HeatTile> tiles;
  double vmin = -1, vmax = 1;
  int columns = 6;      ///< tiles per row
  int tile_px = 150;    ///< side of a tile's matrix area
  /// Optional names of the rows and columns, shared by every tile (e.g. domains and experts): drawn
  /// left of and below each tile's matrix. Empty: no labels. Their counts must match every tile's.
  std::vector<std::string> row_labels, col_labels;
};

/// Renders the grid with a vertical colour bar on the right.
inline io::Image render(const HeatmapGrid& g) {
  if (g.tiles.empty()) throw std::invalid_argument("plot::render(HeatmapGrid): no tiles");
  for (const auto& t : g.tiles)
    if (t.rows <= 0 || t.cols <= 0 || t.values.size() != std::size_t(t.rows) * std::size_t(t.cols))
      throw std::invalid_argument("plot::render(HeatmapGrid): tile '" + t.title + "' has malformed values");
  const auto labels_fit = [&](const std::vector<std::string>& labels, int n) {
    return labels.empty() || int(labels.size()) == n;
  };
  for (const auto& t : g.tiles)
    if (!labels_fit(g.row_labels, t.rows) || !labels_fit(g.col_labels, t.cols))
      throw std::invalid_argument("plot::render(HeatmapGrid): tile '" + t.title + "' is " + std::to_string(t.rows) +
                                  " x " + std::to_string(t.cols) + " but the grid has " +
                                  std::to_string(g.row_labels.size()) + " row and " +
                                  std::to_string(g.col_labels.size()) + " column labels");
  const int s = 2, cols = std::max(1, std::min<int>(g.columns, int(g.tiles.size())));
  const int rows = (int(g.tiles.size()) + cols - 1) / cols;
  // Room for the labels: the widest row label at scale 1 on the left, one text line below.
  int row_label_w = 0;
  for (const auto& l : g.row_labels) row_label_w = std::max(row_label_w, Canvas::text_width(l, 1) + 6);
  const int col_label_h = g.col_labels.empty() ? 0 : Canvas::text_height(1) + 4;
  const int cell_w = row_label_w + g.tile_px + 24, cell_h = g.tile_px + 40 + col_label_h, top = 56, left = 16,
            bar_w = 120;
  const int W = left + cols * cell_w + bar_w, H = top + rows * cell_h + 16;
  Canvas cv(W, H);
  const Rgb ink{0, 0, 0};
  cv.text_centered((left + cols * cell_w) / 2, 14, g.title, ink, s);
  const double span = g.vmax > g.vmin ? g.vmax - g.vmin : 1;
  for (std::size_t k = 0; k < g.tiles.size(); ++k) {
    const auto& t = g.tiles[k];
    const int cx = left + int(k % std::size_t(cols)) * cell_w, cy = top + int(k / std::size_t(cols)) * cell_h;
    cv.text(cx, cy, t.title, ink, 1 + (Canvas::text_width(t.title, 2) <= g.tile_px));
    const int ox = cx + row_label_w, oy = cy + 28;
    for (int i = 0; i < t.rows; ++i)
      for (int j = 0; j < t.cols; ++j) {
        const int xa = ox + j * g.tile_px / t.cols, xb = ox + (j + 1) * g.tile_px / t.cols;
        const int ya = oy + i * g.tile_px / t.rows, yb = oy + (i + 1) * g.tile_px / t.rows;
        cv.fill_rect(xa, ya, xb, yb, viridis((t.values[std::size_t(i * t.cols + j)] - g.vmin) / span));
      }
    cv.outline(ox - 1, oy - 1, ox + g.tile_px + 1, oy + g.tile_px + 1, {0.5f, 0.5f, 0.5f});
    for (int i = 0; i < int(g.row_labels.size()); ++i) {
      const auto& l = g.row_labels[std::size_t(i)];
      const int y_mid = oy + (2 * i + 1) * g.tile_px / (2 * t.rows);
      cv.text(ox - 4 - Canvas::text_width(l, 1), y_mid - Canvas::text_height(1) / 2, l, ink, 1);
    }
    for (int j = 0; j < int(g.col_labels.size()); ++j)
      cv.text_centered(ox + (2 * j + 1) * g.tile_px / (2 * t.cols), oy + g.tile_px + 3, g.col_labels[std::size_t(j)],
                       ink, 1);
  }
  // Colour bar with min / mid / max labels.
  const int bx = left + cols * cell_w + 10, by = top + 28, bh = std::max(120, rows * cell_h - 60);
  for (int y = 0; y < bh; ++y) cv.fill_rect(bx, by + y, bx + 24, by + y + 1, viridis(1.0 - double(y) / (bh - 1)));
  cv.outline(bx - 1, by - 1, bx + 25, by + bh + 1, ink);
  const double step = nice_step(span, 4);
  for (double v = std::ceil(g.vmin / step) * step; v <= g.vmax + step * 1e-9; v += step) {
    const int y = by + int(std::lround((g.vmax - v) / span * (bh - 1)));
    cv.fill_rect(bx + 24, y, bx + 30, y + 1, ink);
    cv.text(bx + 34, y - 10, tick_label(v, step), ink, s);
  }
  return cv.image();
}

/// Renders and writes a PNG.
inline void save(const HeatmapGrid& g, const std::filesystem::path& path) { io::save_png(render(g), path); }

}  // namespace ttmoe::plot
