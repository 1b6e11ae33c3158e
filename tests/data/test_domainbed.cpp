// DomainBed layout scanning, the in/out split, the training and evaluation batches, and the training
// augmentation's own invariants. Parity with DomainBed's numpy split and torchvision's transforms is in
// test_domainbed_parity.cpp (needs the reference environment).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include <ttmoe/data/augment.hpp>
#include <ttmoe/data/domainbed.hpp>
#include <ttmoe/data/domainbed_loader.hpp>
#include <ttmoe/data/domainbed_split.hpp>

#include "temp_dir.hpp"

using namespace ttmoe;
using namespace ttmoe::data;
namespace fs = std::filesystem;

namespace {
// ROOT/toy/<domain>/<class>/<i>.png with `per_class` images per class; pixel value encodes (domain, class).
void make_toy(const fs::path& root, const std::vector<std::string>& domains, const std::vector<std::string>& classes,
              int per_class) {
  for (std::size_t d = 0; d < domains.size(); ++d)
    for (std::size_t c = 0; c < classes.size(); ++c)
      for (int i = 0; i < per_class; ++i)
        write_tiny_image(root / "toy" / domains[d] / classes[c] / (std::to_string(i) + ".png"),
                         float(d * 16 + c * 4 + 1) / 255.0f, 12, 10);
}

template <class F>
DomainBedErrorKind error_kind_of(F&& f) {
  try {
    f();
  } catch (const DomainBedError& e) {
    return e.kind();
  }
  FAIL("expected a DomainBedError");
  return DomainBedErrorKind::MissingFolder;
}
}  // namespace

TEST_CASE("domainbed: domains and classes in sorted order, files class by class in ImageFolder order", "[data][domainbed]") {
  TempDir t;
  make_toy(t.path, {"photo", "art", "sketch"}, {"dog", "cat"}, 3);
  write_tiny_image(t.path / "toy" / "art" / "cat" / "nested" / "0.png", 0.5f);  // os.walk goes into sub-folders
  std::ofstream(t.path / "toy" / "art" / "cat" / "notes.txt") << "not an image";
  const auto ds = scan_domainbed(t.path, "toy");
  CHECK(ds.domain_names() == std::vector<std::string>{"art", "photo", "sketch"});
  CHECK(ds.classes == std::vector<std::string>{"cat", "dog"});
  const auto& art = ds.environments[0].files;
  REQUIRE(art.size() == 7);
  CHECK(art[0].path.filename() == "0.png");
  CHECK(art[0].label == 0);
  CHECK(art[3].path.parent_path().filename() == "nested");  // cat/0..2.png, then cat/nested/0.png
  CHECK(art[4].label == 1);
  CHECK(ds.environments[1].files.size() == 6);
}

TEST_CASE("domainbed: known dataset names map to DomainBed's folders and domains", "[data][domainbed]") {
  REQUIRE(find_known_domainbed_dataset("OfficeHome") != nullptr);
  CHECK(find_known_domainbed_dataset("OfficeHome")->folder == "office_home");
  CHECK(find_known_domainbed_dataset("office_home")->name == "OfficeHome");
  CHECK(find_known_domainbed_dataset("TerraIncognita")->domains.size() == 4);
  CHECK(find_known_domainbed_dataset("DomainNet")->domains.size() == 6);
  CHECK(find_known_domainbed_dataset("DomainNet")->num_classes == 345);
  CHECK(find_known_domainbed_dataset("MNIST") == nullptr);
  for (const auto& d : known_domainbed_datasets()) CHECK(std::is_sorted(d.domains.begin(), d.domains.end()));

  TempDir t;  // PACS folder with a domain missing: named in the error
  for (const char* d : {"art_painting", "cartoon", "photo"})
    write_tiny_image(t.path / "PACS" / d / "dog" / "0.png", 0.2f);
  try {
    scan_domainbed(t.path, "PACS");
    FAIL("no error");
  } catch (const DomainBedError& e) {
    CHECK(e.kind() == DomainBedErrorKind::MissingFolder);
    CHECK(std::string(e.what()).find("'sketch'") != std::string::npos);
  }
  write_tiny_image(t.path / "PACS" / "sketch" / "dog" / "0.png", 0.2f);  // all four domains, one class of 7
  try {
    scan_domainbed(t.path, "PACS");
    FAIL("no error");
  } catch (const DomainBedError& e) {
    CHECK(e.kind() == DomainBedErrorKind::ClassMismatch);
    CHECK(std::string(e.what()).find("has 7 classes") != std::string::npos);
  }
}

TEST_CASE("domainbed: layout errors are typed and name the domain and class", "[data][domainbed]") {
  TempDir t;
  CHECK(error_kind_of([&] { scan_domainbed(t.path, "absent"); }) == DomainBedErrorKind::MissingFolder);

  make_toy(t.path, {"a", "b"}, {"x", "y"}, 2);
  fs::create_directories(t.path / "toy" / "c");  // a domain with no class folder
  CHECK(error_kind_of([&] { scan_domainbed(t.path, "toy"); }) == DomainBedErrorKind::EmptyDomain);
  fs::create_directories(t.path / "toy" / "c" / "x");  // ... then with an empty class folder
  write_tiny_image(t.path / "toy" / "c" / "y" / "0.png", 0.1f);
  try {
    scan_domainbed(t.path, "toy");
    FAIL("no error");
  } catch (const DomainBedError& e) {
    CHECK(e.kind() == DomainBedErrorKind::EmptyDomain);
    CHECK(std::string(e.what()).find("'x'") != std::string::npos);
  }
  fs::remove_all(t.path / "toy" / "c" / "x");  // now c lacks class x: labels would shift
  try {
    scan_domainbed(t.path, "toy");
    FAIL("no error");
  } catch (const DomainBedError& e) {
    CHECK(e.kind() == DomainBedErrorKind::ClassMismatch);
    CHECK(std::string(e.what()).find("'x' missing from 'c'") != std::string::npos);
  }
}

TEST_CASE("domainbed: test env out of range is a typed error, training envs are the others", "[data][domainbed]") {
  CHECK(training_environments(2, 4) == std::vector<std::size_t>{0, 1, 3});
  CHECK(error_kind_of([] { check_test_env(4, 4); }) == DomainBedErrorKind::TestEnvRange);
  CHECK(error_kind_of([] { check_test_env(-1, 4); }) == DomainBedErrorKind::TestEnvRange);
  try {
    check_test_env(7, 4);
  } catch (const DomainBedError& e) {
    CHECK(std::string(e.what()) == "--test-env 7 is out of range: the dataset has 4 domains (0..3)");
  }
}

TEST_CASE("domainbed split: 80/20, disjoint, covering, deterministic, different per env and trial", "[data][domainbed]") {
  for (std::size_t n : {0u, 1u, 4u, 5u, 97u, 1000u}) {
    const auto s = domainbed_split(n, 0, 1);
    CHECK(s.out.size() == std::size_t(double(n) * 0.2));
    CHECK(s.in.size() + s.out.size() == n);
    std::set<std::size_t> all(s.in.begin(), s.in.end());
    all.insert(s.out.begin(), s.out.end());
    CHECK(all.size() == n);  // disjoint and covering
    if (n) CHECK(*all.rbegin() == n - 1);
    CHECK(domainbed_split(n, 0, 1).in == s.in);
  }
  const auto a = domainbed_split(1000, 0, 0), b = domainbed_split(1000, 0, 1), c = domainbed_split(1000, 1, 0);
  CHECK(a.out != b.out);
  CHECK(a.out != c.out);
  CHECK(domainbed_split(10, 0, 0, 0.5).out.size() == 5);
  CHECK_THROWS_AS(domainbed_split(10, 0, 0, 1.5), std::invalid_argument);
}

TEST_CASE("domainbed seed hash: DomainBed's md5 of the tuple repr, mod 2^31", "[data][domainbed]") {
  // Values printed by DomainBed's misc.seed_hash (Python hashlib) for these tuples.
  CHECK(domainbed_seed_hash(0, 1) == 1514274641u);
  CHECK(md5_digest("").at(0) == 0xd4);  // md5("") = d41d8cd98f00b204e9800998ecf8427e
  CHECK(md5_digest("").at(15) == 0x7e);
}

TEST_CASE("domainbed batches: 32 per training domain, labels and domains match the files, reproducible", "[data][domainbed]") {
  TempDir t;
  make_toy(t.path, {"a", "b", "c"}, {"x", "y"}, 6);
  const auto ds = scan_domainbed(t.path, "toy");
  const auto splits = split_environments(ds, 0);
  TrainingStreamConfig cfg;
  cfg.test_env = 1;
  cfg.steps = 3;
  cfg.augment.size = 8;
  cfg.augment.norm = half_normalization();
  cfg.augment.brightness = cfg.augment.contrast = cfg.augment.saturation = cfg.augment.hue = 0;
  cfg.augment.grayscale_p = 0;
  auto stream = training_stream(ds, splits, cfg);
  std::vector<ImageBatch> got;
  while (auto b = stream.next()) got.push_back(std::move(*b));
  REQUIRE(got.size() == 3);
  const auto& b0 = got[0];
  REQUIRE(b0.size() == 64);
  CHECK(b0.images.size() == 64u * 3 * 8 * 8);
  for (std::size_t i = 0; i < 64; ++i) {
    CHECK(b0.domains[i] == (i < 32 ? 0 : 2));
    // A constant image stays constant under crop/flip: its value says which domain and class it came from.
    const float v = b0.images[i * 192] * 0.5f + 0.5f;
    const float expect = float(b0.domains[i] * 16 + b0.labels[i] * 4 + 1) / 255.0f;
    CHECK(std::fabs(v - expect) < 1e-5f);
  }
  CHECK(training_batch(ds, splits, cfg, 1).images == got[1].images);  // step-addressed: a resume sees the same
  CHECK(got[0].images != got[1].images);
  auto resumed = training_stream(ds, splits, cfg, 2);
  CHECK(resumed.size() == 1);
  CHECK(resumed.next()->images == got[2].images);
  cfg.test_env = 3;
  CHECK_THROWS_AS(training_stream(ds, splits, cfg), DomainBedError);
}

TEST_CASE("domainbed batches: training draws only from the 'in' split, evaluation streams a subset in order", "[data][domainbed]") {
  TempDir t;
  // One class, 40 images per domain, each a constant gray that encodes its file index.
  for (const char* d : {"a", "b"})
    for (int i = 0; i < 40; ++i) {
      char name[16];
      std::snprintf(name, sizeof name, "%02d.png", i);
      write_tiny_image(t.path / "toy" / d / "x" / name, float(i + 1) / 255.0f, 6, 6);
    }
  const auto ds = scan_domainbed(t.path, "toy");
  const auto splits = split_environments(ds, 3);
  REQUIRE(splits[1].out.size() == 8);
  TrainingStreamConfig cfg;
  cfg.test_env = 0;
  cfg.augment.size = 4;
  cfg.augment.norm = half_normalization();
  cfg.augment.brightness = cfg.augment.contrast = cfg.augment.saturation = cfg.augment.hue = 0;
  std::set<std::size_t> drawn;
  for (std::size_t step = 0; step < 20; ++step) {
    const auto b = training_batch(ds, splits, cfg, step);
    REQUIRE(b.size() == 32);
    for (std::size_t i = 0; i < 32; ++i) drawn.insert(std::size_t(std::lround((b.images[i * 48] * 0.5f + 0.5f) * 255.0f)) - 1);
  }
  const std::set<std::size_t> in(splits[1].in.begin(), splits[1].in.end());
  CHECK(std::includes(in.begin(), in.end(), drawn.begin(), drawn.end()));
  CHECK(drawn.size() == in.size());  // 640 draws with replacement reach all 32 'in' images

  auto ev = evaluation_stream(ds, 1, splits[1].out, EvalTransform{4, half_normalization()}, 3, 3);
  CHECK(ev.size() == 3);  // 8 images in batches of 3
  std::vector<std::size_t> seen;
  while (auto b = ev.next())
    for (std::size_t i = 0; i < b->size(); ++i) seen.push_back(std::size_t(std::lround((b->images[i * 48] * 0.5f + 0.5f) * 255.0f)) - 1);
  CHECK(seen == splits[1].out);
}

TEST_CASE("domainbed batches: an unreadable image fails the batch with the file's name", "[data][domainbed]") {
  TempDir t;
  make_toy(t.path, {"a", "b"}, {"x"}, 2);
  std::ofstream(t.path / "toy" / "a" / "x" / "broken.jpg") << "not a jpeg";
  const auto ds = scan_domainbed(t.path, "toy");
  REQUIRE(ds.environments[0].files.size() == 3);
  const std::vector<std::size_t> all{0, 1, 2};
  try {
    evaluation_batch(ds, 0, all, EvalTransform{8, half_normalization()}, 3, 8, 0);
    FAIL("no error");
  } catch (const io::ImageError& e) {
    CHECK(e.kind() == io::ImageErrorKind::Decode);
    CHECK(e.source().find("broken.jpg") != std::string::npos);
  }
  const auto ok = evaluation_batch(ds, 1, {0, 1}, EvalTransform{8, half_normalization()}, 3, 8, 0);
  CHECK(ok.size() == 2);
  // Through the background loader the error arrives at the batch that needed the file.
  auto ev = evaluation_stream(ds, 0, all, EvalTransform{8, half_normalization()}, 3, 2);
  CHECK(ev.next()->size() == 2);  // 0.png, 1.png
  CHECK_THROWS_AS(ev.next(), io::ImageError);
}

TEST_CASE("augment: crop box inside the image with area fraction and ratio in range", "[data][augment]") {
  std::mt19937_64 rng(7);
  for (int k = 0; k < 2000; ++k) {
    const auto b = random_resized_crop_box(90, 160, rng, 0.7, 1.0);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left >= 0);
    REQUIRE(b.top + b.height <= 90);
    REQUIRE(b.left + b.width <= 160);
    const double frac = double(b.height) * b.width / (90.0 * 160.0);
    // Rounding each side moves the area by at most about a side's length.
    REQUIRE(frac > 0.7 - 0.03);
    REQUIRE(frac <= 1.0);
  }
  // A very wide image: no try fits, the fallback keeps the ratio at 4/3 and centres the window.
  const auto f = random_resized_crop_box(10, 1000, rng, 0.99, 1.0);
  CHECK(f.height == 10);
  CHECK(f.width == 13);
  CHECK(f.left == (1000 - 13) / 2);
}

TEST_CASE("augment: output shape, range, flip and grayscale probabilities", "[data][augment]") {
  io::Image im = io::make_image(40, 50, 3);
  for (int y = 0; y < 40; ++y)
    for (int x = 0; x < 50; ++x) {
      im.at(y, x, 0) = float(x) / 49.0f;
      im.at(y, x, 1) = float(y) / 39.0f;
      im.at(y, x, 2) = 0.3f;
    }
  TrainAugment a;
  a.size = 24;
  std::mt19937_64 rng(3);
  int gray = 0;
  const int n = 600;
  for (int k = 0; k < n; ++k) {
    const io::Image x = augment_image(im, a, rng);
    REQUIRE(x.height == 24);
    REQUIRE(x.channels == 3);
    for (float v : x.pixels) REQUIRE((v >= 0.0f && v <= 1.0f));
    bool is_gray = true;
    for (std::size_t i = 0; i < x.pixels.size(); i += 3)
      is_gray = is_gray && x.pixels[i] == x.pixels[i + 1] && x.pixels[i + 1] == x.pixels[i + 2];
    gray += is_gray;
  }
  // RandomGrayscale(0.1): binomial(600, 0.1) has sd 7.3; allow 4 sd.
  CHECK(std::abs(gray - 60) < 30);
  a.brightness = a.contrast = a.saturation = a.hue = 0;
  a.grayscale_p = 0;
  a.scale_min = 1.0;  // full crop: only the flip remains (plus a 50x40 -> 24x24 resize)
  int flipped = 0;
  for (int k = 0; k < n; ++k) {
    const io::Image x = augment_image(im, a, rng);
    flipped += x.at(0, 0, 0) > x.at(0, 23, 0);
  }
  CHECK(std::abs(flipped - 300) < 50);  // binomial(600, 0.5): sd 12.2
}
