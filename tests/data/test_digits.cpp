// The four-domain digit set: sources, glyph framing, counts, classes, determinism, and that the written
// folder reads back through the DomainBed scanner. Needs the Debian packages of scripts/install-deps.sh
// (opencv-doc and the fonts-* packages): a missing one FAILS here, naming the package.

#include <catch2/catch.hpp>

#include <cmath>

#include <ttmoe/data/digit_domains.hpp>
#include <ttmoe/data/domainbed.hpp>

#include "temp_dir.hpp"

using namespace ttmoe;
using namespace ttmoe::data;

namespace {
// Small but complete: every domain, every font, a few samples per class.
DigitSetOptions small_options(std::uint64_t seed = 5) {
  DigitSetOptions o;
  o.seed = seed;
  o.per_class = 12;
  return o;
}

double centre_of_box(const PixelBox& b, bool rows) {
  return rows ? (b.top + b.bottom - 1) / 2.0 : (b.left + b.right - 1) / 2.0;
}
}  // namespace

TEST_CASE("digits: OpenCV's sheet gives 5,000 cells, 500 per digit, each with ink", "[data][digits]") {
  const auto cells = opencv_handwritten_cells(opencv_digits_png);
  REQUIRE(cells.size() == 5000);
  for (std::size_t i = 0; i < cells.size(); i += 37) {
    CHECK(cells[i].height == 20);
    CHECK_FALSE(ink_bounding_box(cells[i]).empty());
  }
  CHECK_THROWS_AS(opencv_handwritten_cells("/nonexistent/digits.png"), DatasetError);
}

TEST_CASE("digits: a glyph is framed by its bounding box, centred, longer side 20 of 28", "[data][digits]") {
  std::mt19937_64 rng(1);
  // An off-centre 30x10 bar in a 100x80 image: after framing it is 20 tall, about 7 wide, centred.
  io::Image g = io::make_image(100, 80, 1, 0.0f);
  for (int y = 5; y < 35; ++y)
    for (int x = 60; x < 70; ++x) g.at(y, x, 0) = 1.0f;
  const io::Image f = frame_glyph(g, rng, GlyphJitter{0, 0, 0, 0});
  CHECK(f.height == 28);
  CHECK(f.width == 28);
  const auto b = ink_bounding_box(f, 0.5f);
  CHECK(b.height() == 20);
  CHECK(std::abs(b.width() - 7) <= 1);
  CHECK(std::fabs(centre_of_box(b, true) - 13.5) <= 0.5);
  CHECK(std::fabs(centre_of_box(b, false) - 13.5) <= 0.5);
  CHECK_THROWS_AS(frame_glyph(io::make_image(10, 10, 1, 0.0f), rng), std::invalid_argument);

  // Real font glyphs, no jitter: the same box and centring for a wide and a narrow digit.
  const FontFace face(default_digit_domains()[3].fonts[0].file);
  for (char32_t c : {U'0', U'1', U'8'}) {
    const io::Image fr = frame_glyph(face.render(c), rng, GlyphJitter{0, 0, 0, 0});
    const auto bb = ink_bounding_box(fr, 0.3f);
    CHECK(std::max(bb.height(), bb.width()) >= 19);
    CHECK(std::max(bb.height(), bb.width()) <= 20);
    CHECK(std::fabs(centre_of_box(bb, true) - 13.5) <= 1.0);
    CHECK(std::fabs(centre_of_box(bb, false) - 13.5) <= 1.0);
  }
  // With the default jitter the ink stays inside the frame and near its centre.
  for (int k = 0; k < 50; ++k) {
    const io::Image j = frame_glyph(face.render(U'7'), rng);
    const auto bb = ink_bounding_box(j, 0.3f);
    CHECK(bb.top >= 1);
    CHECK(bb.bottom <= 27);
    CHECK(std::fabs(centre_of_box(bb, false) - 13.5) <= 4.0);
  }
}

TEST_CASE("digits: four domains, ten classes, the asked counts, deterministic from the seed", "[data][digits]") {
  const auto set = build_digit_set(small_options());
  REQUIRE(set.size() == 4);
  const std::vector<std::string> names{"display", "handwritten", "script", "serif"};
  for (std::size_t d = 0; d < 4; ++d) {
    CHECK(set[d].name == names[d]);
    REQUIRE(set[d].images.size() == 120);
    for (std::int64_t c = 0; c < 10; ++c) CHECK(std::count(set[d].labels.begin(), set[d].labels.end(), c) == 12);
    for (const auto& im : set[d].images) {
      REQUIRE(im.height == 28);
      REQUIRE(im.channels == 1);
      REQUIRE_FALSE(ink_bounding_box(im, 0.3f).empty());
    }
  }
  const auto again = build_digit_set(small_options());
  for (std::size_t d = 0; d < 4; ++d) CHECK(again[d].images == set[d].images);
  const auto other = build_digit_set(small_options(6));
  CHECK(other[0].images != set[0].images);
  // The domains look different: mean ink differs between a segment display and handwriting.
  auto mean_ink = [](const DigitDomain& d) {
    double s = 0;
    for (const auto& im : d.images)
      for (float v : im.pixels) s += v;
    return s / double(d.images.size() * 784);
  };
  CHECK(std::fabs(mean_ink(set[0]) - mean_ink(set[1])) > 0.005);

  DigitSetOptions too_many = small_options();
  too_many.per_class = 501;
  too_many.domains = {default_digit_domains()[1]};
  CHECK_THROWS_AS(build_digit_set(too_many), std::invalid_argument);
  DigitSetOptions missing = small_options();
  missing.domains = {{"serif", {{"fonts-nonexistent", "/nonexistent/font.ttf"}}}};
  try {
    build_digit_set(missing);
    FAIL("no error");
  } catch (const FontError& e) {
    CHECK(std::string(e.what()).find("fonts-nonexistent") != std::string::npos);
  }
}

TEST_CASE("digits: written in DomainBed's layout, read back by the scanner, cached by recipe", "[data][digits]") {
  TempDir t;
  DigitSetOptions o = small_options();
  o.per_class = 3;
  const auto root = ensure_digit_dataset(t.path, o);
  const auto ds = scan_domainbed(root, digit_dataset_folder);
  CHECK(ds.domain_names() == std::vector<std::string>{"display", "handwritten", "script", "serif"});
  CHECK(ds.classes == std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"});
  for (const auto& e : ds.environments) CHECK(e.files.size() == 30);
  // The PNG holds the built image up to 8-bit rounding.
  const auto built = build_digit_set(o);
  const io::Image back = io::load_image(ds.environments[2].files[4].path, 1);
  REQUIRE(back.pixels.size() == 784);
  for (std::size_t i = 0; i < 784; ++i) REQUIRE(std::fabs(back.pixels[i] - built[2].images[4].pixels[i]) <= 0.5f / 255.0f + 1e-6f);
  // Same recipe: nothing rebuilt (the marker file survives); another recipe: rebuilt.
  std::ofstream(root / digit_dataset_folder / "marker") << "x";
  ensure_digit_dataset(t.path, o);
  CHECK(std::filesystem::exists(root / digit_dataset_folder / "marker"));
  o.seed = 99;
  ensure_digit_dataset(t.path, o);
  CHECK_FALSE(std::filesystem::exists(root / digit_dataset_folder / "marker"));
}
