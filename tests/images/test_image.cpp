// Tests of the Image type: stb decoding/encoding, typed errors, PIL-compatible resizing,
// torchvision-compatible crops, planar normalisation.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "synthetic_images.hpp"
#include "ttmoe/data/image_transforms.hpp"
#include "ttmoe/io/image.hpp"

#ifndef TTMOE_IMAGES_PYTHON
#define TTMOE_IMAGES_PYTHON "/usr/bin/python3"
#endif

using ttmoe::io::Image;
using ttmoe::io::ImageError;
using ttmoe::io::ImageErrorKind;
using ttmoe::data::ResizeFilter;
namespace fs = std::filesystem;

namespace {

// A fresh scratch folder per test case; removed when the case ends.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("ttmoe-images-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write_bytes(const fs::path& p, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Image row_image(const std::vector<float>& values) {
  Image im = ttmoe::io::make_image(1, static_cast<int>(values.size()), 1);
  im.pixels = values;
  return im;
}

}  // namespace

TEST_CASE("image: PNG round trip is exact for 8-bit values", "[image]") {
  for (int channels : {1, 3, 4}) {
    const Image src = ttmoe_test::quantized_pattern(17, 23, channels);
    const auto bytes = ttmoe::io::encode_png(src);
    REQUIRE(bytes.size() > 8);
    CHECK(bytes[1] == 'P');
    CHECK(bytes[2] == 'N');
    CHECK(bytes[3] == 'G');
    const Image back = ttmoe::io::decode_image(bytes, 0);
    CHECK(back.height == 17);
    CHECK(back.width == 23);
    CHECK(back.channels == channels);
    CHECK(back.pixels == src.pixels);  // exact: every value is k/255
  }
  ScratchDir dir;
  const Image src = ttmoe_test::quantized_pattern(9, 31, 3);
  ttmoe::io::save_png(src, dir.path / "pattern.png");
  CHECK(ttmoe::io::load_image(dir.path / "pattern.png").pixels == src.pixels);
}

TEST_CASE("image: PNG encoding rounds to the nearest 8-bit level and clamps", "[image]") {
  Image im = row_image({-0.5f, 0.0f, 0.2f, 1.0f / 510.0f, 1.5f, std::nanf("")});
  const Image back = ttmoe::io::decode_image(ttmoe::io::encode_png(im), 1);
  CHECK(back.pixels[0] == 0.0f);
  CHECK(back.pixels[1] == 0.0f);
  CHECK(back.pixels[2] == Approx(51.0 / 255.0));  // 0.2 * 255 = 51
  CHECK(back.pixels[3] == Approx(1.0 / 255.0));    // 0.5 rounds up
  CHECK(back.pixels[4] == 1.0f);
  CHECK(back.pixels[5] == 0.0f);  // NaN encodes as 0 instead of undefined behaviour
}

TEST_CASE("image: JPEG file written by save_jpeg decodes close to the source", "[image]") {
  ScratchDir dir;
  const Image src = ttmoe_test::scene(64, 96);
  const fs::path file = dir.path / "scene.jpg";
  ttmoe::io::save_jpeg(src, file, 95);
  const Image back = ttmoe::io::load_image(file);
  REQUIRE(back.height == 64);
  REQUIRE(back.width == 96);
  REQUIRE(back.channels == 3);
  double mad = 0.0;
  for (std::size_t i = 0; i < src.pixels.size(); ++i) mad += std::fabs(double(src.pixels[i]) - back.pixels[i]);
  mad /= static_cast<double>(src.pixels.size());
  CHECK(mad < 0.01);
  CHECK(mad > 0.0);  // lossy: it did go through the codec

  // Lower quality loses more.
  const Image low = ttmoe::io::decode_image(ttmoe::io::encode_jpeg(src, 10));
  double mad_low = 0.0;
  for (std::size_t i = 0; i < src.pixels.size(); ++i) mad_low += std::fabs(double(src.pixels[i]) - low.pixels[i]);
  CHECK(mad_low / static_cast<double>(src.pixels.size()) > mad);

  // Channel conversion on decode: gray is the luma of the colour image.
  const Image gray = ttmoe::io::load_image(file, 1);
  CHECK(gray.channels == 1);
  CHECK(gray.pixels.size() == 64u * 96u);
  CHECK_THROWS_AS(ttmoe::io::encode_jpeg(src, 0), std::invalid_argument);
  CHECK_THROWS_AS(ttmoe::io::encode_jpeg(src, 101), std::invalid_argument);
}

TEST_CASE("image: a missing file raises ImageError naming the file", "[image]") {
  const fs::path missing = fs::temp_directory_path() / "ttmoe-definitely-missing-image-8d1f.png";
  try {
    (void)ttmoe::io::load_image(missing);
    FAIL("no exception");
  } catch (const ImageError& e) {
    CHECK(e.kind() == ImageErrorKind::Io);
    CHECK(e.source() == missing.string());
    CHECK(std::string(e.what()).find(missing.string()) != std::string::npos);
  }
  const fs::path unwritable = missing.parent_path() / "ttmoe-no-such-folder-8d1f" / "out.png";
  try {
    ttmoe::io::save_png(ttmoe::io::make_image(2, 2, 3), unwritable);
    FAIL("no exception");
  } catch (const ImageError& e) {
    CHECK(e.kind() == ImageErrorKind::Io);
    CHECK(e.source() == unwritable.string());
  }
}

TEST_CASE("image: a corrupt or truncated file raises a decode ImageError naming the file", "[image]") {
  ScratchDir dir;
  const fs::path garbage = dir.path / "garbage.png";
  write_bytes(garbage, std::vector<std::uint8_t>(300, 0x5A));
  try {
    (void)ttmoe::io::load_image(garbage);
    FAIL("no exception");
  } catch (const ImageError& e) {
    CHECK(e.kind() == ImageErrorKind::Decode);
    CHECK(std::string(e.what()).find("garbage.png") != std::string::npos);
  }
  auto png = ttmoe::io::encode_png(ttmoe_test::quantized_pattern(32, 32, 3));
  png.resize(png.size() / 2);
  const fs::path truncated = dir.path / "truncated.png";
  write_bytes(truncated, png);
  CHECK_THROWS_AS(ttmoe::io::load_image(truncated), ImageError);
  CHECK_THROWS_AS(ttmoe::io::load_image(dir.path), ImageError);  // a directory is not an image
  CHECK_THROWS_AS(ttmoe::io::decode_image(std::vector<std::uint8_t>{}), ImageError);
  CHECK_THROWS_AS(ttmoe::io::decode_image(png, 7), std::invalid_argument);
}

TEST_CASE("image: malformed Image values are rejected", "[image]") {
  Image bad{4, 4, 3, std::vector<float>(10)};
  CHECK_THROWS_AS(ttmoe::io::encode_png(bad), std::invalid_argument);
  CHECK_THROWS_AS(ttmoe::data::resize(bad, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(ttmoe::io::make_image(0, 3, 3), std::invalid_argument);
}

TEST_CASE("image: bilinear downscale by 2 uses PIL's widened triangle weights", "[image]") {
  // Scale 2 -> support 2 input pixels; output 0 is centred at input coordinate 1.0 and sees
  // pixels 0,1,2 at distances 0.5,0.5,1.5 -> triangle(d/2) = 3/4,3/4,1/4 -> (3,3,1)/7.
  const std::vector<float> p{0.1f, 0.7f, 0.3f, 0.9f};
  const Image out = ttmoe::data::resize(row_image(p), 1, 2, ResizeFilter::bilinear);
  CHECK(out.pixels[0] == Approx((3 * p[0] + 3 * p[1] + p[2]) / 7.0).epsilon(1e-6));
  CHECK(out.pixels[1] == Approx((p[1] + 3 * p[2] + 3 * p[3]) / 7.0).epsilon(1e-6));

  // 2-D: the filter is separable, so a 4x4 -> 2x2 equals the weights applied along both axes.
  Image im = ttmoe::io::make_image(4, 4, 1);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) im.at(y, x, 0) = static_cast<float>(0.05 * x + 0.2 * y + 0.01 * x * y);
  const double w[2][4] = {{3 / 7.0, 3 / 7.0, 1 / 7.0, 0}, {0, 1 / 7.0, 3 / 7.0, 3 / 7.0}};
  const Image o2 = ttmoe::data::resize(im, 2, 2);
  for (int oy = 0; oy < 2; ++oy)
    for (int ox = 0; ox < 2; ++ox) {
      double expect = 0;
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x) expect += w[oy][y] * w[ox][x] * im.at(y, x, 0);
      CHECK(o2.at(oy, ox, 0) == Approx(expect).epsilon(1e-6));
    }
}

TEST_CASE("image: bilinear upscale interpolates between pixel centres", "[image]") {
  // Output centres of 2 -> 4 sit at input coordinates 0.25, 0.75, 1.25, 1.75 (pixel centres at
  // 0.5 and 1.5): the outer ones clamp, the inner ones mix 3:1.
  const std::vector<float> p{0.2f, 0.6f};
  const Image out = ttmoe::data::resize(row_image(p), 1, 4);
  CHECK(out.pixels[0] == Approx(0.2));
  CHECK(out.pixels[1] == Approx(0.75 * 0.2 + 0.25 * 0.6));
  CHECK(out.pixels[2] == Approx(0.25 * 0.2 + 0.75 * 0.6));
  CHECK(out.pixels[3] == Approx(0.6));
}

TEST_CASE("image: box downscale by an integer factor is the block mean", "[image]") {
  const Image im = ttmoe_test::scene(12, 18);
  const Image out = ttmoe::data::resize(im, 4, 6, ResizeFilter::box);
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x)
      for (int c = 0; c < 3; ++c) {
        double s = 0;
        for (int dy = 0; dy < 3; ++dy)
          for (int dx = 0; dx < 3; ++dx) s += im.at(3 * y + dy, 3 * x + dx, c);
        CHECK(out.at(y, x, c) == Approx(s / 9).epsilon(1e-6));
      }
}

TEST_CASE("image: every filter keeps a constant image constant", "[image]") {
  const Image flat = ttmoe::io::make_image(13, 29, 3, 0.37f);
  for (auto f : {ResizeFilter::box, ResizeFilter::bilinear, ResizeFilter::bicubic})
    for (auto [h, w] : {std::pair{5, 7}, std::pair{40, 61}, std::pair{13, 10}}) {
      const Image out = ttmoe::data::resize(flat, h, w, f);
      CHECK(out.height == h);
      CHECK(out.width == w);
      for (float v : out.pixels) CHECK(v == Approx(0.37f).epsilon(1e-6));
    }
}

TEST_CASE("image: resize agrees with PIL's Image.resize on float images", "[image][pil]") {
  // Independent reference: Pillow's own resampler on mode 'F' (no 8-bit rounding between
  // passes). Needs the interpreter configured for the PyTorch references with Pillow installed.
  const std::string python = TTMOE_IMAGES_PYTHON;
  if (std::system((python + " -c \"import PIL.Image\" >/dev/null 2>&1").c_str()) != 0) {
    WARN("Pillow not available to " << python << "; PIL comparison skipped");
    return;
  }
  ScratchDir dir;
  // One interpreter run for all cases: jobs.txt lists "w h out_w out_h filter in out" per plane.
  const fs::path script = dir.path / "resize.py";
  {
    std::ofstream s(script);
    s << "import sys\nfrom PIL import Image\n"
         "for line in open(sys.argv[1]):\n"
         "    w, h, ow, oh, f, src, dst = line.split()\n"
         "    im = Image.frombytes('F', (int(w), int(h)), open(src, 'rb').read())\n"
         "    open(dst, 'wb').write(im.resize((int(ow), int(oh)), int(f)).tobytes())\n";
  }
  const Image src = ttmoe_test::scene(37, 53);
  struct Case {
    ResizeFilter filter;
    int pil_code;
    int h, w;
  };
  // PIL codes: BILINEAR 2, BICUBIC 3, BOX 4.
  const Case cases[] = {{ResizeFilter::bilinear, 2, 16, 23}, {ResizeFilter::bilinear, 2, 80, 101},
                        {ResizeFilter::bilinear, 2, 50, 20}, {ResizeFilter::bicubic, 3, 16, 23},
                        {ResizeFilter::bicubic, 3, 90, 70},  {ResizeFilter::box, 4, 11, 29},
                        {ResizeFilter::box, 4, 74, 106}};
  {
    std::ofstream jobs(dir.path / "jobs.txt");
    for (int c = 0; c < 3; ++c) {
      std::vector<float> plane(static_cast<std::size_t>(src.height) * src.width);
      for (std::size_t i = 0; i < plane.size(); ++i) plane[i] = src.pixels[i * 3 + static_cast<std::size_t>(c)];
      const fs::path in = dir.path / ("in" + std::to_string(c) + ".raw");
      std::ofstream f(in, std::ios::binary);
      f.write(reinterpret_cast<const char*>(plane.data()), static_cast<std::streamsize>(plane.size() * 4));
      for (std::size_t k = 0; k < std::size(cases); ++k)
        jobs << src.width << " " << src.height << " " << cases[k].w << " " << cases[k].h << " " << cases[k].pil_code
             << " " << in.string() << " "
             << (dir.path / ("out" + std::to_string(k) + "_" + std::to_string(c) + ".raw")).string() << "\n";
    }
  }
  REQUIRE(std::system((python + " " + script.string() + " " + (dir.path / "jobs.txt").string()).c_str()) == 0);
  for (std::size_t k = 0; k < std::size(cases); ++k) {
    const Case& cs = cases[k];
    const Image ours = ttmoe::data::resize(src, cs.h, cs.w, cs.filter);
    for (int c = 0; c < 3; ++c) {
      std::vector<float> ref(static_cast<std::size_t>(cs.h) * cs.w);
      std::ifstream f(dir.path / ("out" + std::to_string(k) + "_" + std::to_string(c) + ".raw"), std::ios::binary);
      f.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(ref.size() * 4));
      REQUIRE(f.gcount() == static_cast<std::streamsize>(ref.size() * 4));
      double worst = 0;
      for (std::size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::fabs(double(ref[i]) - ours.pixels[i * 3 + static_cast<std::size_t>(c)]));
      INFO("filter " << cs.pil_code << " to " << cs.h << "x" << cs.w << " channel " << c);
      CHECK(worst < 1e-5);
    }
  }
}

TEST_CASE("image: resize_shorter_side follows torchvision's Resize(int) size rule", "[image]") {
  const Image wide = ttmoe::io::make_image(300, 400, 3, 0.5f);
  const Image a = ttmoe::data::resize_shorter_side(wide, 256);
  CHECK(a.height == 256);
  CHECK(a.width == 341);  // int(256 * 400 / 300) = int(341.33)
  const Image tall = ttmoe::io::make_image(401, 300, 3, 0.5f);
  const Image b = ttmoe::data::resize_shorter_side(tall, 256);
  CHECK(b.width == 256);
  CHECK(b.height == 342);  // int(256 * 401 / 300) = int(342.19)
  const Image c = ttmoe::data::resize_and_center_crop(wide);
  CHECK(c.height == 224);
  CHECK(c.width == 224);
  CHECK(c.channels == 3);
}

TEST_CASE("image: center_crop rounds the offset half to even like torchvision", "[image]") {
  // Encode the column index in the pixel so the crop offset can be read back.
  auto columns = [](int width) {
    Image im = ttmoe::io::make_image(3, width, 1);
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < width; ++x) im.at(y, x, 0) = static_cast<float>(x);
    return im;
  };
  // round((5 - 2) / 2) = round(1.5) = 2; round((7 - 2) / 2) = round(2.5) = 2; round((8 - 2) / 2) = 3.
  CHECK(ttmoe::data::center_crop(columns(5), 3, 2).at(0, 0, 0) == 2.0f);
  CHECK(ttmoe::data::center_crop(columns(7), 3, 2).at(0, 0, 0) == 2.0f);
  CHECK(ttmoe::data::center_crop(columns(8), 3, 2).at(0, 0, 0) == 3.0f);
  CHECK_THROWS_AS(ttmoe::data::center_crop(columns(5), 3, 6), std::invalid_argument);
  CHECK_THROWS_AS(ttmoe::data::crop(columns(5), 1, 0, 3, 2), std::invalid_argument);
  const Image window = ttmoe::data::crop(ttmoe_test::scene(20, 30), 4, 7, 5, 6);
  CHECK(window.height == 5);
  CHECK(window.width == 6);
  CHECK(window.at(2, 3, 1) == ttmoe_test::scene(20, 30).at(6, 10, 1));
}

TEST_CASE("image: to_chw_normalized writes planar (x - mean) / std", "[image]") {
  const Image im = ttmoe_test::scene(5, 7);
  const std::array<float, 3> mean{0.485f, 0.456f, 0.406f}, sd{0.229f, 0.224f, 0.225f};
  const std::vector<float> chw = ttmoe::data::to_chw_normalized(im, mean, sd);
  REQUIRE(chw.size() == 3u * 5u * 7u);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 7; ++x)
        CHECK(chw[static_cast<std::size_t>((c * 5 + y) * 7 + x)] ==
              Approx((im.at(y, x, c) - mean[static_cast<std::size_t>(c)]) / sd[static_cast<std::size_t>(c)]));
  std::vector<float> small(10);
  CHECK_THROWS_AS(ttmoe::data::to_chw_normalized(im, mean, sd, small), std::invalid_argument);
  CHECK_THROWS_AS(ttmoe::data::to_chw_normalized(ttmoe::io::make_image(2, 2, 1)), std::invalid_argument);
  // The default statistics are torchvision's ImageNet ones.
  CHECK(ttmoe::data::to_chw_normalized(im)[0] == Approx((im.at(0, 0, 0) - 0.485f) / 0.229f));
}
