// core_demo: the ttmoe tensor core at work, in three parts.
//   1. A fused elementwise expression, gelu(a*x + b) * y, evaluated in one loop, timed against the same
//      computation done one operation at a time (one temporary tensor per step).
//   2. A 2-64-2 GELU MLP trained with autograd and SGD (momentum) on a seeded two-arm spiral.
//   3. Tensors printed through fmt.
// No arguments; runs in a few seconds. The MoETTA example will take over as the main demo.
#include <ttmoe/ttmoe.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

using namespace ttmoe;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- 1. fused vs unfused --------------------------------------------------------------------------
int fused_demo() {
  using Vec = Shape<dyn>;
  const index_t n = index_t{1} << 22;  // 4M floats, 16 MiB per tensor
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> hx(n), hy(n);
  for (auto& v : hx) v = nd(rng);
  for (auto& v : hy) v = nd(rng);
  auto x = Tensor<float, Vec>::from_host(Vec(n), hx);
  auto y = Tensor<float, Vec>::from_host(Vec(n), hy);
  const float a = 1.5f, b = -0.25f;

  auto chain = gelu(x * a + b) * y;  // a lazy expression: nothing computed yet
  Tensor<float, Vec> fused = chain;  // one fused loop
  auto unfused = Tensor<float, Vec>::zeros(Vec(n));
  std::vector<double> t_fused, t_unfused;
  for (int rep = 0; rep < 7; ++rep) {
    auto t0 = Clock::now();
    assign(fused, chain);  // into the existing output
    t_fused.push_back(ms_since(t0));

    t0 = Clock::now();
    Tensor<float, Vec> t1 = x * a;  // each step materialised: 3 temporaries, 4 loops over memory
    Tensor<float, Vec> t2 = t1 + b;
    Tensor<float, Vec> t3 = gelu(t2);
    assign(unfused, t3 * y);
    t_unfused.push_back(ms_since(t0));
  }
  const auto f = fused.to_vector(), u = unfused.to_vector();
  double max_diff = 0, max_ref = 0;
  for (index_t i = 0; i < n; ++i) {
    const double xi = hx[i], ref = 0.5 * (a * xi + b) * (1 + std::erf((a * xi + b) / std::sqrt(2.0))) * hy[i];
    max_diff = std::max({max_diff, std::abs(double(f[i]) - double(u[i])), std::abs(double(f[i]) - ref)});
    max_ref = std::max(max_ref, std::abs(ref));
  }
  fmt::print("== 1. fused expression: out = gelu(a * x + b) * y, a = {}, b = {}, over {} floats, {} CPU threads\n", a, b,
             n, cpu_backend::num_threads());
  fmt::print("out = {}\n", fused);
  const double tf = median(t_fused), tu = median(t_unfused);
  fmt::print("fused   (1 loop, no temporaries): {:7.2f} ms  ({:.1f} GB/s of x, y, out)\n", tf, 3.0 * 4 * n / tf / 1e6);
  fmt::print("unfused (4 ops, 3 temporaries):   {:7.2f} ms  -> fused is {:.1f}x faster\n", tu, tu / tf);
  fmt::print("max |fused - unfused or double-precision reference| = {:.3g}\n\n", max_diff);
  return max_diff <= 1e-5 * std::max(1.0, max_ref) ? 0 : 1;
}

// ---- 2. MLP on a spiral -----------------------------------------------------------------------------
using Batch2 = Shape<dyn, 2>;
using Labels = Shape<dyn>;

struct Spiral {
  Tensor<float, Batch2> x;
  IndexTensor<Labels> y;
  std::vector<std::int64_t> labels;
};

// Two interleaved arms, 1.5 turns each, with Gaussian jitter; points in [-1, 1]^2.
Spiral make_spiral(index_t per_class, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> jitter(0.f, 0.04f);
  std::uniform_real_distribution<float> u01(0.f, 1.f);
  std::vector<float> pts;
  std::vector<std::int64_t> lab;
  for (index_t i = 0; i < 2 * per_class; ++i) {
    const std::int64_t c = static_cast<std::int64_t>(i % 2);
    const float t = 0.05f + 0.95f * u01(rng);
    const float theta = 3.0f * 3.14159265f * t + 3.14159265f * float(c);
    pts.push_back(t * std::cos(theta) + jitter(rng));
    pts.push_back(t * std::sin(theta) + jitter(rng));
    lab.push_back(c);
  }
  const index_t n = 2 * per_class;
  return {Tensor<float, Batch2>::from_host(Batch2(n), pts), IndexTensor<Labels>::from_host(Labels(n), lab), lab};
}

template <class W>
void init_uniform(W& w, float bound, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-bound, bound);
  std::vector<float> v(w.numel());
  for (auto& e : v) e = d(rng);
  w = W::from_host(w.shape(), v);
  w.set_requires_grad();
}

struct Mlp {
  static constexpr index_t hidden = 64;
  Tensor<float, Shape<hidden, 2>> w1;
  Tensor<float, Shape<hidden>> b1;
  Tensor<float, Shape<2, hidden>> w2;
  Tensor<float, Shape<2>> b2;

  explicit Mlp(std::mt19937& rng) {  // nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in))
    init_uniform(w1, 1.f / std::sqrt(2.f), rng);
    init_uniform(b1, 1.f / std::sqrt(2.f), rng);
    init_uniform(w2, 1.f / std::sqrt(float(hidden)), rng);
    init_uniform(b2, 1.f / std::sqrt(float(hidden)), rng);
  }
  // logits = gelu(x W1^T + b1) W2^T + b2; the bias add and gelu fuse into one loop (and one tape node),
  // eval() materialises it for the second matmul; the final bias add stays lazy for the caller.
  auto operator()(const Tensor<float, Batch2>& x) const {
    auto h = eval(gelu(matmul<false, true>(x, w1) + b1));
    return matmul<false, true>(h, w2) + b2;
  }
};

template <class P, class V>
void sgd_step(P& p, V& velocity, float lr, float momentum) {
  assign(velocity, velocity * momentum + p.grad());  // classic momentum: v = mu v + g; p -= lr v
  assign(p, p - velocity * lr);
  p.zero_grad();
}

double accuracy(const Mlp& model, const Spiral& data) {
  autograd::NoGrad ng;
  Tensor<float, Batch2> logits = model(data.x);
  const auto pred = argmax<-1>(logits).to_vector();
  std::size_t hits = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) hits += pred[i] == data.labels[i];
  return double(hits) / double(pred.size());
}

int mlp_demo() {
  const auto train = make_spiral(512, 1), test = make_spiral(256, 2);
  std::mt19937 rng(42);
  Mlp model(rng);
  auto vw1 = decltype(model.w1)::zeros();
  auto vb1 = decltype(model.b1)::zeros();
  auto vw2 = decltype(model.w2)::zeros();
  auto vb2 = decltype(model.b2)::zeros();

  const index_t n = train.x.extent(0), batch = 32;
  const int epochs = 100;
  const float lr = 0.5f, momentum = 0.9f;
  fmt::print("== 2. 2-{}-2 GELU MLP, SGD(lr={} cosine-decayed, momentum={}), batch {}, on a {}-point two-arm spiral\n", Mlp::hidden,
             lr, momentum, batch, n);
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const auto t0 = Clock::now();
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double loss_sum = 0;
    const float lr_now = lr * 0.5f * (1.f + std::cos(3.14159265f * float(epoch - 1) / float(epochs)));  // cosine decay
    for (index_t s = 0; s + batch <= n; s += batch) {
      auto idx = IndexTensor<Labels>::from_host(Labels(batch), std::span<const std::int64_t>(order.data() + s, batch));
      auto xb = index_select(train.x, idx);
      auto yb = index_select(train.y, idx);
      {
        autograd::Tape tape;
        // cross entropy: -mean over the batch of log_softmax(logits)[label]
        auto loss = mean_all(sum<-1>(one_hot<float>(yb, 2) * log_softmax<-1>(model(xb))) * -1.0f);
        loss_sum += loss.item();
        autograd::backward(tape, loss);
      }
      sgd_step(model.w1, vw1, lr_now, momentum);
      sgd_step(model.b1, vb1, lr_now, momentum);
      sgd_step(model.w2, vw2, lr_now, momentum);
      sgd_step(model.b2, vb2, lr_now, momentum);
    }
    // mean training loss of each epoch, five epochs per line
    if (epoch % 5 == 1) fmt::print("epochs {:3d}-{:3d} loss:", epoch, epoch + 4);
    fmt::print(" {:.4f}", loss_sum / double(n / batch));
    if (epoch % 5 == 0 || epoch == epochs) fmt::print("\n");
  }
  const double train_acc = accuracy(model, train), test_acc = accuracy(model, test);
  fmt::print("trained in {:.0f} ms; accuracy: train {:.1f}%, held-out {:.1f}%\n\n", ms_since(t0), 100 * train_acc,
             100 * test_acc);

  // ---- 3. printing through fmt ---------------------------------------------------------------------
  fmt::print("== 3. tensors through fmt\n");
  fmt::print("W2 = {}\n", model.w2);
  {
    autograd::NoGrad ng;
    auto probe = Tensor<float, Shape<3, 2>>::from_host({}, {0.f, 0.f, 0.5f, 0.5f, -0.5f, 0.25f});
    auto probs = softmax<-1>(model(probe));
    fmt::print("p(class | (0,0), (.5,.5), (-.5,.25)) = {}\n", probs);
  }
  return test_acc >= 0.9 ? 0 : 2;
}

}  // namespace

int main() {
  const auto t0 = Clock::now();
  int rc = fused_demo();
  rc |= mlp_demo();
  fmt::print("\ncore_demo finished in {:.2f} s{}\n", ms_since(t0) / 1e3, rc ? " (CHECK FAILED)" : "");
  return rc;
}
