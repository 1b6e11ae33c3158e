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
