// The PNG plot helpers: a line chart and a heat-map grid encode to valid PNGs that decode back
// with the expected size and contain the drawn colours.

#include <catch2/catch.hpp>

#include <cmath>

#include <ttmoe/plot/heatmap.hpp>
#include <ttmoe/plot/lines.hpp>

#include "temp_dir.hpp"

using namespace ttmoe;

namespace {
bool has_colour(const io::Image& im, plot::Rgb c, float tol = 0.03f) {
  for (int y = 0; y < im.height; ++y)
    for (int x = 0; x < im.width; ++x)
      if (std::abs(im.at(y, x, 0) - c.r) < tol && std::abs(im.at(y, x, 1) - c.g) < tol && std::abs(im.at(y, x, 2) - c.b) < tol)
        return true;
  return false;
}
}  // namespace

TEST_CASE("plot: line chart writes a PNG that decodes back with the lines and text", "[data]") {
  TempDir t;
  plot::LinePlot p;
  p.title = "cumulative accuracy";
  p.xlabel = "images";
  p.ylabel = "acc (%)";
  p.series.push_back({"Tent", {50, 60, 65, 70}, {}, {}});
  p.series.push_back({"MoETTA", {55, 62, 68, std::nan("")}, {64, 128, 192, 256}, {}});
  p.width = 400, p.height = 300;
  const auto path = t.path / "lines.png";
  plot::save(p, path);
  const io::Image back = io::load_image(path, 3);
  CHECK(back.width == 400);
  CHECK(back.height == 300);
  CHECK(has_colour(back, plot::palette(0)));
  CHECK(has_colour(back, plot::palette(1)));
  CHECK(has_colour(back, {0, 0, 0}));  // axes and text
}

TEST_CASE("plot: heat-map grid with colour bar decodes back, bad tiles are rejected", "[data]") {
  TempDir t;
  plot::HeatmapGrid g;
  g.title = "expert similarity";
  g.columns = 2;
  g.tile_px = 60;
  for (int k = 0; k < 3; ++k) g.tiles.push_back({"layer " + std::to_string(k), 2, 2, {1, -1, std::nan(""), 0}});
  const auto path = t.path / "heat.png";
  plot::save(g, path);
  const io::Image back = io::load_image(path, 3);
  CHECK(back.width > 2 * 60);
  CHECK(back.height > 2 * 60);
  CHECK(has_colour(back, plot::viridis(1.0)));
  CHECK(has_colour(back, plot::viridis(0.0)));
  CHECK(has_colour(back, {0.8f, 0.8f, 0.8f}));  // the NaN cell
  g.tiles.push_back({"bad", 2, 2, {1}});
  CHECK_THROWS_AS(plot::render(g), std::invalid_argument);
  CHECK(plot::Canvas::text_width("abc", 2) == 2 * plot::Canvas::text_width("abc", 1));
}

TEST_CASE("plot: heat-map row and column labels take room and ink, and must match the tiles", "[data]") {
  plot::HeatmapGrid g;
  g.title = "routing";
  g.columns = 1;
  g.tile_px = 60;
  g.tiles.push_back({"block 8", 2, 3, {0, 0.5, 1, 1, 0.5, 0}});
  const io::Image plain = plot::render(g);
  g.row_labels = {"handwriting", "serif"};
  g.col_labels = {"e0", "e1", "e2"};
  const io::Image labelled = plot::render(g);
  // The widest row label is drawn left of the matrix and the column labels under it.
  CHECK(labelled.width >= plain.width + plot::Canvas::text_width("handwriting", 1));
  CHECK(labelled.height >= plain.height + plot::Canvas::text_height(1));
  // Black pixels in the band of the matrix rows (y from the title row + 28 on), x in [x0, x1).
  const auto black_pixels_in = [](const io::Image& im, int x0, int x1) {
    int n = 0;
    for (int y = 56 + 28; y < 56 + 28 + 60; ++y)
      for (int x = x0; x < x1; ++x)
        n += im.at(y, x, 0) < 0.1f && im.at(y, x, 1) < 0.1f && im.at(y, x, 2) < 0.1f;
    return n;
  };
  // Left of the matrix: the row labels' ink; without labels that strip is the matrix (no black in viridis).
  const int strip = plot::Canvas::text_width("handwriting", 1);
  CHECK(black_pixels_in(plain, 16, 16 + strip) == 0);
  CHECK(black_pixels_in(labelled, 16, 16 + strip) > 20);
  g.row_labels = {"only one"};
  CHECK_THROWS_AS(plot::render(g), std::invalid_argument);
  g.row_labels.clear();
  g.col_labels = {"e0", "e1"};
  CHECK_THROWS_AS(plot::render(g), std::invalid_argument);
}
