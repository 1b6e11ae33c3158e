// Autograd semantics (what is recorded and saved, when memory is released, accumulation, views,
// broadcasting, errors, detach, nesting), large gradients against naive formulas, and an end-to-end
// training run of a small MLP on two interleaved spirals with plain SGD.

#include "core_test_util.hpp"

#include <chrono>
#include <cmath>

using namespace ttmoe;
using namespace core_test;

TEST_CASE("NoGrad and the absence of a tape record nothing", "[core][autograd]") {
  auto w = make_random<float, 2>({3, 4}, -1, 1, 1);
  w.set_requires_grad();
  {
    auto y = eval(w * 2.0f);  // no tape: plain evaluation
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(autograd::is_recording());
  }
  autograd::Tape tape;
  CHECK(autograd::is_recording());
  {
    autograd::NoGrad ng;
    CHECK_FALSE(autograd::is_recording());
    auto y = eval(w * 2.0f);
    auto m = matmul<false, true>(w, w);
    auto s = sum_all(softmax(m));
    auto c = w.clone();
    auto v = w.slice(0, 2).reshape(DynShape<1>(8));
    CHECK(tape.size() == 0);
    CHECK_FALSE(y.requires_grad());
    CHECK_FALSE(m.requires_grad());
    CHECK_FALSE(s.requires_grad());
    CHECK_FALSE(c.requires_grad());
    CHECK_FALSE(v.requires_grad());
    {
      autograd::NoGrad nested;
    }
    CHECK_FALSE(autograd::is_recording());  // leaving a nested NoGrad keeps the outer one active
  }
  CHECK(autograd::is_recording());
  // Operands that need no gradient are not recorded either.
  auto frozen = make_random<float, 2>({3, 4}, -1, 1, 2);
  auto f = eval(exp(frozen) + 1.0f);
  CHECK(tape.size() == 0);
  CHECK_FALSE(f.requires_grad());
  auto y = eval(w * 2.0f);
  CHECK(tape.size() == 1);
  CHECK(tape.node_names() == std::vector<std::string>{"fused_elementwise"});
  CHECK(y.requires_grad());
  // Non-differentiable ops: argmax under a tape and comparisons only.
  auto am = argmax<1>(w);
  auto cmp = eval(w > 0.0f);
  CHECK(tape.size() == 1);
  CHECK_FALSE(cmp.requires_grad());
  tape.clear();
  CHECK(tape.size() == 0);
}

TEST_CASE("a frozen weight's matmul saves only what the needed gradient reads", "[core][autograd][memory]") {
  auto x = make_random<float, 2>({8, 5}, -1, 1, 10);
  auto W = make_random<float, 2>({3, 5}, -1, 1, 11);
  REQUIRE(x.buffer().use_count() == 1);
  REQUIRE(W.buffer().use_count() == 1);
  SECTION("neither needs a gradient: no node at all") {
    autograd::Tape tape;
    auto y = matmul<false, true>(x, W);
    CHECK(tape.size() == 0);
    CHECK(x.buffer().use_count() == 1);
    CHECK(W.buffer().use_count() == 1);
  }
  SECTION("only the input needs a gradient: the weight is saved, the input is not") {
    x.set_requires_grad();
    autograd::Tape tape;
    auto y = matmul<false, true>(x, W);
    CHECK(tape.size() == 1);
    CHECK(x.buffer().use_count() == 1);
    CHECK(W.buffer().use_count() == 2);
    autograd::backward(tape, sum_all(y));
    CHECK(W.buffer().use_count() == 1);
    // dX = ones[8, 3] W: every row is the column sums of W.
    const auto g = x.grad().to_vector();
    for (index_t i = 0; i < 8; ++i)
      for (index_t k = 0; k < 5; ++k) CHECK(g[i * 5 + k] == Approx(double(W(0, k)) + W(1, k) + W(2, k)));
    CHECK_FALSE(W.grad().defined());
  }
  SECTION("only the weight needs a gradient: the input is saved, the weight is not") {
    W.set_requires_grad();
    autograd::Tape tape;
    auto y = matmul<false, true>(x, W);
    CHECK(tape.size() == 1);
    CHECK(x.buffer().use_count() == 2);
    CHECK(W.buffer().use_count() == 1);
    autograd::backward(tape, sum_all(y));
    CHECK(x.buffer().use_count() == 1);
    const auto g = W.grad().to_vector();  // dW = ones[3, 8] x: column sums of x
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 5; ++k) {
        double s = 0;
        for (index_t i = 0; i < 8; ++i) s += x(i, k);
        CHECK(g[j * 5 + k] == Approx(s));
      }
  }
}

TEST_CASE("backward releases the tape and every saved buffer", "[core][autograd][memory]") {
  auto x = make_random<float, 2>({4, 6}, -1, 1, 20);
  auto c = make_random<float, 2>({4, 6}, -1, 1, 21);
  x.set_requires_grad();
  autograd::Tape tape;
  auto h = eval(exp(x) * 2.0f);   // the fused node holds x (and recomputes from it)
  auto s = softmax(h);            // saves its output
  auto v = variance<1>(h);        // saves its input h
  auto l = eval(sum_all(s * c) + mean_all(v));
  CHECK(tape.size() >= 6);
  CHECK(x.buffer().use_count() > 1);
  CHECK(s.buffer().use_count() > 1);
  CHECK(h.buffer().use_count() > 1);
  CHECK(c.buffer().use_count() > 1);
  autograd::backward(tape, l);
  CHECK(tape.size() == 0);
  CHECK(x.buffer().use_count() == 1);
  CHECK(s.buffer().use_count() == 1);
  CHECK(h.buffer().use_count() == 1);
  CHECK(c.buffer().use_count() == 1);
  // Intermediate gradients are freed once consumed; the leaf keeps its own.
  CHECK_FALSE(h.grad().defined());
  CHECK_FALSE(s.grad().defined());
  CHECK_FALSE(l.grad().defined());
  CHECK(x.grad().defined());
  // A second backward on the (now empty) tape has nothing to replay; the root is re-seeded only.
  CHECK_NOTHROW(autograd::backward(tape, l));
}

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[core][autograd]") {
  auto w = make_random<double, 2>({3, 2}, -1, 1, 30);
  auto x = make_random<double, 2>({4, 3}, -1, 1, 31);
  w.set_requires_grad();
  // loss = sum(w * w) + sum(x @ w): dL/dw = 2w + x^T 1 (the GEMM VJP overwrites when fresh and adds otherwise).
  auto run = [&](bool matmul_first) {
    autograd::Tape tape;
    if (matmul_first) {
      auto l = eval(sum_all(matmul(x, w)) + sum_all(w * w));
      autograd::backward(tape, l);
    } else {
      auto l = eval(sum_all(w * w) + sum_all(matmul(x, w)));
      autograd::backward(tape, l);
    }
  };
  auto expected = [&](double times) {
    std::vector<double> e(6);
    for (index_t k = 0; k < 3; ++k)
      for (index_t j = 0; j < 2; ++j) {
        double col = 0;
        for (index_t i = 0; i < 4; ++i) col += x(i, k);
        e[k * 2 + j] = times * (2 * w(k, j) + col);
      }
    return e;
  };
  run(true);
  CHECK_CLOSE(w.grad().to_vector(), expected(1), 1e-13, 1e-13);
  run(false);
  CHECK_CLOSE(w.grad().to_vector(), expected(2), 1e-13, 1e-13);
  w.zero_grad();
  CHECK_FALSE(w.grad().defined());
  run(false);
  CHECK_CLOSE(w.grad().to_vector(), expected(1), 1e-13, 1e-13);
}

TEST_CASE("gradients flow through slice and reshape views and broadcasting", "[core][autograd][view]") {
  auto x = make_random<double, 2>({4, 3}, -1, 1, 40);
  auto b = make_random<double, 1>({3}, -1, 1, 41);
  auto c6 = make_random<double, 1>({6}, -1, 1, 42);
  auto u = make_random<double, 2>({4, 3}, -1, 1, 43);
  auto col = make_random<double, 2>({4, 1}, -1, 1, 44);
  x.set_requires_grad();
  b.set_requires_grad();
  col.set_requires_grad();
  autograd::Tape tape;
  auto r = x.slice(1, 3).reshape(DynShape<1>(6));  // rows 1 and 2, flattened
  auto z = eval(x + b);                              // b broadcast over rows
  auto loss = eval(sum_all(r * c6) + sum_all(z * u) + sum_all(x * col));
  autograd::backward(tape, loss);
  std::vector<double> gx(12), gb(3, 0.0), gcol(4, 0.0);
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) {
      gx[i * 3 + j] = u(i, j) + col(i, 0) + ((i == 1 || i == 2) ? c6((i - 1) * 3 + j) : 0.0);
      gb[j] += u(i, j);
      gcol[i] += x(i, j);
    }
  CHECK_CLOSE(x.grad().to_vector(), gx, 1e-14, 1e-14);
  CHECK_CLOSE(b.grad().to_vector(), gb, 1e-14, 1e-14);
  CHECK_CLOSE(col.grad().to_vector(), gcol, 1e-14, 1e-14);

  // A static-shaped handle of the same leaf (implicit conversion, as<>) shares its gradient.
  auto s = Tensor<double, Shape<2, 2>>::from_host({}, {1, 2, 3, 4});
  s.set_requires_grad();
  {
    autograd::Tape t2;
    Tensor<double, DynShape<2>> d = s;
    auto l = eval(sum_all(d * 3.0) + sum_all(s.as<Shape<2, dyn>>() * s));
    autograd::backward(t2, l);
  }
  CHECK(s.grad().to_vector() == std::vector<double>{5, 7, 9, 11});
}

TEST_CASE("backward: scalar roots only (or a seed), errors are AutogradError", "[core][autograd][errors]") {
  auto x = make_random<float, 2>({2, 3}, -1, 1, 50);
  x.set_requires_grad();
  {
    autograd::Tape tape;
    auto y = eval(x * 2.0f);
    CHECK_THROWS_AS(autograd::backward(tape, y), AutogradError);
    CHECK_THROWS_WITH(autograd::backward(tape, y), Catch::Contains("[2, 3]") && Catch::Contains("seed"));
    auto bad_seed = Tensor<float, DynShape<2>>::zeros(DynShape<2>(3, 2));
    CHECK_THROWS_AS(autograd::backward(tape, y, bad_seed), AutogradError);
    // With a seed any root works: dL/dx = 2 * seed.
    auto seed = make<float, 2>({2, 3}, {1, 2, 3, 4, 5, 6});
    autograd::backward(tape, y, seed);
    CHECK(x.grad().to_vector() == std::vector<float>{2, 4, 6, 8, 10, 12});
    CHECK(tape.size() == 0);
  }
  {
    autograd::Tape tape;
    auto c = make_random<float, 2>({2, 3}, -1, 1, 51);
    auto root = sum_all(c * 2.0f);  // depends on nothing that requires a gradient
    CHECK_THROWS_AS(autograd::backward(tape, root), AutogradError);
    CHECK_THROWS_WITH(autograd::backward(tape, root), Catch::Contains("does not depend"));
  }
  {
    autograd::NoGrad ng;
    autograd::Tape tape;
    auto root = sum_all(x);  // computed under NoGrad: not differentiable
    CHECK_THROWS_AS(autograd::backward(tape, root), AutogradError);
  }
}

TEST_CASE("detach stops gradients, retain_grad keeps an intermediate's", "[core][autograd]") {
  auto x = make<double, 1>({3}, {1, -2, 3});
  x.set_requires_grad();
  {
    autograd::Tape tape;
    auto l = sum_all(x * x.detach());  // d/dx = x, not 2x
    autograd::backward(tape, l);
  }
  CHECK(x.grad().to_vector() == std::vector<double>{1, -2, 3});
  x.zero_grad();
  {
    autograd::Tape tape;
    auto d = x.detach();
    auto y = eval(exp(d));
    CHECK(tape.size() == 0);  // nothing that needs a gradient
    auto h = eval(x * 2.0);
    h.retain_grad();
    auto k = eval(h * 1.0);
    autograd::backward(tape, sum_all(h * h + y * k));
    // dL/dh = 2h + y, retained; k's gradient was freed.
    const auto hv = h.to_vector(), yv = y.to_vector();
    REQUIRE(h.grad().defined());
    CHECK_CLOSE(h.grad().to_vector(), (std::vector<double>{2 * hv[0] + yv[0], 2 * hv[1] + yv[1], 2 * hv[2] + yv[2]}), 1e-14, 1e-14);
    CHECK_FALSE(k.grad().defined());
    CHECK_FALSE(y.requires_grad());
  }
}

TEST_CASE("tapes nest: an inner tape shadows the outer one", "[core][autograd]") {
  auto x = make<double, 1>({2}, {1, 2});
  x.set_requires_grad();
  autograd::Tape outer;
  auto a = eval(x * 3.0);
  CHECK(outer.size() == 1);
  {
    autograd::Tape inner;
    auto b = eval(x * x);
    auto lb = sum_all(b);
    CHECK(outer.size() == 1);
    CHECK(inner.size() == 3);
    autograd::backward(inner, lb);
    CHECK(x.grad().to_vector() == std::vector<double>{2, 4});
  }
  CHECK(autograd::current_tape() == &outer);
  x.zero_grad();
  autograd::backward(outer, sum_all(a));
  CHECK(x.grad().to_vector() == std::vector<double>{3, 3});
}

TEST_CASE("large gradients (threaded GEMM and fused broadcast VJPs) match naive formulas", "[core][autograd][threads]") {
  ThreadCountGuard guard;
  cpu_backend::set_num_threads(4);
  SECTION("x W^T: dX = G W, dW = G^T x") {
    const index_t N = 300, K = 90, M = 100;
    auto x = make_random<float, 2>({N, K}, -1, 1, 60);
    auto W = make_random<float, 2>({M, K}, -1, 1, 61);
    auto G = make_random<float, 2>({N, M}, -1, 1, 62);
    x.set_requires_grad();
    W.set_requires_grad();
    autograd::Tape tape;
    auto y = matmul<false, true>(x, W);
    autograd::backward(tape, sum_all(y * G));
    std::vector<double> dx(N * K, 0.0), dw(M * K, 0.0);
    for (index_t i = 0; i < N; ++i)
      for (index_t j = 0; j < M; ++j) {
        const double g = G.data()[i * M + j];
        for (index_t k = 0; k < K; ++k) {
          dx[i * K + k] += g * W.data()[j * K + k];
          dw[j * K + k] += g * x.data()[i * K + k];
        }
      }
    CHECK_CLOSE(x.grad().to_vector(), dx, 1e-4, 1e-4);
    CHECK_CLOSE(W.grad().to_vector(), dw, 1e-4, 1e-4);
  }
  SECTION("tanh(x * row + col) over [1001, 999]: broadcast gradients are reduced") {
    const index_t R = 1001, C = 999;
    auto x = make_random<double, 2>({R, C}, -1, 1, 70);
    auto row = make_random<double, 1>({C}, -1, 1, 71);
    auto col = make_random<double, 2>({R, 1}, -1, 1, 72);
    auto U = make_random<double, 2>({R, C}, -1, 1, 73);
    x.set_requires_grad();
    row.set_requires_grad();
    col.set_requires_grad();
    autograd::Tape tape;
    auto y = eval(tanh(x * row + col));
    autograd::backward(tape, sum_all(y * U));
    std::vector<double> dx(R * C), drow(C, 0.0), dcol(R, 0.0);
    for (index_t i = 0; i < R; ++i)
      for (index_t j = 0; j < C; ++j) {
        const double xv = x.data()[i * C + j];
        const double t = std::tanh(xv * row.data()[j] + col.data()[i]);
        const double g = U.data()[i * C + j] * (1 - t * t);
        dx[i * C + j] = g * row.data()[j];
        drow[j] += g * xv;
        dcol[i] += g;
      }
    CHECK_CLOSE(x.grad().to_vector(), dx, 1e-12, 1e-12);
    CHECK_CLOSE(row.grad().to_vector(), drow, 1e-10, 1e-10);
    CHECK_CLOSE(col.grad().to_vector(), dcol, 1e-10, 1e-10);
    // col's rows are summed in parallel (each destination one whole row), row's serially: either
    // way one thread gives the same sums bit for bit.
    cpu_backend::set_num_threads(1);
    auto x1 = x.detach().clone();
    auto row1 = row.detach().clone();
    auto col1 = col.detach().clone();
    x1.set_requires_grad();
    row1.set_requires_grad();
    col1.set_requires_grad();
    autograd::Tape tape1;
    autograd::backward(tape1, sum_all(eval(tanh(x1 * row1 + col1)) * U));
    CHECK(col1.grad().to_vector() == col.grad().to_vector());
    CHECK(row1.grad().to_vector() == row.grad().to_vector());
  }
}

// ---- end-to-end training ------------------------------------------------------------------------------
// Time bound of the training run: ~0.3 s at -O2; sanitizer builds (TTMOE_SANITIZE: -O1 + ASan/UBSan)
// are ~30x slower, so they get a looser bound.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kTrainingSecondsBound = 60.0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr double kTrainingSecondsBound = 60.0;
#else
constexpr double kTrainingSecondsBound = 5.0;
#endif
#else
constexpr double kTrainingSecondsBound = 5.0;
#endif

TEST_CASE("a two-layer MLP learns two interleaved spirals with plain SGD", "[core][autograd][training]") {
  // Data: 2 x 100 points on two spirals (1.25 turns, the second rotated by pi), small noise.
  const index_t per = 100, N = 2 * per;
  Rng rng(2024);
  std::vector<float> xs(N * 2);
  std::vector<std::int64_t> ys(N);
  const double pi = 3.14159265358979323846;
  for (index_t c = 0; c < 2; ++c)
    for (index_t i = 0; i < per; ++i) {
      const double t = 0.15 + 0.85 * double(i) / per;
      const double th = 2 * pi * 1.25 * t + pi * double(c);
      const index_t k = c * per + i;
      xs[2 * k] = float(t * std::cos(th) + rng.uniform(-0.02, 0.02));
      xs[2 * k + 1] = float(t * std::sin(th) + rng.uniform(-0.02, 0.02));
      ys[k] = std::int64_t(c);
    }
  auto x = Tensor<float, Shape<dyn, 2>>::from_host(Shape<dyn, 2>(N), xs);
  auto labels = IndexTensor<Shape<dyn, 1>>::from_host(Shape<dyn, 1>(N), ys);
  // Model 2 -> 32 -> 2 (tanh), parameters in nn.Linear layout [out, in].
  auto init = [&](index_t n, double s) {
    std::vector<float> v(n);
    for (auto& e : v) e = float(rng.uniform(-s, s));
    return v;
  };
  auto W1 = Tensor<float, Shape<32, 2>>::from_host({}, init(64, 3.0));
  auto b1 = Tensor<float, Shape<32>>::from_host({}, init(32, 3.0));
  auto W2 = Tensor<float, Shape<2, 32>>::from_host({}, init(64, 1 / std::sqrt(32.0)));
  auto b2 = Tensor<float, Shape<2>>::zeros();
  W1.set_requires_grad();
  W2.set_requires_grad();
  b1.set_requires_grad();
  b2.set_requires_grad();

  auto forward = [&] {
    auto h = eval(tanh(matmul<false, true>(x, W1) + b1));
    return eval(matmul<false, true>(h, W2) + b2);  // logits [N, 2]
  };
  auto sgd = [](const auto& p, float lr) {
    REQUIRE(p.grad().defined());
    assign(p, p - lr * p.grad());
    p.zero_grad();
  };
  const auto start = std::chrono::steady_clock::now();
  const int steps = 2000;
  const float lr = 0.5f;
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    autograd::Tape tape;
    auto logits = forward();
    // Cross-entropy: -mean(log_softmax(logits)[i, label_i]).
    Tensor<float, Shape<>> loss = -mean_all(gather<1>(log_softmax(logits), labels));
    autograd::backward(tape, loss);
    REQUIRE(tape.size() == 0);
    if (s == 0) first = loss.item();
    last = loss.item();
    REQUIRE(std::isfinite(last));
    autograd::NoGrad ng;
    sgd(W1, lr);
    sgd(b1, lr);
    sgd(W2, lr);
    sgd(b2, lr);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Final loss and accuracy from a fresh forward pass without a tape.
  auto logits = forward();
  const auto lv = logits.to_vector();
  double ce = 0;
  int correct = 0;
  for (index_t i = 0; i < N; ++i) {
    const double a = lv[2 * i], b = lv[2 * i + 1], m = std::max(a, b);
    const double lse = m + std::log(std::exp(a - m) + std::exp(b - m));
    ce -= (ys[i] == 0 ? a : b) - lse;
    correct += ((b > a) ? 1 : 0) == ys[i];
  }
  ce /= double(N);
  const double accuracy = double(correct) / double(N);
  INFO("first loss " << first << ", last loss " << last << ", recomputed " << ce << ", accuracy " << accuracy
                     << ", " << seconds << " s");
  CHECK(first > 0.5);            // near ln 2 at the start: the task is not solved by the initialisation
  CHECK(ce < 0.05);              // the stated bound
  CHECK(std::abs(ce - last) < 0.01);
  CHECK(last < first / 10);      // the loss decreased substantially
  CHECK(accuracy > 0.95);
  CHECK(seconds < kTrainingSecondsBound);
}

TEST_CASE("run_recorded_tasks: side-by-side tasks give the values and gradients of running them in order",
          "[core][autograd][threads]") {
  // Three independent pieces (a GEMM, a fused activation, a reduction), each on its own leaves, as an
  // MoE layer's experts are. Reference: the same pieces one after another on the caller's tape.
  const std::size_t threads_before = cpu_backend::num_threads();
  for (std::size_t threads : {std::size_t(1), std::size_t(2), std::size_t(3)}) {
    cpu_backend::set_num_threads(threads);
    INFO("threads " << threads);
    std::vector<Tensor<float, DynShape<2>>> x, w;
    for (int i = 0; i < 3; ++i) {
      x.push_back(make_random<float, 2>({index_t(40 + 10 * i), 24}, -1, 1, std::uint64_t(10 + i)));
      w.push_back(make_random<float, 2>({24, 16}, -1, 1, std::uint64_t(20 + i)));
      x.back().set_requires_grad();
      w.back().set_requires_grad();
    }
    auto piece = [&](int i) { return Tensor<float, DynShape<2>>(gelu(matmul(x[i], w[i])) * 0.5f); };
    auto run = [&](bool side_by_side) {
      for (int i = 0; i < 3; ++i) x[i].zero_grad(), w[i].zero_grad();
      autograd::Tape tape;
      std::vector<Tensor<float, DynShape<2>>> y(3);
      if (side_by_side) {
        run_recorded_tasks<cpu>(3, [&](index_t i) { y[std::size_t(i)] = piece(int(i)); });
        REQUIRE(tape.node_names() == std::vector<std::string>{"parallel_tasks"});
      } else {
        for (int i = 0; i < 3; ++i) y[std::size_t(i)] = piece(i);
      }
      Tensor<float, Shape<>> loss = sum_all(y[0]) + sum_all(square(y[1])) + sum_all(y[2] * y[2] * y[2]);
      autograd::backward(tape, loss);
      std::vector<std::vector<float>> out;
      for (int i = 0; i < 3; ++i) {
        out.push_back(y[std::size_t(i)].to_vector());
        out.push_back(x[i].grad().to_vector());
        out.push_back(w[i].grad().to_vector());
      }
      return out;
    };
    const auto in_order = run(false), side = run(true);
    REQUIRE(side.size() == in_order.size());
    for (std::size_t k = 0; k < side.size(); ++k) {
      REQUIRE(side[k].size() == in_order[k].size());
      for (std::size_t j = 0; j < side[k].size(); ++j) REQUIRE(side[k][j] == in_order[k][j]);  // bit for bit
    }
  }
  cpu_backend::set_num_threads(threads_before);
}

TEST_CASE("run_recorded_tasks: nothing recorded without a tape and a task exception reaches the caller",
          "[core][autograd][errors]") {
  auto x = make_random<float, 2>({8, 8}, -1, 1, 3);
  x.set_requires_grad();
  std::vector<Tensor<float, DynShape<2>>> y(4);
  run_recorded_tasks<cpu>(4, [&](index_t i) { y[std::size_t(i)] = eval(x * float(i)); });
  for (index_t i = 0; i < 4; ++i) CHECK(y[std::size_t(i)].to_vector()[9] == Approx(x.to_vector()[9] * float(i)));
  autograd::Tape tape;
  CHECK_THROWS_WITH(run_recorded_tasks<cpu>(4,
                                            [&](index_t i) {
                                              y[std::size_t(i)] = eval(x * 2.0f);
                                              if (i == 2) throw ValueError("task 2 failed");
                                            }),
                    Catch::Contains("task 2 failed"));
  CHECK(tape.size() == 0);  // the failed call pushed no node
  CHECK(autograd::is_recording());  // and the caller's tape is still the recorder
  auto z = eval(x * 3.0f);
  CHECK(tape.size() == 1);
}
