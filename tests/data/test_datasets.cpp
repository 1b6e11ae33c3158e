// Class-folder scanning, wnid -> ImageNet index mapping (R/A through the 1000-class list),
// ImageNet-C layout discovery and the decode + preprocess step (with the per-checkpoint normalisation
// presets), on folder trees written here.

#include <catch2/catch.hpp>

#include <array>
#include <fstream>
#include <string>
#include <vector>

#include <ttmoe/data/datasets.hpp>
#include <ttmoe/data/datasets_transform.hpp>

#include "temp_dir.hpp"

using namespace ttmoe;
using namespace ttmoe::data;

namespace {
// 1000 fake wnids "n00000000".."n00000999", sorted = index order.
std::vector<std::string> fake_wnids() {
  std::vector<std::string> w;
  char b[16];
  for (int i = 0; i < 1000; ++i) std::snprintf(b, sizeof b, "n%08d", i), w.emplace_back(b);
  return w;
}
}  // namespace

TEST_CASE("class folders: labels are sorted folder positions, files sorted, non-images skipped", "[data]") {
  TempDir t;
  // Created out of order: the labels must not depend on creation / directory order.
  write_tiny_image(t.path / "n03000000" / "b.JPEG", 0.2f);
  write_tiny_image(t.path / "n01000000" / "x.png", 0.4f);
  write_tiny_image(t.path / "n03000000" / "a.jpg", 0.6f);
  write_tiny_image(t.path / "n02000000" / "z.JPEG", 0.8f);
  std::ofstream(t.path / "n02000000" / "notes.txt") << "not an image";
  std::filesystem::create_directories(t.path / ".hidden");
  const auto ds = scan_class_folders(t.path);
  REQUIRE(ds.classes == std::vector<std::string>{"n01000000", "n02000000", "n03000000"});
  REQUIRE(ds.files.size() == 4);
  CHECK(ds.files[0].label == 0);
  CHECK(ds.files[1].label == 1);
  CHECK(ds.files[2].path.filename() == "a.jpg");
  CHECK(ds.files[2].label == 2);
  CHECK(ds.files[3].path.filename() == "b.JPEG");
}

TEST_CASE("class folders: missing folder and empty folder give clear errors", "[data]") {
  TempDir t;
  CHECK_THROWS_WITH(scan_class_folders(t.path / "nope", {}, "--imagenet-r"),
                    Catch::Contains("--imagenet-r") && Catch::Contains("does not exist"));
  CHECK_THROWS_AS(scan_class_folders(t.path), DatasetError);
}

TEST_CASE("ImageNet-R/A: 200-class folders map through the 1000-class list from a classes file", "[data]") {
  TempDir t;
  const auto wnids = fake_wnids();
  {
    std::ofstream f(t.path / "classes.txt");
    f << "# the 1000 wnids\n";
    for (const auto& w : wnids) f << w << " some name\n";
  }
  write_tiny_image(t.path / "r" / wnids[7] / "1.png", 0.1f);
  write_tiny_image(t.path / "r" / wnids[999] / "2.png", 0.1f);
  write_tiny_image(t.path / "r" / wnids[42] / "3.png", 0.1f);
  ClassListSources src;
  src.classes_file = t.path / "classes.txt";
  const auto classes = imagenet_class_list(src);
  REQUIRE(classes.size() == 1000);
  const auto ds = scan_class_folders(t.path / "r", classes, "--imagenet-r");
  REQUIRE(ds.files.size() == 3);
  CHECK(ds.files[0].label == 7);  // sorted folders: n..07, n..42, n..999
  CHECK(ds.files[1].label == 42);
  CHECK(ds.files[2].label == 999);
  // A folder outside the list is an error naming it.
  write_tiny_image(t.path / "r" / "n99999999" / "4.png", 0.1f);
  CHECK_THROWS_WITH(scan_class_folders(t.path / "r", classes, "--imagenet-r"), Catch::Contains("n99999999"));
}

TEST_CASE("class list: from a 1000-folder data set, else a clear error", "[data]") {
  TempDir t;
  const auto wnids = fake_wnids();
  for (auto it = wnids.rbegin(); it != wnids.rend(); ++it) std::filesystem::create_directories(t.path / "val" / *it);
  std::filesystem::create_directories(t.path / "small" / wnids[0]);
  ClassListSources src;
  src.full_class_dirs = {t.path / "missing", t.path / "small", t.path / "val"};
  CHECK(imagenet_class_list(src) == wnids);
  ClassListSources none;
  none.full_class_dirs = {t.path / "small"};
  CHECK_THROWS_WITH(imagenet_class_list(none), Catch::Contains("--imagenet-classes"));
  // A classes file with duplicates or the wrong count is rejected.
  std::ofstream(t.path / "dup.txt") << "n1\nn2\nn1\n";
  CHECK_THROWS_WITH(read_class_list(t.path / "dup.txt"), Catch::Contains("twice"));
  std::ofstream(t.path / "short.txt") << "n1\nn2\n";
  ClassListSources bad;
  bad.classes_file = t.path / "short.txt";
  CHECK_THROWS_WITH(imagenet_class_list(bad), Catch::Contains("expected 1000"));
}

TEST_CASE("ImageNet-C layout: DIR/<corruption>/<severity>/<wnid>/*.JPEG discovered, missing listed", "[data]") {
  TempDir t;
  for (const char* c : {"fog", "snow"})
    for (int s : {3, 5}) {
      write_tiny_image(imagenet_c_folder(t.path, c, s) / "n02000000" / "img1.JPEG", 0.5f);
      write_tiny_image(imagenet_c_folder(t.path, c, s) / "n01000000" / "img2.JPEG", 0.5f);
    }
  CHECK(discover_imagenet_c(t.path, 5, {"fog", "snow"}) == std::vector<std::string>{"fog", "snow"});
  CHECK_THROWS_WITH(discover_imagenet_c(t.path, 5, {"fog", "frost", "pixelate"}),
                    Catch::Contains("frost/5") && Catch::Contains("pixelate/5"));
  CHECK_THROWS_WITH(discover_imagenet_c(t.path, 4, {"fog"}), Catch::Contains("fog/4"));
  const auto ds = scan_class_folders(imagenet_c_folder(t.path, "fog", 5));
  REQUIRE(ds.files.size() == 2);
  CHECK(ds.files[0].path.filename() == "img2.JPEG");
  CHECK(ds.files[0].label == 0);
}

TEST_CASE("preprocess: resize shorter side + centre crop + per-channel normalisation, CHW", "[data]") {
  TempDir t;
  const auto p = t.path / "a.png";
  io::Image im = io::make_image(20, 30, 3, 0.0f);
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 30; ++x) im.at(y, x, 0) = 1.0f, im.at(y, x, 1) = 0.5f, im.at(y, x, 2) = float(x < 15);
  io::save_png(im, p);
  Preprocess pre{10, 8, 3, {0.5f, 0.5f, 0.5f}, {0.5f, 0.25f, 0.5f}};
  std::vector<float> out(pre.image_floats());
  load_preprocessed(p, pre, out);
  CHECK(out[0] == Approx(1.0f));                 // red: (1 - 0.5) / 0.5
  CHECK(out[64] == Approx(0.0f).margin(0.02));   // green: (0.5 - 0.5) / 0.25, 8-bit rounding
  CHECK(out[128] == Approx(1.0f));               // blue, left half of the crop
  CHECK(out[128 + 7] == Approx(-1.0f));          // blue, right half
  Preprocess too_big{0, 64, 3, {}, {}};
  std::vector<float> o2(too_big.image_floats());
  CHECK_THROWS_WITH(load_preprocessed(p, too_big, o2), Catch::Contains("smaller than"));
  CHECK_THROWS_AS(load_preprocessed(t.path / "missing.png", pre, out), io::ImageError);
}

TEST_CASE("normalisation per checkpoint: half (timm augreg) and ImageNet statistics (torchvision)", "[data]") {
  const auto half = half_normalization(), inet = imagenet_normalization();
  CHECK(half.name == "half");
  CHECK(inet.name == "imagenet");
  CHECK(half.mean == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  CHECK(half.std == std::array<float, 3>{0.5f, 0.5f, 0.5f});
  // torchvision's published ImageNet statistics.
  CHECK(inet.mean == std::array<float, 3>{0.485f, 0.456f, 0.406f});
  CHECK(inet.std == std::array<float, 3>{0.229f, 0.224f, 0.225f});
  CHECK(normalization_by_name("imagenet").mean == inet.mean);
  CHECK(normalization_by_name("half").std == half.std);
  CHECK_THROWS_WITH(normalization_by_name("auto"), Catch::Contains("half") && Catch::Contains("imagenet"));
  CHECK_THAT(inet.describe(), Catch::Contains("0.485") && Catch::Contains("0.225"));
  // The statistics reach the pixels: a flat (1, 0.5, 0) image through both presets.
  TempDir t;
  const auto p = t.path / "flat.png";
  io::Image im = io::make_image(12, 12, 3, 0.0f);
  for (int y = 0; y < 12; ++y)
    for (int x = 0; x < 12; ++x) im.at(y, x, 0) = 1.0f, im.at(y, x, 1) = 0.5f, im.at(y, x, 2) = 0.0f;
  io::save_png(im, p);
  auto pre_i = imagenet_preprocess(inet), pre_h = imagenet_c_preprocess(half);
  CHECK(pre_i.resize_shorter == 256);
  CHECK(pre_h.resize_shorter == 0);
  pre_i.resize_shorter = pre_h.resize_shorter = 0, pre_i.crop = pre_h.crop = 8;  // keep the test image small
  std::vector<float> oi(pre_i.image_floats()), oh(pre_h.image_floats());
  load_preprocessed(p, pre_i, oi);
  load_preprocessed(p, pre_h, oh);
  CHECK(oi[0] == Approx((1.0 - 0.485) / 0.229).epsilon(1e-5));
  CHECK(oi[64] == Approx((0.5 - 0.456) / 0.224).margin(0.02));  // 0.5 stored as 8 bits
  CHECK(oi[128] == Approx((0.0 - 0.406) / 0.225).epsilon(1e-5));
  CHECK(oh[0] == Approx(1.0));
  CHECK(oh[128] == Approx(-1.0));
}
