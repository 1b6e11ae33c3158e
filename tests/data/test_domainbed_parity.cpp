// Parity of the DomainBed data path with its references: DomainBed's split (numpy RandomState, md5 seed
// hash) element for element, torchvision's colour operations and evaluation transform on fixed images,
// and the statistics of RandomResizedCrop's parameters and of the whole training augmentation.
// Fixture: tests/reference/domainbed_torchvision.py (CTest step generate_domainbed_fixtures).

#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include <ttmoe/data/augment.hpp>
#include <ttmoe/data/domainbed.hpp>
#include <ttmoe/data/domainbed_split.hpp>

#include "fixture.hpp"

using namespace ttmoe;
using namespace ttmoe::data;

namespace {
/// The fixture, opened once for every case (it is read-only).
const test::Fixture& fixture() {
  static const test::Fixture f("domainbed_torchvision");
  return f;
}

// [C, H, W] floats -> HWC Image.
io::Image chw_image(const std::vector<float>& v, int c, int h, int w) {
  io::Image im = io::make_image(h, w, c);
  for (int k = 0; k < c; ++k)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) im.at(y, x, k) = v[std::size_t((k * h + y) * w + x)];
  return im;
}

// Largest |ours - reference| with ours HWC and the reference CHW.
double max_diff_chw(const io::Image& ours, const std::vector<float>& ref) {
  double worst = 0;
  for (int k = 0; k < ours.channels; ++k)
    for (int y = 0; y < ours.height; ++y)
      for (int x = 0; x < ours.width; ++x)
        worst = std::max(worst, std::fabs(double(ours.at(y, x, k)) -
                                          double(ref[std::size_t((k * ours.height + y) * ours.width + x)])));
  return worst;
}

io::Image u8_hwc_image(const std::string& name) {
  const auto shape = fixture().shape(name);
  REQUIRE(shape.size() == 3);
  const auto v = fixture().flat<std::uint8_t>(name);
  io::Image im = io::make_image(int(shape[0]), int(shape[1]), int(shape[2]));
  for (std::size_t i = 0; i < v.size(); ++i) im.pixels[i] = float(v[i]) / 255.0f;  // ToTensor
  return im;
}
}  // namespace

TEST_CASE("domainbed layout parity: environments, files and labels in torchvision ImageFolder's order", "[data][domainbed][parity]") {
  // The tree (empty files named to probe case, spaces, non-ASCII, nesting and extensions) was written by
  // the fixture script, which recorded ImageFolder's samples for each environment.
  const auto ref = nlohmann::json::parse(fixture().meta("imagefolder_samples"));
  const std::filesystem::path root = std::string(TTMOE_TEST_DATA_DIR) + "/domainbed_tree";
  const auto ds = scan_domainbed(root, "toy");
  std::vector<std::string> ref_envs;
  for (const auto& [env, samples] : ref.items()) ref_envs.push_back(env);
  std::sort(ref_envs.begin(), ref_envs.end());  // json objects do not keep order; DomainBed sorts
  REQUIRE(ds.domain_names() == ref_envs);
  for (const auto& env : ds.environments) {
    const auto& samples = ref.at(env.name);
    REQUIRE(env.files.size() == samples.size());
    for (std::size_t i = 0; i < env.files.size(); ++i) {
      INFO(env.name << " sample " << i);
      CHECK(std::filesystem::relative(env.files[i].path, root / "toy").string() == samples[i][0].get<std::string>());
      CHECK(env.files[i].label == samples[i][1].get<std::int64_t>());
    }
  }
}

TEST_CASE("domainbed split parity: seed hash and in/out keys equal DomainBed's numpy split", "[data][domainbed][parity]") {
  std::stringstream cases(fixture().meta("split_cases"));
  std::string item;
  int checked = 0;
  while (std::getline(cases, item, ';')) {
    long tr = 0, env = 0, n = 0;
    REQUIRE(std::sscanf(item.c_str(), "%ld,%ld,%ld", &tr, &env, &n) == 3);
    const std::string key = std::to_string(tr) + "_" + std::to_string(env);
    CHECK(std::int64_t(domainbed_seed_hash(tr, env)) == fixture().scalar<std::int64_t>("seed_" + key));
    const auto s = domainbed_split(std::size_t(n), tr, env);
    const auto ref_in = fixture().flat<std::int64_t>("split_" + key + "_" + std::to_string(n) + "_in");
    const auto ref_out = fixture().flat<std::int64_t>("split_" + key + "_" + std::to_string(n) + "_out");
    CHECK(std::vector<std::int64_t>(s.in.begin(), s.in.end()) == ref_in);
    CHECK(std::vector<std::int64_t>(s.out.begin(), s.out.end()) == ref_out);
    ++checked;
  }
  CHECK(checked == 5);
}

TEST_CASE("augment parity: colour operations equal torchvision's float-tensor functions", "[data][augment][parity]") {
  const auto src = chw_image(fixture().flat<float>("colour_src"), 3, 16, 20);
  CHECK(max_diff_chw(adjust_brightness(src, 1.2f), fixture().flat<float>("colour_brightness_1.2")) < 1e-6);
  CHECK(max_diff_chw(adjust_contrast(src, 0.75f), fixture().flat<float>("colour_contrast_0.75")) < 1e-6);
  CHECK(max_diff_chw(adjust_saturation(src, 1.3f), fixture().flat<float>("colour_saturation_1.3")) < 1e-6);
  CHECK(max_diff_chw(adjust_hue(src, 0.2f), fixture().flat<float>("colour_hue_0.2")) < 1e-5);
  CHECK(max_diff_chw(adjust_hue(src, -0.27f), fixture().flat<float>("colour_hue_-0.27")) < 1e-5);
  CHECK(max_diff_chw(grayscale_like(src), fixture().flat<float>("colour_gray")) < 1e-6);
  const auto src1 = chw_image(fixture().flat<float>("colour_src"), 1, 16, 20);  // the red plane alone
  CHECK(max_diff_chw(adjust_contrast(src1, 1.25f), fixture().flat<float>("colour_contrast_1ch_1.25")) < 1e-6);
  CHECK(adjust_saturation(src1, 1.3f) == src1);  // torchvision leaves one channel alone
  CHECK(adjust_hue(src1, 0.2f) == src1);
}

TEST_CASE("augment parity: the evaluation transform matches Resize + ToTensor + Normalize through PIL", "[data][augment][parity]") {
  const io::Image src = u8_hwc_image("eval_src");
  std::vector<float> ours(3 * 24 * 24);
  eval_transform_into(src, EvalTransform{24, imagenet_normalization()}, ours);
  const auto ref = fixture().flat<float>("eval_out");
  REQUIRE(ref.size() == ours.size());
  double worst = 0, mean = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    const double d = std::fabs(double(ours[i]) - double(ref[i]));
    worst = std::max(worst, d);
    mean += d / double(ours.size());
  }
  // PIL rounds to 8 bits after each resize pass; we keep floats: at most ~1/255 apart before dividing by
  // std (0.224), i.e. ~0.018, and about half that on average.
  CHECK(worst < 0.02);
  CHECK(mean < 0.006);
}

TEST_CASE("augment parity: RandomResizedCrop parameter statistics match torchvision's get_params", "[data][augment][parity]") {
  std::mt19937_64 rng(11);
  const int n = 20000;
  std::vector<double> frac, logr;
  for (int k = 0; k < n; ++k) {
    const auto b = random_resized_crop_box(90, 160, rng, 0.7, 1.0);
    frac.push_back(double(b.height) * b.width / (90.0 * 160.0));
    logr.push_back(std::log(double(b.width) / b.height));
  }
  auto stats = [](const std::vector<double>& v) {
    const double m = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return std::array<double, 4>{m, std::sqrt(s / double(v.size())), *std::min_element(v.begin(), v.end()),
                                 *std::max_element(v.begin(), v.end())};
  };
  const auto ours_f = stats(frac), ours_r = stats(logr);
  const auto ref_f = fixture().flat<double>("rrc_frac_stats"), ref_r = fixture().flat<double>("rrc_logratio_stats");
  // Means of 20,000 draws: standard error sd/sqrt(n) for each side; allow 4 combined standard errors.
  CHECK(std::fabs(ours_f[0] - ref_f[0]) < 4 * std::sqrt(2.0) * ref_f[1] / std::sqrt(double(n)));
  CHECK(std::fabs(ours_r[0] - ref_r[0]) < 4 * std::sqrt(2.0) * ref_r[1] / std::sqrt(double(n)));
  CHECK(std::fabs(ours_f[1] - ref_f[1]) < 0.05 * ref_f[1]);
  CHECK(std::fabs(ours_r[1] - ref_r[1]) < 0.05 * ref_r[1]);
  CHECK(std::fabs(ours_f[2] - ref_f[2]) < 0.01);  // the extremes: both reach the edges of the range
  CHECK(std::fabs(ours_f[3] - ref_f[3]) < 0.01);
  CHECK(std::fabs(ours_r[2] - ref_r[2]) < 0.02);
  CHECK(std::fabs(ours_r[3] - ref_r[3]) < 0.02);
}

TEST_CASE("augment parity: the training augmentation's output statistics match torchvision's Compose", "[data][augment][parity]") {
  const io::Image src = u8_hwc_image("aug_src");
  TrainAugment a;
  a.size = 32;
  std::mt19937_64 rng(5);
  const int n = 2000;
  std::array<double, 3> mean_ours{}, mean_ref{}, sd_ours{}, sd_ref{};
  std::vector<double> ours_means(std::size_t(n) * 3);
  const auto ref = fixture().flat<float>("aug_channel_means");  // [2000, 3]
  REQUIRE(ref.size() == std::size_t(n) * 3);
  std::vector<float> out(3 * 32 * 32);
  for (int k = 0; k < n; ++k) {
    augment_into(src, a, rng, out);
    for (std::size_t c = 0; c < 3; ++c) {
      ours_means[std::size_t(k) * 3 + c] =
          std::accumulate(out.begin() + std::ptrdiff_t(c * 1024), out.begin() + std::ptrdiff_t((c + 1) * 1024), 0.0) / 1024.0;
      mean_ours[c] += ours_means[std::size_t(k) * 3 + c] / n;
      mean_ref[c] += ref[std::size_t(k) * 3 + c] / double(n);
    }
  }
  for (int k = 0; k < n; ++k)
    for (std::size_t c = 0; c < 3; ++c) {
      sd_ref[c] += std::pow(ref[std::size_t(k) * 3 + c] - mean_ref[c], 2) / n;
      sd_ours[c] += std::pow(ours_means[std::size_t(k) * 3 + c] - mean_ours[c], 2) / n;
    }
  for (std::size_t c = 0; c < 3; ++c) {
    const double se = std::sqrt(2.0 * sd_ref[c] / n);  // standard error of the difference of two means
    INFO("channel " << c << ": ours " << mean_ours[c] << ", torchvision " << mean_ref[c] << ", se " << se);
    CHECK(std::fabs(mean_ours[c] - mean_ref[c]) < 4 * se);
    // The spread of the image means measures the jitter's strength (the SE of a sd is about 1.6 % here).
    INFO("sd ours " << std::sqrt(sd_ours[c]) << ", torchvision " << std::sqrt(sd_ref[c]));
    CHECK(std::fabs(std::sqrt(sd_ours[c]) / std::sqrt(sd_ref[c]) - 1.0) < 0.1);
  }
}
