// Unit tests of the TTA engine and methods on a toy LN + Linear classifier and on the tiny ViT.

#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "toy_model.hpp"
#include "ttmoe/models/vit.hpp"
#include "ttmoe/tta/tta.hpp"

using namespace ttmoe;
using Toy = test::ToyClassifier<double>;
using ViT = models::VisionTransformer<double>;
using Images = Tensor<double, DynShape<4>>;

namespace {

Images random_images(index_t B, index_t C, index_t H, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> nd(0.0, scale);
  std::vector<double> v(std::size_t(B * C * H * H));
  for (auto& x : v) x = nd(g);
  return Images::from_host(DynShape<4>(B, C, H, H), std::span<const double>(v));
}

Images with_nan(Images x, index_t sample) {
  Images y = x.clone();
  y.data()[sample * (y.numel() / y.extent(0))] = std::nan("");
  return y;
}

/// All parameter values of a model, flattened in visiting order.
template <class M>
std::vector<double> all_params(M& m) {
  std::vector<double> out;
  nn::for_each_parameter(m, [&](const std::string&, auto& t) {
    for (double v : t.to_vector()) out.push_back(v);
  });
  return out;
}

/// Values of the parameters whose name matches `pattern`.
template <class M>
std::vector<double> params_matching(M& m, const std::string& pattern) {
  std::vector<double> out;
  nn::for_each_parameter(m, [&](const std::string& name, auto& t) {
    if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0)
      for (double v : t.to_vector()) out.push_back(v);
  });
  return out;
}

std::vector<std::int64_t> argmax(const Tensor<double, DynShape<2>>& logits) {
  return tta::argmax_rows(logits.to_vector(), logits.extent(0), logits.extent(1));
}

double mean_entropy(const Tensor<double, DynShape<2>>& logits) {
  autograd::NoGrad ng;
  return tta::mean_of(tta::host_values(tta::entropies(logits)));
}

ViT tiny_vit() { return ViT(models::vit_test_tiny(), 11); }

}  // namespace

TEST_CASE("tta: learning rate scales linearly with the batch", "[unit]") {
  tta::LearningRate lr{1e-3, 64, {}};
  CHECK(lr.for_batch(64) == Approx(1e-3));
  CHECK(lr.for_batch(8) == Approx(1.25e-4));
  lr.fixed = 0.5;
  CHECK(lr.for_batch(8) == 0.5);
  CHECK(tta::entropy_margin(1000) == Approx(0.4 * std::log(1000.0)));
}

TEST_CASE("tta: accuracy meter, per-domain split, trace and peak RSS", "[unit]") {
  tta::AccuracyMeter m;
  m.update({1, 2, 3, 4}, {1, 2, 0, 0}, {0, 0, 1, 1});
  m.update({5, 5}, {5, 0}, {1, 2});
  CHECK(m.overall().correct == 3);
  CHECK(m.overall().total == 6);
  CHECK(m.per_domain().at(0).accuracy() == 1.0);
  CHECK(m.per_domain().at(1).accuracy() == Approx(1.0 / 3));
  CHECK(m.per_domain().at(2).accuracy() == 0.0);
  REQUIRE(m.trace().size() == 2);
  CHECK(m.trace()[0] == 0.5);
  CHECK(m.trace()[1] == 0.5);
  CHECK(tta::argmax_rows({std::nan(""), std::nan(""), 0.0, 1.0}, 2, 2) == std::vector<std::int64_t>{-1, 1});
  CHECK(tta::peak_rss_kib() > 0);
  CHECK_THROWS(m.update({1}, {1, 2}, {}));
}

TEST_CASE("tta: prediction is the one made before the update", "[unit]") {
  // Large lr so that each Tent step visibly changes the predictions.
  tta::Tent<Toy, double>::Options opt;
  opt.lr.fixed = 5.0;
  opt.trainable = {"norm.*"};
  std::vector<Images> xs;
  for (int t = 0; t < 4; ++t) xs.push_back(random_images(16, 2, 3, 100 + t));

  // Manual run: the returned logits equal a NoGrad forward of the pre-update model.
  Toy a(18, 5, 1);
  tta::Tent<Toy, double> tent_a(opt);
  std::vector<std::vector<std::int64_t>> labels;
  bool post_differs = false;
  for (auto& x : xs) {
    Tensor<double, DynShape<2>> pre;
    {
      autograd::NoGrad ng;
      pre = a.forward(x);
    }
    auto got = tent_a.adapt_and_predict(a, x);
    REQUIRE(tent_a.last_step().updated);
    CHECK(got.to_vector() == pre.to_vector());
    labels.push_back(argmax(pre));
    autograd::NoGrad ng;
    post_differs |= argmax(a.forward(x)) != labels.back();
  }
  REQUIRE(post_differs);  // otherwise the engine check below could not tell pre from post

  // Engine run on a fresh copy with the pre-update argmax as labels: accuracy must be exactly 1.
  Toy b(18, 5, 1);
  tta::Tent<Toy, double> tent_b(opt);
  std::vector<tta::Batch<double>> batches;
  for (std::size_t t = 0; t < xs.size(); ++t) batches.push_back({xs[t], labels[t], std::vector<int>(16, int(t % 2))});
  std::vector<tta::Progress> seen;
  auto rep = tta::run(b, tent_b, tta::from_vector(batches), [&](const tta::Progress& p) { seen.push_back(p); });
  CHECK(rep.method == "tent");
  CHECK(rep.accuracy == 1.0);
  CHECK(rep.batches == 4);
  CHECK(rep.images == 64);
  CHECK(rep.skipped_batches == 0);
  CHECK(rep.per_domain.at(0).total == 32);
  CHECK(rep.accuracy_trace == std::vector<double>(4, 1.0));
  CHECK(rep.peak_rss_kib > 0);
  REQUIRE(seen.size() == 4);
  CHECK(seen.back().batches == 4);
  CHECK(seen.back().images == 64);
}

TEST_CASE("tta: Tent reduces entropy on a toy problem", "[unit]") {
  Toy m(18, 5, 2);
  tta::Tent<Toy, double>::Options opt;
  opt.lr.fixed = 1.0;
  tta::Tent<Toy, double> tent(opt);  // default patterns: norm.weight / norm.bias
  auto x = random_images(32, 2, 3, 7);
  const double h0 = mean_entropy(tent.adapt_and_predict(m, x));
  for (int i = 0; i < 30; ++i) tent.adapt_and_predict(m, x);
  const double h1 = mean_entropy(tent.adapt_and_predict(m, x));
  INFO("entropy " << h0 << " -> " << h1);
  CHECK(h1 < 0.8 * h0);
  // Only the LayerNorm affine moved.
  CHECK(tent.trainable().params().size() == 2);
}

TEST_CASE("tta: a non-finite loss is skipped, counted and changes nothing", "[unit]") {
  auto clean = random_images(8, 2, 3, 21);
  auto bad = with_nan(clean, 3);
  auto check_method = [&](auto& method, auto& model, const Images& good, const Images& nan_batch) {
    method.adapt_and_predict(model, good);  // creates momentum buffers: a zero-grad step would still move
    REQUIRE_FALSE(method.last_step().skipped_nonfinite);
    const auto before = all_params(model);
    method.adapt_and_predict(model, nan_batch);
    CHECK(method.last_step().skipped_nonfinite);
    CHECK_FALSE(method.last_step().updated);
    CHECK(all_params(model) == before);
  };
  SECTION("tent") {
    Toy m(18, 5, 3);
    tta::Tent<Toy, double> tent;
    check_method(tent, m, clean, bad);
    // Through the engine: counted once.
    Toy m2(18, 5, 3);
    tta::Tent<Toy, double> tent2;
    std::vector<tta::Batch<double>> bs{{clean, std::vector<std::int64_t>(8, 0), {}},
                                       {bad, std::vector<std::int64_t>(8, 0), {}},
                                       {clean, std::vector<std::int64_t>(8, 0), {}}};
    auto rep = tta::run(m2, tent2, tta::from_vector(bs));
    CHECK(rep.skipped_batches == 1);
    CHECK(rep.batches == 3);
  }
  SECTION("eata") {
    Toy m(18, 5, 3);
    tta::EATA<Toy, double>::Options o;
    o.margin_factor = 10;  // keep everything finite so the first batch does update
    tta::EATA<Toy, double> eata(o, {random_images(8, 2, 3, 5)});
    check_method(eata, m, clean, bad);
  }
  SECTION("sar") {
    Toy m(18, 5, 3);
    tta::SAR<Toy, double>::Options o;
    o.trainable = {"norm.*"};
    o.margin_factor = 10;
    tta::SAR<Toy, double> sar(o);
    check_method(sar, m, clean, bad);
  }
  SECTION("moetta") {
    ViT m = tiny_vit();
    tta::MoETTA<ViT, double>::Options o;
    o.num_experts = 3;
    tta::MoETTA<ViT, double> moetta(o);
    auto x = random_images(4, 3, 16, 31);
    check_method(moetta, m, x, with_nan(x, 1));
    CHECK(moetta.entropy_stats().count() == 1);  // the skipped batch left the running mean alone
  }
}

TEST_CASE("tta: MoETTA with no kept sample skips the entropy term", "[unit]") {
  ViT m = tiny_vit();
  tta::MoETTA<ViT, double>::Options o;
  o.num_experts = 3;
  o.fixed_threshold = -1.0;  // no entropy is <= -1
  tta::MoETTA<ViT, double> moetta(o);
  auto x = random_images(6, 3, 16, 41);
  const auto routers0 = params_matching(m, "*.router.*");  // empty before conversion
  CHECK(routers0.empty());
  auto logits = moetta.adapt_and_predict(m, x);
  const auto& info = moetta.last_step();
  CHECK(info.kept == 0);
  CHECK(std::isfinite(info.loss));
  CHECK_FALSE(info.skipped_nonfinite);
  CHECK(info.updated);
  // Only the balance term: loss = alpha * sum of layer balance losses (each >= 1 for top-1 routing).
  CHECK(info.loss >= info.alpha * double(m.moe_layers().size()) - 1e-12);
  {
    autograd::NoGrad ng;  // the layers keep the forward's routing: the same balance loss again
    CHECK(info.loss == Approx(info.alpha * m.balance_loss().item()).epsilon(1e-12));
  }
  // Earlier experts DO get a gradient from the balance loss (they shape the later routers' inputs),
  // but the final norm's experts reach the loss only through the entropy term: they must stay zero.
  for (double v : params_matching(m, "norm.experts.*")) CHECK(v == 0.0);
  // The routers moved (balance gradient).
  tta::MoETTA<ViT, double> fresh(o);
  ViT m2 = tiny_vit();
  fresh.prepare(m2);
  CHECK(params_matching(m, "*.router.*") != params_matching(m2, "*.router.*"));
  CHECK(mean_entropy(logits) > 0);
}

TEST_CASE("tta: MoETTA threshold and alpha are the running mean including the batch", "[unit]") {
  ViT m = tiny_vit();
  tta::MoETTA<ViT, double>::Options o;
  o.num_experts = 3;
  tta::MoETTA<ViT, double> moetta(o);
  std::vector<double> means;
  for (int t = 0; t < 3; ++t) {
    auto logits = moetta.adapt_and_predict(m, random_images(5, 3, 16, 50 + t, 1.0 + t));
    means.push_back(mean_entropy(logits));
    const double running = tta::mean_of(means);
    CHECK(moetta.last_step().threshold == Approx(running).epsilon(1e-12));
    CHECK(moetta.last_step().alpha == Approx(0.2 * running).epsilon(1e-12));
    CHECK(moetta.last_step().kept >= (t == 0 ? 1 : 0));  // batch 1: min(H) <= mean(H)
  }
  // Only routers and experts are trainable: 4 tensors per MoE layer (24 LNs - 1 = 4 in the tiny ViT).
  CHECK(moetta.trainable().params().size() == 4 * m.moe_layers().size());
  CHECK(m.moe_layers().size() == std::size_t(m.num_layernorms() - 1));
}

TEST_CASE("tta: SAR resets when the loss EMA falls below the threshold", "[unit]") {
  Toy m(18, 5, 4);
  tta::SAR<Toy, double>::Options o;
  o.trainable = {"norm.*"};
  o.margin_factor = 10;      // every sample reliable
  o.reset_threshold = 1e9;   // any EMA triggers the recovery
  o.lr.fixed = 0.5;
  tta::SAR<Toy, double> sar(o);
  const auto before = all_params(m);
  sar.adapt_and_predict(m, random_images(8, 2, 3, 61));
  CHECK(sar.last_step().updated);
  CHECK(sar.last_step().reset);
  CHECK(all_params(m) == before);
  CHECK_FALSE(sar.loss_ema().has_value());
  // With the default (facts) threshold no reset on a high-entropy toy batch, and the step applies.
  tta::SAR<Toy, double>::Options o2 = o;
  o2.reset_threshold = 0.005;
  tta::SAR<Toy, double> sar2(o2);
  sar2.adapt_and_predict(m, random_images(8, 2, 3, 61));
  CHECK(sar2.last_step().updated);
  CHECK_FALSE(sar2.last_step().reset);
  CHECK(all_params(m) != before);
}

TEST_CASE("tta: EATA Fisher, filters and no-kept batches", "[unit]") {
  Toy m(18, 5, 5);
  tta::EATA<Toy, double>::Options o;
  tta::EATA<Toy, double> eata(o, {random_images(8, 2, 3, 71), random_images(8, 2, 3, 72)});
  eata.prepare(m);
  REQUIRE(eata.fisher().size() == 2);  // norm.weight, norm.bias
  double fsum = 0;
  for (auto& f : eata.fisher())
    for (double v : f.to_vector()) {
      CHECK(v >= 0);
      fsum += v;
    }
  CHECK(fsum > 0);
  // E0 = 0.4 ln 5 ~ 0.64: a near-uniform toy batch has entropies ~ ln 5, so nothing is reliable.
  const auto before = all_params(m);
  eata.adapt_and_predict(m, random_images(8, 2, 3, 73, 0.01));
  CHECK(eata.last_step().kept == 0);
  CHECK_FALSE(eata.last_step().updated);
  CHECK_FALSE(eata.last_step().skipped_nonfinite);
  CHECK(all_params(m) == before);
}

TEST_CASE("tta: NoAdapt changes nothing and records nothing", "[unit]") {
  Toy m(18, 5, 6);
  tta::NoAdapt<Toy, double> na;
  const auto before = all_params(m);
  auto x = random_images(8, 2, 3, 81);
  auto logits = na.adapt_and_predict(m, x);
  CHECK(logits.extent(0) == 8);
  CHECK_FALSE(logits.requires_grad());
  CHECK(all_params(m) == before);
  auto rep = tta::run(m, na, tta::from_vector<double>({{x, argmax(logits), {}}}));
  CHECK(rep.accuracy == 1.0);
}

TEST_CASE("tta: every method runs a float ViT stream through the engine with default options", "[unit]") {
  using FViT = models::VisionTransformer<float>;
  auto make_source = [] {
    // A callable source (not a BatchSource): exercises the engine overload that wraps it.
    auto n = std::make_shared<int>(0);
    return [n]() -> std::optional<tta::Batch<float>> {
      if (*n == 3) return std::nullopt;
      std::mt19937_64 g(std::uint64_t(90 + *n));
      std::normal_distribution<float> nd;
      std::vector<float> v(4 * 3 * 16 * 16);
      for (auto& x : v) x = nd(g);
      tta::Batch<float> b{Tensor<float, DynShape<4>>::from_host(DynShape<4>(4, 3, 16, 16), std::span<const float>(v)),
                          {0, 1, 2, 3}, {*n, *n, *n, *n}};
      ++*n;
      return b;
    };
  };
  auto check = [&](auto& method) {
    FViT m(models::vit_test_tiny(), 3);
    auto rep = tta::run(m, method, make_source());
    CHECK(rep.batches == 3);
    CHECK(rep.images == 12);
    CHECK(rep.skipped_batches == 0);
    CHECK(rep.per_domain.size() == 3);
    CHECK(rep.images_per_second > 0);
    CHECK(std::isfinite(rep.accuracy));
  };
  tta::NoAdapt<FViT> noadapt;
  check(noadapt);
  tta::Tent<FViT> tent;
  check(tent);
  tta::EATA<FViT> eata({}, {Tensor<float, DynShape<4>>::zeros(DynShape<4>(2, 3, 16, 16))});
  check(eata);
  tta::SAR<FViT> sar;
  check(sar);
  tta::MoETTA<FViT> moetta;
  check(moetta);
  CHECK(moetta.trainable().params().size() == 4 * 4);  // 5 LNs, index 0 plain
}

TEST_CASE("tta: MoETTA's first MoE-LayerNorm index follows the depth, the option overrides it", "[unit]") {
  // The facts' table: ViT-B/16 (12 blocks) keeps index 0 plain, ViT-L/16 (24 blocks) indices 0-14.
  CHECK(tta::default_first_moe_index(12) == 1);
  CHECK(tta::default_first_moe_index(24) == 15);
  CHECK(tta::default_first_moe_index(2) == 1);
  CHECK(tta::default_first_moe_index(6) == 1);
  // Small ViTs of those depths (narrow, so cheap): the conversion really uses the depth's default.
  auto vit_of_depth = [](index_t depth) { return ViT(models::vit_test_tiny(8, 4, 8, depth, 2, 16, 4), 5); };
  auto plain_and_moe = [](const ViT& m) {
    bool seen_moe = false;
    index_t first_moe = m.num_layernorms(), count = 0;  // num_layernorms(): none is MoE
    for (index_t k = 0; k < m.num_layernorms(); ++k)
      if (m.layernorm(k).is_moe()) {
        if (!seen_moe) first_moe = k, seen_moe = true;
        ++count;
      } else {
        CHECK_FALSE(seen_moe);  // plain LayerNorms only before the first MoE one
      }
    return std::pair<index_t, index_t>{first_moe, count};
  };
  tta::MoETTA<ViT, double>::Options o;
  o.num_experts = 2;
  {
    ViT m = vit_of_depth(24);
    tta::MoETTA<ViT, double> moetta(o);
    moetta.prepare(m);
    CHECK(moetta.first_moe_index(m) == 15);
    const auto [first, n] = plain_and_moe(m);
    CHECK(first == 15);  // blocks.7.norm2
    CHECK(m.layernorm_name(first) == "blocks.7.norm2");
    CHECK(n == 49 - 15);
  }
  {
    ViT m = vit_of_depth(12);
    tta::MoETTA<ViT, double> moetta(o);
    moetta.prepare(m);
    const auto [first, n] = plain_and_moe(m);
    CHECK(first == 1);
    CHECK(n == 24);  // the facts: the other 24, including the final norm
  }
  {
    ViT m = vit_of_depth(24);
    tta::MoETTA<ViT, double>::Options over = o;
    over.first_moe_index = 3;
    tta::MoETTA<ViT, double> moetta(over);
    moetta.prepare(m);
    CHECK(moetta.first_moe_index(m) == 3);
    const auto [first, n] = plain_and_moe(m);
    CHECK(first == 3);
    CHECK(n == 49 - 3);
  }
  {
    ViT m = vit_of_depth(12);
    tta::MoETTA<ViT, double>::Options over = o;
    over.first_moe_index = 0;  // an explicit 0 is honoured, not mistaken for "unset"
    tta::MoETTA<ViT, double> moetta(over);
    moetta.prepare(m);
    CHECK(plain_and_moe(m) == std::pair<index_t, index_t>{0, 25});
  }
}

namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

/// Maps `bytes` of fresh anonymous memory, writes every page (so it is resident) and unmaps it:
/// raises VmHWM by about `bytes` and leaves VmRSS where it was.
void touch_and_release(std::size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  std::memset(p, 1, bytes);
  volatile char sink = static_cast<char*>(p)[bytes / 2];
  (void)sink;
  munmap(p, bytes);
}

/// NoAdapt that also touches `bytes` of memory in every step: a method with a known transient peak.
struct MemoryHungry {
  std::size_t bytes;
  tta::StepInfo info;
  std::string name() const { return "hungry"; }
  Tensor<double, DynShape<2>> adapt_and_predict(Toy& m, const Images& x) {
    touch_and_release(bytes);
    autograd::NoGrad ng;
    return m.forward(x);
  }
  const tta::StepInfo& last_step() const { return info; }
};

}  // namespace

TEST_CASE("tta: peak RSS is reset per run, so a run does not report an earlier run's peak", "[unit]") {
  const bool resettable = tta::reset_peak_rss();
  touch_and_release(160 * kMiB);  // an "earlier method" with a large peak
  const std::int64_t earlier_peak = tta::peak_rss_kib();
  REQUIRE(earlier_peak > 0);
  CHECK(tta::current_rss_kib() > 0);
  CHECK(earlier_peak >= tta::current_rss_kib() + std::int64_t(150 * kMiB / 1024));
  Toy m(18, 5, 9);
  MemoryHungry hungry{48 * kMiB, {}};
  std::vector<tta::Batch<double>> bs{{random_images(4, 2, 3, 1), {0, 1, 2, 3}, {}},
                                     {random_images(4, 2, 3, 2), {0, 1, 2, 3}, {}}};
  auto rep = tta::run(m, hungry, tta::from_vector(bs));
  REQUIRE(rep.batches == 2);
  CHECK(rep.start_rss_kib > 0);
  // The run's own transient 48 MiB is in its peak ...
  CHECK(rep.peak_rss_kib >= rep.start_rss_kib + std::int64_t(40 * kMiB / 1024));
  if (resettable) {
    // ... and the earlier 160 MiB is not.
    CHECK(rep.peak_rss_per_run);
    CHECK(rep.peak_rss_kib < earlier_peak - std::int64_t(80 * kMiB / 1024));
    // The reset itself: a fresh high-water mark sits near the current RSS.
    touch_and_release(64 * kMiB);
    const std::int64_t before = tta::peak_rss_kib();
    REQUIRE(tta::reset_peak_rss());
    CHECK(tta::peak_rss_kib() < before - std::int64_t(48 * kMiB / 1024));
  } else {
    WARN("/proc/self/clear_refs not writable here: the peak stays process-wide");
    CHECK_FALSE(rep.peak_rss_per_run);
    CHECK(rep.peak_rss_kib >= earlier_peak);
  }
}
