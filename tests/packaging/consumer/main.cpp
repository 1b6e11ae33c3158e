// Consumer of an installed ttmoe: a fused expression, a matmul and a backward pass, each checked
// against values worked out by hand. Returns non-zero on any mismatch.
#include <ttmoe/ttmoe.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace ttmoe;

static int failures = 0;

static void check_close(const char* what, const std::vector<float>& got, const std::vector<double>& want) {
  bool ok = got.size() == want.size();
  for (std::size_t i = 0; ok && i < got.size(); ++i)
    ok = std::abs(double(got[i]) - want[i]) <= 1e-5 * (1.0 + std::abs(want[i]));
  std::string g;
  for (float v : got) g += fmt::format("{:.6g} ", v);
  fmt::print("{:<28} {}  [{}]\n", what, ok ? "ok  " : "FAIL", g);
  failures += !ok;
}

int main() {
  using M23 = Shape<2, 3>;
  auto x = Tensor<float, M23>::from_host({}, {1, 2, 3, 4, 5, 6});
  auto y = Tensor<float, M23>::from_host({}, {-1, 0.5f, 2, 0, -3, 1});

  // Fused: gelu(0.5 x - 1) * y, one loop.
  Tensor<float, M23> f = gelu(x * 0.5f - 1.0f) * y;
  const double xs[] = {1, 2, 3, 4, 5, 6}, ys[] = {-1, 0.5, 2, 0, -3, 1};
  std::vector<double> want_f;
  for (int i = 0; i < 6; ++i) {
    const double u = 0.5 * xs[i] - 1;
    want_f.push_back(0.5 * u * (1 + std::erf(u / std::sqrt(2.0))) * ys[i]);
  }
  check_close("fused gelu(0.5x-1)*y", f.to_vector(), want_f);

  // Matmul: x [2,3] @ w^T with w [2,3] (nn.Linear layout) -> [2,2].
  auto w = Tensor<float, M23>::from_host({}, {1, 0, -1, 0.5f, 0.5f, 0.5f});
  w.set_requires_grad();
  auto h = matmul<false, true>(x, w);
  check_close("matmul x w^T", h.detach().to_vector(), {-2, 3, -2, 7.5});

  // Backward: loss = sum((x w^T)^2) / 4  ->  dL/dw = (x w^T)^T x / 2.
  {
    autograd::Tape tape;
    auto loss = mean_all(square(matmul<false, true>(x, w)));
    check_close("loss", {loss.item()}, {(4 + 9 + 4 + 56.25) / 4});
    autograd::backward(tape, loss);
  }
  // h^T x / 2: row o = sum_b h[b,o] x[b,:] / 2
  check_close("grad w", w.grad().to_vector(), {(-2 * 1 - 2 * 4) / 2.0, (-2 * 2 - 2 * 5) / 2.0, (-2 * 3 - 2 * 6) / 2.0,
                                                (3 * 1 + 7.5 * 4) / 2.0, (3 * 2 + 7.5 * 5) / 2.0, (3 * 3 + 7.5 * 6) / 2.0});

  // A larger GEMM (several thread-pool blocks / a real BLAS call) against a naive loop.
  using Big = Shape<dyn, dyn>;
  const index_t n = 96;
  std::vector<float> ha(n * n), hb(n * n);
  for (index_t i = 0; i < n * n; ++i) {
    ha[i] = float((i * 7) % 13) / 13.f - 0.5f;
    hb[i] = float((i * 5) % 11) / 11.f - 0.5f;
  }
  auto A = Tensor<float, Big>::from_host(Big(n, n), ha), B = Tensor<float, Big>::from_host(Big(n, n), hb);
  const auto C = matmul(A, B).to_vector();
  double max_err = 0;
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j < n; ++j) {
      double ref = 0;
      for (index_t k = 0; k < n; ++k) ref += double(ha[i * n + k]) * hb[k * n + j];
      max_err = std::max(max_err, std::abs(ref - C[i * n + j]));
    }
  fmt::print("{:<28} {}  [max error {:.3g}]\n", "matmul 96x96x96", max_err < 1e-4 ? "ok  " : "FAIL", max_err);
  failures += !(max_err < 1e-4);

  fmt::print("{}\n", h.detach());
  if (failures) fmt::print("{} check(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
