// Unit tests of nn layers that the parity fixtures do not cover: init ranges, frozen flags,
// parameter naming, dropout / drop_path statistics, the drop-path branch that skips dropped samples,
// timm Mlp shapes, causal-mask behaviour.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>
#include <vector>

#include "ttmoe/nn/checkpoint.hpp"
#include "ttmoe/nn/nn.hpp"
#include "ttmoe/ttmoe.hpp"

using namespace ttmoe;

TEST_CASE("nn: Linear init, names and freezing") {
  nn::Linear<float> lin(16, 4, true, 3);
  const float bound = 1.0f / 4.0f;  // 1/sqrt(16)
  for (float w : lin.weight.to_vector()) REQUIRE(std::abs(w) <= bound);
  auto names = nn::named_parameters<float>(lin);
  REQUIRE(names.size() == 2);
  REQUIRE(names[0].name == "weight");
  REQUIRE(names[1].name == "bias");
  REQUIRE(nn::set_trainable(lin, "bias", false) == 1);
  REQUIRE(nn::trainable_parameters<float>(lin).size() == 1);
  auto x = Tensor<float, DynShape<3>>::full(DynShape<3>(2, 3, 16), 1.0f);
  {
    autograd::Tape tape;
    autograd::backward(tape, sum_all(lin(x)));
  }
  REQUIRE(lin.weight.grad().defined());
  REQUIRE_FALSE(lin.bias.grad().defined());
  nn::Linear<float> nobias(5, 2, false);
  REQUIRE(nn::named_parameters<float>(nobias).size() == 1);
}

TEST_CASE("nn: SkipInit leaves parameters as allocated, on its own thread only, and nests") {
  using V = Tensor<float, DynShape<1>>;
  const float sentinel = 12345.0f;  // outside every init's range
  auto untouched = [&](const V& t) {
    const auto v = t.to_vector();
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == sentinel; });
  };
  const V a = V::full(DynShape<1>(64), sentinel), b = V::full(DynShape<1>(64), sentinel);
  REQUIRE_FALSE(nn::init_skipped());
  {
    nn::SkipInit outer;
    {
      nn::SkipInit inner;
      nn::uniform_(a, 1.0, 1);
      nn::normal_(b, 1.0, 2);
    }
    REQUIRE(nn::init_skipped());  // the outer guard still holds
    nn::uniform_(a, 1.0, 1);
    CHECK(untouched(a));
    CHECK(untouched(b));
    // Another thread draws as usual: the guard is this thread's.
    std::thread([&] { nn::uniform_(a, 1.0, 1); }).join();
    CHECK_FALSE(untouched(a));
  }
  REQUIRE_FALSE(nn::init_skipped());
  nn::normal_(b, 1.0, 2);
  CHECK_FALSE(untouched(b));
  // A layer built under the guard has its shapes, and a strict load still fills every parameter.
  nn::Linear<float> drawn(8, 3, true, 5);
  nn::Linear<float> built = [] {
    nn::SkipInit no_draws;
    return nn::Linear<float>(8, 3, true, 5);
  }();
  CHECK(built.weight.extent(0) == 3);
  CHECK(built.weight.extent(1) == 8);
  CHECK(built.bias.extent(0) == 3);
  CHECK(built.weight.requires_grad());
  const auto file = std::filesystem::temp_directory_path() / "ttmoe_test_skip_init.safetensors";
  nn::save_state(drawn, file);
  nn::load_state(built, file);
  std::filesystem::remove(file);
  CHECK(built.weight.to_vector() == drawn.weight.to_vector());
  CHECK(built.bias.to_vector() == drawn.bias.to_vector());
}

TEST_CASE("nn: Mlp and SwiGLU shapes and names") {
  nn::Mlp<float> mlp(8, 32);
  auto x = Tensor<float, DynShape<3>>::zeros(DynShape<3>(2, 5, 8));
  auto y = mlp(x);
  REQUIRE(y.extents() == std::array<index_t, 3>{2, 5, 8});
  auto names = nn::named_parameters<float>(mlp);
  REQUIRE(names[0].name == "fc1.weight");
  REQUIRE(names[3].name == "fc2.bias");
  nn::SwiGLUMLP<float> sw(8, 12);
  REQUIRE(nn::parameter_count(sw) == 3 * 8 * 12);
}

TEST_CASE("nn: dropout keeps the mean and zeroes about p") {
  nn::Rng rng(42);
  const index_t n = 200000;
  const double p = 0.3;
  auto x = Tensor<double, DynShape<2>>::full(DynShape<2>(n / 100, 100), 2.0);
  auto y = nn::dropout(x, p, true, rng).to_vector();
  double zeros = 0, mean = 0;
  for (double v : y) {
    zeros += (v == 0);
    mean += v;
  }
  zeros /= double(n);
  mean /= double(n);
  REQUIRE(std::abs(zeros - p) < 0.01);   // ~10 standard deviations of a binomial fraction
  REQUIRE(std::abs(mean - 2.0) < 0.03);
  // Eval mode and p = 0 are the identity.
  REQUIRE(nn::dropout(x, p, false, rng).to_vector() == x.to_vector());
  REQUIRE(nn::dropout(x, 0.0, true, rng).to_vector() == x.to_vector());
}

TEST_CASE("nn: dropout masks come from the seed, and neighbouring elements are independent") {
  const double p = 0.5;
  auto x = Tensor<double, DynShape<2>>::full(DynShape<2>(1001, 101), 1.0);  // odd count: the unpaired last draw
  nn::Rng a(5), b(5), c(6);
  const auto ya = nn::dropout(x, p, true, a).to_vector();
  REQUIRE(ya == nn::dropout(x, p, true, b).to_vector());  // same seed, same mask
  REQUIRE(ya != nn::dropout(x, p, true, c).to_vector());
  REQUIRE(ya != nn::dropout(x, p, true, a).to_vector());  // the generator advanced: a fresh mask
  // Draws 2i and 2i+1 share one 64-bit mix: both dropped should happen p^2 of the time.
  double both = 0, kept = 0;
  const std::size_t pairs = ya.size() / 2;
  for (std::size_t i = 0; i < pairs; ++i) both += (ya[2 * i] == 0 && ya[2 * i + 1] == 0);
  for (double v : ya) {
    REQUIRE((v == 0.0 || v == 2.0));
    kept += (v != 0.0);
  }
  REQUIRE(std::abs(both / double(pairs) - p * p) < 0.01);  // ~5 standard deviations
  REQUIRE(std::abs(kept / double(ya.size()) - (1 - p)) < 0.01);
  // dropout is x * dropout_mask from the same draw.
  nn::Rng d(5);
  REQUIRE(nn::dropout_mask<double, cpu>(DynShape<2>(1001, 101), p, d).to_vector() == ya);
}

TEST_CASE("nn: dropout masks are splitmix64's stream, computed inside the pass that uses them") {
  // An independent spelling of the documented stream: draw i is half i % 2 (low first) of
  // splitmix64's output for the counter key + (i / 2) * golden; kept iff draw < keep_p * 2^32.
  auto reference = [](std::uint64_t key, std::size_t n, double p) {
    std::vector<double> m(n);
    const auto threshold = std::uint64_t((1.0 - p) * 4294967296.0);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t z = key + std::uint64_t(i / 2) * 0x9e3779b97f4a7c15ULL;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      const std::uint64_t draw = (i % 2 == 0 ? z : z >> 32) & 0xffffffffULL;
      m[i] = draw < threshold ? 1.0 / (1.0 - p) : 0.0;
    }
    return m;
  };
  const std::size_t threads_before = cpu_backend::num_threads();
  for (std::size_t threads : {std::size_t(1), std::size_t(2), std::size_t(3)}) {
    cpu_backend::set_num_threads(threads);
    for (const auto& [rows, cols] : {std::pair<index_t, index_t>{1001, 101}, {613, 1536}, {3, 5}}) {
      const double p = 0.1;
      const std::size_t n = std::size_t(rows * cols);
      nn::Rng a(11), b(11);
      const auto key = nn::Rng(11)();
      const auto want = reference(key, n, p);
      // As a tensor (float: the SIMD path; double: the scalar one) and as an operand of a product.
      const auto mf = nn::dropout_mask<float, cpu>(DynShape<2>(rows, cols), p, a).to_vector();
      const auto md = nn::dropout_mask<double, cpu>(DynShape<2>(rows, cols), p, b).to_vector();
      for (std::size_t i = 0; i < n; ++i) {
        REQUIRE(double(mf[i]) == Approx(want[i]).epsilon(1e-6));
        REQUIRE(md[i] == want[i]);
      }
      auto x = Tensor<float, DynShape<2>>::full(DynShape<2>(rows, cols), 2.0f);
      nn::Rng c(11);
      const auto y = nn::dropout(x, p, true, c).to_vector();
      for (std::size_t i = 0; i < n; ++i) REQUIRE(double(y[i]) == Approx(2.0 * want[i]).epsilon(1e-6));
      // Broadcast over a leading axis: every [cols] row of x [rows, cols] reads the same [cols] mask,
      // and a row of odd length makes batches start at odd mask indices (the per-element path).
      nn::Rng e(11);
      Tensor<float, DynShape<2>> yb = x * nn::dropout_mask_expr<float, cpu>(std::array<index_t, 1>{cols}, p, e);
      const auto vb = yb.to_vector();
      for (index_t r = 0; r < rows; ++r)
        for (index_t j = 0; j < cols; ++j)
          REQUIRE(double(vb[std::size_t(r * cols + j)]) == Approx(2.0 * want[std::size_t(j)]).epsilon(1e-6));
    }
  }
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("nn: gelu(h) * dropout_mask_expr equals gelu(h) * dropout_mask, values and gradient") {
  // moe::MoEFFN's expert dropout: the mask as an operand (recomputed in the backward) against the
  // stored mask tensor from the same draw.
  std::mt19937_64 g(3);
  std::normal_distribution<float> nd;
  std::vector<float> hv(257 * 96), uv(hv.size());
  for (auto& v : hv) v = nd(g);
  for (auto& v : uv) v = nd(g);
  const auto up = Tensor<float, DynShape<2>>::from_host(DynShape<2>(257, 96), uv);
  auto run = [&](bool as_expr) {
    auto h = Tensor<float, DynShape<2>>::from_host(DynShape<2>(257, 96), hv);
    h.set_requires_grad();
    autograd::Tape tape;
    nn::Rng rng(21);
    Tensor<float, DynShape<2>> y;
    if (as_expr)
      y = gelu(h) * nn::dropout_mask_expr<float, cpu>(h.extents(), 0.25, rng);
    else
      y = gelu(h) * nn::dropout_mask<float, cpu>(h.shape(), 0.25, rng);
    Tensor<float, Shape<>> loss = sum_all(y * up);
    autograd::backward(tape, loss);
    return std::pair{y.to_vector(), h.grad().to_vector()};
  };
  const auto [y_expr, g_expr] = run(true);
  const auto [y_tensor, g_tensor] = run(false);
  REQUIRE(y_expr == y_tensor);
  REQUIRE(g_expr == g_tensor);
  std::size_t zeros = 0;
  for (float v : g_expr) zeros += v == 0.0f;
  REQUIRE(zeros > g_expr.size() / 8);  // the mask dropped gradients too (~25%)
  REQUIRE(zeros < g_expr.size() / 3);
}

TEST_CASE("nn: drop_path drops whole samples") {
  nn::Rng rng(7);
  const index_t B = 20000;
  auto x = Tensor<double, DynShape<3>>::full(DynShape<3>(B, 3, 4), 1.0);
  auto y = nn::drop_path(x, 0.25, true, rng).to_vector();
  double dropped = 0, mean = 0;
  for (index_t b = 0; b < B; ++b) {
    const double first = y[std::size_t(b * 12)];
    for (index_t i = 0; i < 12; ++i) REQUIRE(y[std::size_t(b * 12 + i)] == first);  // one decision per sample
    dropped += (first == 0);
    mean += first;
  }
  REQUIRE(std::abs(dropped / double(B) - 0.25) < 0.02);
  REQUIRE(std::abs(mean / double(B) - 1.0) < 0.04);
  REQUIRE(nn::drop_path(x, 0.25, false, rng).to_vector() == x.to_vector());
}

TEST_CASE("nn: residual_drop_path equals x + drop_path(branch(x)) and runs the branch on kept samples only") {
  using T3 = Tensor<double, DynShape<3>>;
  const index_t B = 9, S = 3, F = 4;
  const double p = 0.4;
  auto make_x = [&] {
    T3 x{DynShape<3>(B, S, F)};
    for (index_t i = 0; i < x.numel(); ++i) x.data()[i] = std::sin(0.37 * double(i)) + 0.1;
    x.set_requires_grad();
    return x;
  };
  nn::Linear<double> lin(F, F, true, 3);
  const auto& w = lin.weight;
  std::vector<index_t> batches;  // the leading extent each branch call saw
  auto branch = [&](const T3& s) {
    batches.push_back(s.extent(0));
    return T3(gelu(lin(s)));  // per sample, like attention or an MLP
  };
  int tested = 0;
  for (std::uint64_t seed = 1; tested < 4; ++seed) {
    {  // only seeds that drop some samples and keep others exercise the skipping path
      nn::Rng probe(seed);
      const auto k = nn::drop_path_keep(B, p, probe);
      const auto n = std::count(k.begin(), k.end(), true);
      if (n == 0 || n == B) continue;
    }
    ++tested;
    // Reference: the branch on every sample, then drop_path's mask.
    nn::Rng ra(seed), rb(seed);
    auto xa = make_x(), xb = make_x();
    T3 ya, yb;
    std::vector<double> gxa, gxb, gwa, gwb;
    {
      autograd::Tape tape;
      ya = T3(xa + nn::drop_path(branch(xa), p, true, ra));
      autograd::backward(tape, sum_all(ya * ya));
      gxa = xa.grad().to_vector();
      gwa = w.grad().to_vector();
      lin.weight.zero_grad();
    }
    const auto keep = nn::drop_path_keep(B, p, rb);  // what rb's next draw decides
    nn::Rng rc(seed);
    batches.clear();
    {
      autograd::Tape tape;
      yb = nn::residual_drop_path(xb, p, true, rc, branch);
      autograd::backward(tape, sum_all(yb * yb));
      gxb = xb.grad().to_vector();
      gwb = w.grad().to_vector();
      lin.weight.zero_grad();
    }
    const index_t kept = index_t(std::count(keep.begin(), keep.end(), true));
    INFO("seed " << seed << ", kept " << kept << " of " << B);
    REQUIRE(batches == std::vector<index_t>{kept});  // one branch call, on the kept samples only
    REQUIRE(ra() == rc());                            // the same draws were taken from the generator
    const auto va = ya.to_vector(), vb = yb.to_vector();
    REQUIRE(va.size() == vb.size());
    for (std::size_t i = 0; i < va.size(); ++i) REQUIRE(vb[i] == Approx(va[i]).margin(1e-12));
    for (std::size_t i = 0; i < gxa.size(); ++i) REQUIRE(gxb[i] == Approx(gxa[i]).margin(1e-12));
    for (std::size_t i = 0; i < gwa.size(); ++i) REQUIRE(gwb[i] == Approx(gwa[i]).margin(1e-12));
    // A dropped sample is the residual unchanged.
    for (index_t b = 0; b < B; ++b)
      if (!keep[std::size_t(b)])
        for (index_t j = 0; j < S * F; ++j) REQUIRE(vb[std::size_t(b * S * F + j)] == xb.data()[b * S * F + j]);
  }
  // Evaluation (or p = 0) runs the branch on the whole batch, with no draw.
  nn::Rng r(9), r2(9);
  batches.clear();
  auto x = make_x();
  (void)nn::residual_drop_path(x, p, false, r, branch);
  REQUIRE(batches == std::vector<index_t>{B});
  REQUIRE(r() == r2());
}

TEST_CASE("nn: causal LlamaAttention ignores future tokens") {
  nn::LlamaAttention<double> attn(8, 2, 1, 11);
  std::mt19937_64 g(1);
  std::normal_distribution<double> n(0, 1);
  auto x = Tensor<double, DynShape<3>>(DynShape<3>(1, 4, 8));
  for (index_t i = 0; i < x.numel(); ++i) x.data()[i] = n(g);
  auto pos = IndexTensor<DynShape<1>>::from_host(DynShape<1>(4), {0, 1, 2, 3});
  auto y0 = attn(x, pos).to_vector();
  for (index_t i = 24; i < 32; ++i) x.data()[i] += 5.0;  // change the last token only
  auto y1 = attn(x, pos).to_vector();
  for (std::size_t i = 0; i < 24; ++i) REQUIRE(y0[i] == Approx(y1[i]).epsilon(1e-14));
}
