// Tests of training::train and its pieces on a tiny linear classifier (double precision, so the
// accumulation comparison can be tight): the warm-up + cosine schedule, two half micro-batches vs
// one full batch, a NaN loss, checkpoint + resume reproducing an uninterrupted run bit for bit,
// and typed errors for checkpoints that cannot be resumed from.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/nn/linear.hpp"
#include "ttmoe/nn/loss.hpp"
#include "ttmoe/nn/optim_adam.hpp"
#include "ttmoe/nn/optim_sgd.hpp"
#include "ttmoe/training/loop.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;

namespace {

/// features -> classes, one linear layer.
struct Tiny {
  nn::Linear<double> lin;
  explicit Tiny(std::uint64_t seed) : lin(4, 3, true, seed) {}
  Tensor<double, DynShape<2>> forward(const Tensor<double, DynShape<2>>& x) const { return lin(x); }
  template <class V>
  void visit_parameters(V& v) {
    v.sub("lin", lin);
  }
};

/// Same parameter names as Tiny, another input width: its checkpoint must not load into Tiny.
struct Wider {
  nn::Linear<double> lin{5, 3, true, 1};
  template <class V>
  void visit_parameters(V& v) {
    v.sub("lin", lin);
  }
};

struct Batch {
  Tensor<double, DynShape<2>> x;
  std::vector<std::int64_t> y;
};

/// Rows [first, first + n) of a fixed synthetic data set (a pure function of the row index).
Batch rows(std::size_t first, std::size_t n) {
  std::vector<double> x(n * 4);
  std::vector<std::int64_t> y(n);
  for (std::size_t r = 0; r < n; ++r) {
    const double i = double(first + r);
    for (std::size_t c = 0; c < 4; ++c) x[r * 4 + c] = std::sin(1.3 * i + 0.7 * double(c)) + 0.1 * double(c);
    y[r] = std::int64_t(first + r) % 3;
  }
  return {Tensor<double, DynShape<2>>::from_host(DynShape<2>(index_t(n), 4), std::span<const double>(x)), y};
}

Tensor<double, Shape<>> ce(Tiny& m, const Batch& b) {
  auto labels = IndexTensor<DynShape<1>>::from_host(DynShape<1>(index_t(b.y.size())), std::span<const std::int64_t>(b.y));
  Tensor<double, DynShape<2>> logits = m.forward(b.x);
  return nn::cross_entropy(logits, labels);
}

std::vector<double> flat_params(Tiny& m) {
  std::vector<double> out;
  for (auto& p : nn::named_parameters<double>(m))
    for (double v : p.flat.to_vector()) out.push_back(v);
  return out;
}

std::filesystem::path temp_file(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / "ttmoe_training_loop_test";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir / name);
  return dir / name;
}

}  // namespace

TEST_CASE("training: warm-up then cosine schedule", "[training]") {
  const auto lr = training::warmup_cosine(1.0, 4, 12);
  CHECK(lr(0) == Approx(0.25));
  CHECK(lr(3) == Approx(1.0));
  CHECK(lr(4) == Approx(1.0));                   // cosine starts at the peak
  CHECK(lr(8) == Approx(0.5));                   // half way down
  CHECK(lr(11) == Approx(0.5 * (1 + std::cos(M_PI * 7.0 / 8.0))));
  CHECK(lr(9) < lr(8));
  CHECK_THROWS_AS(training::warmup_cosine(1.0, 5, 5), std::invalid_argument);
  CHECK(training::constant_lr(0.3)(1000) == 0.3);
}

TEST_CASE("training: two half micro-batches give the step of one full batch", "[training]") {
  Tiny full(7), split(7);
  const auto start = flat_params(full);
  typename nn::SGD<double>::Options so;
  so.lr = 0.5, so.momentum = 0.9;
  nn::SGD<double> opt_full(nn::named_parameters<double>(full), so), opt_split(nn::named_parameters<double>(split), so);
  training::LoopOptions o;
  o.total_steps = 3;
  training::train(full, opt_full, [](std::size_t step, std::size_t) { return rows(step * 8, 8); }, ce, o);
  o.accumulation = 2;
  std::size_t calls = 0;
  training::train(split, opt_split,
                  [&](std::size_t step, std::size_t micro) {
                    ++calls;
                    return rows(step * 8 + micro * 4, 4);
                  },
                  ce, o);
  CHECK(calls == 6);
  const auto a = flat_params(full), b = flat_params(split);
  REQUIRE(a.size() == b.size());
  double moved = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i] == Approx(a[i]).epsilon(1e-12).margin(1e-14));
    moved = std::max(moved, std::abs(a[i] - start[i]));
  }
  CHECK(moved > 1e-3);  // the comparison is not between two untouched models
}

TEST_CASE("training: a NaN loss raises NonFiniteLoss naming the step, nothing applied", "[training]") {
  Tiny m(3);
  typename nn::SGD<double>::Options so;
  so.lr = 0.1;
  nn::SGD<double> opt(nn::named_parameters<double>(m), so);
  std::vector<double> before_bad;
  auto loss = [&](Tiny& model, const Batch& b) {
    Tensor<double, Shape<>> l = ce(model, b);
    if (b.y.size() == 5) {  // the poisoned step's batch
      before_bad = flat_params(model);
      return Tensor<double, Shape<>>(l * std::numeric_limits<double>::quiet_NaN());
    }
    return l;
  };
  training::LoopOptions o;
  o.total_steps = 4;
  try {
    training::train(m, opt, [](std::size_t step, std::size_t) { return rows(step * 8, step == 2 ? 5 : 8); }, loss, o);
    FAIL("no exception");
  } catch (const training::NonFiniteLoss& e) {
    CHECK(e.step() == 2);
    CHECK(e.micro() == 0);
    CHECK(std::isnan(e.value()));
    CHECK_THAT(e.what(), Catch::Contains("step 2"));
  }
  CHECK(flat_params(m) == before_bad);
  training::LoopOptions none;
  none.total_steps = 1, none.accumulation = 0;
  CHECK_THROWS_AS(training::train(m, opt, [](std::size_t, std::size_t) { return rows(0, 8); }, ce, none),
                  std::invalid_argument);
}

TEST_CASE("training: an interrupted run resumed from its checkpoint equals the uninterrupted run", "[training]") {
  auto next = [](std::size_t step, std::size_t micro) { return rows(step * 8 + micro * 4, 4); };
  typename nn::Adam<double>::Options ao;
  ao.lr = 0.05, ao.weight_decay = 0.01;
  training::LoopOptions o;
  o.total_steps = 7;
  o.accumulation = 2;
  o.lr = training::warmup_cosine(0.05, 2, 7);

  Tiny whole(11);
  auto opt_whole = nn::AdamW<double>(nn::named_parameters<double>(whole), ao);
  o.checkpoint = temp_file("whole.safetensors");
  const auto r_whole = training::train(whole, opt_whole, next, ce, o);
  CHECK(r_whole.first_step == 0);
  CHECK(r_whole.steps == 7);
  CHECK(std::filesystem::exists(o.checkpoint));  // the final checkpoint

  // Interrupted after step 5 (0-based 4); checkpoints every 2 steps, the last at step 4.
  o.checkpoint = temp_file("interrupted.safetensors");
  o.checkpoint_every = 2;
  {
    Tiny part(11);
    auto opt = nn::AdamW<double>(nn::named_parameters<double>(part), ao);
    training::LoopOptions oi = o;
    oi.progress = [](const training::StepReport& r) {
      if (r.step == 4) throw std::runtime_error("interrupted");
    };
    CHECK_THROWS_WITH(training::train(part, opt, next, ce, oi), "interrupted");
    CHECK_FALSE(std::filesystem::exists(o.checkpoint.string() + ".tmp"));
  }
  // A fresh process: another initialisation, fresh optimiser state; everything comes from the file.
  Tiny resumed(99);
  auto opt = nn::AdamW<double>(nn::named_parameters<double>(resumed), ao);
  const auto r = training::train(resumed, opt, next, ce, o);
  CHECK(r.first_step == 4);
  CHECK(r.steps == 3);
  CHECK(flat_params(resumed) == flat_params(whole));  // bit for bit
  CHECK(opt.steps() == opt_whole.steps());

  // Already complete: nothing left to do.
  const auto again = training::train(resumed, opt, next, ce, o);
  CHECK(again.steps == 0);
}

TEST_CASE("training: checkpoints that cannot be resumed give typed errors", "[training]") {
  Tiny m(5);
  typename nn::SGD<double>::Options so;
  so.lr = 0.1, so.momentum = 0.9;
  nn::SGD<double> opt(nn::named_parameters<double>(m), so);
  const auto plain = temp_file("plain.safetensors");
  nn::save_state(m, plain);  // a model file, no training metadata
  CHECK_THROWS_WITH(training::load_checkpoint(m, opt, plain),
                    Catch::Contains("plain.safetensors") && Catch::Contains(training::kStepKey));

  const auto bad = temp_file("bad_step.safetensors");
  training::save_checkpoint(m, opt, 3, bad, {{training::kStepKey, "three"}});
  CHECK_THROWS_AS(training::load_checkpoint(m, opt, bad), training::CheckpointError);
  CHECK_THROWS_WITH(training::load_checkpoint(m, opt, bad), Catch::Contains("three"));

  // A checkpoint past the run's length.
  const auto ahead = temp_file("ahead.safetensors");
  training::save_checkpoint(m, opt, 9, ahead);
  training::LoopOptions o;
  o.total_steps = 4;
  o.checkpoint = ahead;
  CHECK_THROWS_AS(training::train(m, opt, [](std::size_t, std::size_t) { return rows(0, 4); }, ce, o),
                  training::CheckpointError);

  // Another model's checkpoint: the parameter check names the file.
  Wider wider;
  nn::SGD<double> wopt(nn::named_parameters<double>(wider), so);
  const auto other = temp_file("other.safetensors");
  training::save_checkpoint(wider, wopt, 1, other);
  CHECK_THROWS_AS(training::load_checkpoint(m, opt, other), nn::CheckpointError);
}
