// Stream composition (domains, tags, settings), seeded shuffling determinism, the domains of each
// setting for every subset of the optional folders (tiny trees written here), and the background
// batch loader (every value exactly once, in order, bounded, errors propagated).

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <set>
#include <stdexcept>
#include <thread>

#include <ttmoe/data/streams.hpp>
#include <ttmoe/data/streams_loader.hpp>

#include "temp_dir.hpp"

using namespace ttmoe::data;

namespace {
std::vector<DomainItems> three_domains() {
  std::vector<DomainItems> d(3);
  const char* names[] = {"fog", "snow", "imagenet-r"};
  std::size_t ref = 0;
  for (int k = 0; k < 3; ++k) {
    d[std::size_t(k)].name = names[k];
    for (int i = 0; i < 10 + 5 * k; ++i) d[std::size_t(k)].items.push_back({ref++, i % 7, 99});
  }
  return d;
}
}  // namespace

TEST_CASE("streams: every item once, tagged with its domain, shuffle determined by the seed", "[data]") {
  const auto d = three_domains();
  const auto a = mix_domains(d, 42), b = mix_domains(d, 42), c = mix_domains(d, 4242);
  REQUIRE(a.items.size() == 45);
  CHECK(a.domain_names == std::vector<std::string>{"fog", "snow", "imagenet-r"});
  CHECK(a.count(0) == 10);
  CHECK(a.count(1) == 15);
  CHECK(a.count(2) == 20);
  std::set<std::size_t> refs;
  for (const auto& it : a.items) {
    refs.insert(it.ref);
    CHECK(it.domain == (it.ref < 10 ? 0 : it.ref < 25 ? 1 : 2));  // domain follows the item
  }
  CHECK(refs.size() == 45);
  auto order = [](const Stream& s) {
    std::vector<std::size_t> v;
    for (const auto& it : s.items) v.push_back(it.ref);
    return v;
  };
  CHECK(order(a) == order(b));
  CHECK(order(a) != order(c));
  const auto blocks = mix_domains(d, 42, false);
  for (std::size_t i = 0; i < blocks.items.size(); ++i) CHECK(blocks.items[i].ref == i);
  // Pinned values: the portable shuffle must not change across standard libraries or releases.
  std::mt19937_64 g(7);
  CHECK(uniform_below(g, 10) < 10);
  std::vector<int> v{0, 1, 2, 3, 4, 5, 6, 7};
  std::mt19937_64 g2(42);
  portable_shuffle(v, g2);
  std::vector<int> v2{0, 1, 2, 3, 4, 5, 6, 7};
  std::mt19937_64 g3(42);
  portable_shuffle(v2, g3);
  CHECK(v == v2);
  CHECK(std::multiset<int>(v.begin(), v.end()) == std::multiset<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("streams: subsample keeps order, is seeded and caps at the size", "[data]") {
  std::vector<StreamItem> items;
  for (std::size_t i = 0; i < 100; ++i) items.push_back({i, 0, 0});
  const auto s = subsample(items, 10, 3);
  REQUIRE(s.size() == 10);
  for (std::size_t i = 1; i < s.size(); ++i) CHECK(s[i - 1].ref < s[i].ref);
  CHECK(subsample(items, 10, 3)[4].ref == s[4].ref);
  CHECK(subsample(items, 0, 3).size() == 100);
  CHECK(subsample(items, 500, 3).size() == 100);
}

TEST_CASE("streams: settings parse and print", "[data]") {
  CHECK(parse_setting("classical") == Setting::classical);
  CHECK(parse_setting("potpourri") == Setting::potpourri);
  CHECK(parse_setting("potpourri+") == Setting::potpourri_plus);
  CHECK(setting_name(Setting::potpourri_plus) == "potpourri+");
  CHECK_THROWS_WITH(parse_setting("mixed"), Catch::Contains("classical"));
}

TEST_CASE("background loader: delivers every value exactly once, in order, with bounded look-ahead", "[data]") {
  std::atomic<std::size_t> produced{0};
  std::atomic<std::size_t> max_ahead{0};
  std::atomic<std::size_t> consumed{0};
  BackgroundLoader<std::vector<int>> loader(
      50,
      [&](std::size_t i) {
        const std::size_t ahead = i - consumed.load();
        if (ahead > max_ahead) max_ahead = ahead;
        ++produced;
        return std::vector<int>{int(i), int(i) * 2};
      },
      3);
  std::size_t n = 0;
  while (auto v = loader.next()) {
    REQUIRE(v->at(0) == int(n));
    CHECK(v->at(1) == 2 * int(n));
    ++n;
    ++consumed;
    if (n % 10 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));  // a slow consumer
  }
  CHECK(n == 50);
  CHECK(produced == 50);
  CHECK(max_ahead <= 4);  // capacity 3 ready + the one being made
  CHECK_FALSE(loader.next().has_value());
}

TEST_CASE("background loader: a producer error reaches the consumer at its position", "[data]") {
  BackgroundLoader<int> loader(10, [](std::size_t i) -> int {
    if (i == 4) throw std::runtime_error("corrupt file 4");
    return int(i);
  });
  for (int i = 0; i < 4; ++i) CHECK(*loader.next() == i);
  CHECK_THROWS_WITH(loader.next(), Catch::Contains("corrupt file 4"));
}

TEST_CASE("background loader: destroying it early stops the producer", "[data]") {
  std::atomic<int> made{0};
  {
    BackgroundLoader<int> loader(1000000, [&](std::size_t i) { return ++made, int(i); }, 2);
    CHECK(*loader.next() == 0);
  }
  CHECK(made < 10);
}

namespace {
/// A tiny ImageNet-C tree: `corruptions` at `severity`, each with two wnid folders of one image.
void write_imagenet_c(const std::filesystem::path& root, const std::vector<std::string>& corruptions, int severity) {
  for (const auto& c : corruptions)
    for (const char* wnid : {"n01000000", "n02000000"})
      write_tiny_image(imagenet_c_folder(root, c, severity) / wnid / "x.JPEG", 0.5f);
}
/// A tiny class-folder data set at `dir`.
void write_class_folders(const std::filesystem::path& dir) {
  write_tiny_image(dir / "n01000000" / "a.png", 0.3f);
  write_tiny_image(dir / "n02000000" / "b.png", 0.7f);
}
std::vector<std::string> names_of(const SettingDomains& s) {
  std::vector<std::string> v;
  for (const auto& d : s.domains) v.push_back(d.name);
  return v;
}
bool mentions(const std::vector<std::string>& warnings, const std::string& what) {
  for (const auto& w : warnings)
    if (w.find(what) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("setting domains: the folders given decide the domains, essentials missing are errors", "[data]") {
  TempDir t;
  const std::vector<std::string> corr{"fog", "snow", "gaussian_noise"};
  write_imagenet_c(t.path / "c", corr, 5);
  for (const char* d : {"r", "sketch", "a", "val"}) write_class_folders(t.path / d);
  SettingFolders all;
  all.imagenet_c = t.path / "c";
  all.imagenet_r = t.path / "r";
  all.imagenet_sketch = t.path / "sketch";
  all.imagenet_a = t.path / "a";
  all.imagenet_val = t.path / "val";
  const std::vector<std::string> c_names = corr;
  auto with = [&](std::vector<std::string> extra) {
    auto v = c_names;
    v.insert(v.end(), extra.begin(), extra.end());
    return v;
  };

  SECTION("classical: the corruptions only; R/Sketch/A given are reported as unused") {
    const auto s = setting_domains(Setting::classical, all, corr, 5);
    CHECK(names_of(s) == c_names);
    for (std::size_t i = 0; i < corr.size(); ++i) {
      CHECK(s.domains[i].kind == DomainKind::corruption);
      CHECK(s.domains[i].folder == imagenet_c_folder(t.path / "c", corr[i], 5));
    }
    CHECK(mentions(s.warnings, "--imagenet-r"));
    CHECK(mentions(s.warnings, "--imagenet-a"));
    CHECK_FALSE(mentions(s.warnings, "--imagenet-val"));  // used for EATA's Fisher, not a domain
    SettingFolders only_c;
    only_c.imagenet_c = all.imagenet_c;
    const auto q = setting_domains(Setting::classical, only_c, corr, 5);
    CHECK(names_of(q) == c_names);
    CHECK(q.warnings.empty());
  }
  SECTION("potpourri: every subset of R/Sketch/A, in the fixed order, each absent one warned about") {
    const char* opt[] = {"--imagenet-r", "--imagenet-sketch", "--imagenet-a"};
    const char* name[] = {"imagenet-r", "imagenet-sketch", "imagenet-a"};
    const DomainKind kind[] = {DomainKind::rendition, DomainKind::sketch, DomainKind::adversarial};
    for (int mask = 1; mask < 8; ++mask) {
      SettingFolders f;
      f.imagenet_c = all.imagenet_c;
      std::vector<std::string> expect;
      if (mask & 1) f.imagenet_r = all.imagenet_r, expect.push_back(name[0]);
      if (mask & 2) f.imagenet_sketch = all.imagenet_sketch, expect.push_back(name[1]);
      if (mask & 4) f.imagenet_a = all.imagenet_a, expect.push_back(name[2]);
      INFO("mask " << mask);
      const auto s = setting_domains(Setting::potpourri, f, corr, 5);
      CHECK(names_of(s) == with(expect));
      for (int k = 0; k < 3; ++k) CHECK(mentions(s.warnings, opt[k]) == !(mask & (1 << k)));
      for (std::size_t i = corr.size(); i < s.domains.size(); ++i) {
        const auto k = std::find(std::begin(name), std::end(name), s.domains[i].name) - std::begin(name);
        REQUIRE(k < 3);
        CHECK(s.domains[i].kind == kind[k]);
        CHECK(needs_class_list(s.domains[i].kind));
      }
    }
    // The validation set is not a potpourri domain.
    CHECK(names_of(setting_domains(Setting::potpourri, all, corr, 5)) ==
          with({"imagenet-r", "imagenet-sketch", "imagenet-a"}));
    // None of the three: potpourri would be classical under another name.
    SettingFolders none;
    none.imagenet_c = all.imagenet_c;
    none.imagenet_val = all.imagenet_val;
    CHECK_THROWS_WITH(setting_domains(Setting::potpourri, none, corr, 5), Catch::Contains("at least one of"));
  }
  SECTION("potpourri+: the clean set last and required; R/Sketch/A optional") {
    const auto s = setting_domains(Setting::potpourri_plus, all, corr, 5);
    CHECK(names_of(s) == with({"imagenet-r", "imagenet-sketch", "imagenet-a", "imagenet-val"}));
    CHECK(s.domains.back().kind == DomainKind::clean);
    CHECK_FALSE(needs_class_list(DomainKind::clean));
    CHECK(s.domains.back().folder == t.path / "val");
    CHECK(s.warnings.empty());
    SettingFolders sketch_val;
    sketch_val.imagenet_c = all.imagenet_c;
    sketch_val.imagenet_sketch = all.imagenet_sketch;
    sketch_val.imagenet_val = all.imagenet_val;
    const auto q = setting_domains(Setting::potpourri_plus, sketch_val, corr, 5);
    CHECK(names_of(q) == with({"imagenet-sketch", "imagenet-val"}));
    CHECK(mentions(q.warnings, "--imagenet-r"));
    CHECK(mentions(q.warnings, "--imagenet-a"));
    CHECK_FALSE(mentions(q.warnings, "--imagenet-sketch"));
    SettingFolders val_only;
    val_only.imagenet_c = all.imagenet_c;
    val_only.imagenet_val = all.imagenet_val;
    CHECK(names_of(setting_domains(Setting::potpourri_plus, val_only, corr, 5)) == with({"imagenet-val"}));
    SettingFolders no_val = all;
    no_val.imagenet_val.reset();
    CHECK_THROWS_WITH(setting_domains(Setting::potpourri_plus, no_val, corr, 5), Catch::Contains("--imagenet-val"));
  }
  SECTION("ImageNet-C is essential for every setting; folders given must exist") {
    SettingFolders no_c = all;
    no_c.imagenet_c.reset();
    for (auto st : {Setting::classical, Setting::potpourri, Setting::potpourri_plus})
      CHECK_THROWS_WITH(setting_domains(st, no_c, corr, 5), Catch::Contains("--imagenet-c"));
    // A corruption missing at that severity is listed.
    CHECK_THROWS_WITH(setting_domains(Setting::classical, all, {"fog", "frost"}, 5), Catch::Contains("frost/5"));
    CHECK_THROWS_WITH(setting_domains(Setting::classical, all, corr, 3), Catch::Contains("fog/3"));
    SettingFolders typo = all;
    typo.imagenet_a = t.path / "no-such-folder";
    CHECK_THROWS_WITH(setting_domains(Setting::potpourri, typo, corr, 5),
                      Catch::Contains("--imagenet-a") && Catch::Contains("does not exist"));
    SettingFolders typo_val = all;
    typo_val.imagenet_val = t.path / "no-such-val";
    CHECK_THROWS_AS(setting_domains(Setting::potpourri_plus, typo_val, corr, 5), DatasetError);
  }
}
