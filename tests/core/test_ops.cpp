// Reductions, softmax, matmul and the index-driven ops against naive loops in double, including
// their error messages.

#include "core_test_util.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <numeric>

using namespace ttmoe;
using namespace core_test;

namespace {
struct AxisView {
  index_t outer, n, inner;
};
template <std::size_t R>
AxisView view_of(const std::array<index_t, R>& e, std::size_t axis) {
  AxisView v{1, e[axis], 1};
  for (std::size_t d = 0; d < axis; ++d) v.outer *= e[d];
  for (std::size_t d = axis + 1; d < R; ++d) v.inner *= e[d];
  return v;
}
// out[o, i] = f(row of x along the axis at (o, i)), in double.
template <class T, class F>
std::vector<double> reduce_ref(const std::vector<T>& x, AxisView v, F f) {
  std::vector<double> out(v.outer * v.inner);
  std::vector<double> row(v.n);
  for (index_t o = 0; o < v.outer; ++o)
    for (index_t i = 0; i < v.inner; ++i) {
      for (index_t k = 0; k < v.n; ++k) row[k] = double(x[(o * v.n + k) * v.inner + i]);
      out[o * v.inner + i] = f(row);
    }
  return out;
}
double ref_sum(const std::vector<double>& r) { return std::accumulate(r.begin(), r.end(), 0.0); }
double ref_mean(const std::vector<double>& r) { return ref_sum(r) / double(r.size()); }
double ref_var(const std::vector<double>& r, double ddof) {
  const double m = ref_mean(r);
  double s = 0;
  for (double x : r) s += (x - m) * (x - m);
  return s / (double(r.size()) - ddof);
}
double ref_lse(const std::vector<double>& r) {
  const double m = *std::max_element(r.begin(), r.end());
  double s = 0;
  for (double x : r) s += std::exp(x - m);
  return m + std::log(s);
}
template <class It>
std::vector<double> as_double(const It& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <int Axis, bool Keep, class T>
void check_reductions_axis(const Tensor<T, DynShape<3>>& x) {
  constexpr std::size_t A = Axis < 0 ? std::size_t(Axis + 3) : std::size_t(Axis);
  const auto e = x.extents();
  const auto v = view_of(e, A);
  const auto xv = x.to_vector();
  INFO("axis " << Axis << " keepdim " << Keep << " extents " << extents_to_string(e));
  auto expect_extents = [&](const auto& t) {
    if constexpr (Keep) {
      auto k = e;
      k[A] = 1;
      CHECK(t.extents() == k);
    } else {
      CHECK(t.extents() == drop_extent<A>(e));
    }
  };
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  auto s = sum<Axis, Keep>(x);
  expect_extents(s);
  CHECK_CLOSE(s.to_vector(), reduce_ref(xv, v, ref_sum), tol, tol);
  auto m = mean<Axis, Keep>(x);
  expect_extents(m);
  CHECK_CLOSE(m.to_vector(), reduce_ref(xv, v, ref_mean), tol, tol);
  auto mx = max<Axis, Keep>(x);
  expect_extents(mx);
  CHECK_CLOSE(mx.to_vector(), reduce_ref(xv, v, [](const auto& r) { return *std::max_element(r.begin(), r.end()); }), 0.0, 0.0);
  auto mn = min<Axis, Keep>(x);
  CHECK_CLOSE(mn.to_vector(), reduce_ref(xv, v, [](const auto& r) { return *std::min_element(r.begin(), r.end()); }), 0.0, 0.0);
  auto am = argmax<Axis, Keep>(x);
  expect_extents(am);
  CHECK_CLOSE(am.to_vector(), reduce_ref(xv, v, [](const auto& r) { return double(std::max_element(r.begin(), r.end()) - r.begin()); }), 0.0, 0.0);
  auto an = argmin<Axis, Keep>(x);
  CHECK_CLOSE(an.to_vector(), reduce_ref(xv, v, [](const auto& r) { return double(std::min_element(r.begin(), r.end()) - r.begin()); }), 0.0, 0.0);
  auto v0 = variance<Axis, Keep>(x);
  expect_extents(v0);
  CHECK_CLOSE(v0.to_vector(), reduce_ref(xv, v, [](const auto& r) { return ref_var(r, 0); }), tol, tol);
  if (v.n >= 2) {
    auto v1 = variance<Axis, Keep>(x, 1);
    CHECK_CLOSE(v1.to_vector(), reduce_ref(xv, v, [](const auto& r) { return ref_var(r, 1); }), tol, tol);
  }
  auto l = logsumexp<Axis, Keep>(x);
  expect_extents(l);
  CHECK_CLOSE(l.to_vector(), reduce_ref(xv, v, ref_lse), tol, tol);
}
template <class T>
void check_all_reductions(const std::array<index_t, 3>& e, std::uint64_t seed) {
  auto x = make_random<T, 3>(e, -3, 3, seed);
  check_reductions_axis<0, false>(x);
  check_reductions_axis<0, true>(x);
  check_reductions_axis<1, false>(x);
  check_reductions_axis<1, true>(x);
  check_reductions_axis<2, false>(x);
  check_reductions_axis<-1, true>(x);
  check_reductions_axis<-2, false>(x);
}
}  // namespace

// ---- reductions --------------------------------------------------------------------------------------
TEMPLATE_TEST_CASE("reductions along every axis match naive loops", "[core][reduce]", float, double) {
  check_all_reductions<TestType>({5, 7, 9}, 1);
  check_all_reductions<TestType>({2, 3, 37}, 2);   // SIMD rows with a tail on the last axis
  check_all_reductions<TestType>({1, 1, 1}, 3);
  check_all_reductions<TestType>({67, 129, 5}, 4);  // enough work to split over threads
}

TEST_CASE("whole-tensor and long reductions stay accurate", "[core][reduce]") {
  ThreadCountGuard guard;
  cpu_backend::set_num_threads(4);
  const index_t n = 1000003;
  auto x = make_random<float, 1>({n}, 0, 1, 10);
  const auto xv = x.to_vector();
  const double ref = std::accumulate(xv.begin(), xv.end(), 0.0);
  CHECK(sum_all(x).item() == Approx(ref).epsilon(1e-5));
  CHECK(mean_all(x).item() == Approx(ref / n).epsilon(1e-5));
  auto y = make_random<double, 2>({3, 100003}, -1, 1, 11);
  CHECK_CLOSE(sum<1>(y).to_vector(), reduce_ref(y.to_vector(), AxisView{3, 100003, 1}, ref_sum), 1e-12, 1e-9);
  auto z = make_random<double, 2>({100003, 3}, -1, 1, 12);
  CHECK_CLOSE(sum<0>(z).to_vector(), reduce_ref(z.to_vector(), AxisView{1, 100003, 3}, ref_sum), 1e-12, 1e-9);
  auto w = make_random<float, 2>({4099, 257}, -1, 1, 13);
  CHECK_CLOSE(max<1>(w).to_vector(), reduce_ref(w.to_vector(), AxisView{4099, 257, 1}, [](const auto& r) { return *std::max_element(r.begin(), r.end()); }), 0.0, 0.0);
  CHECK_CLOSE(variance<0>(w).to_vector(), reduce_ref(w.to_vector(), AxisView{1, 4099, 257}, [](const auto& r) { return ref_var(r, 0); }), 1e-4, 1e-6);
  // Rank 0 and mean of an expression.
  CHECK(sum_all(Tensor<float, Shape<>>::full({}, 2.5f)).item() == 2.5f);
  auto a = make<float, 2>({2, 2}, {1, 2, 3, 4});
  CHECK(mean_all(a * a).item() == Approx(7.5));
}

TEST_CASE("max and min: ties give the first index, NaN wins, errors for empty axes and ddof", "[core][reduce]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto x = make<float, 2>({3, 4}, {1, 5, 5, 2, /**/ 3, nan, 9, 1, /**/ -1, -1, -2, -2});
  CHECK(argmax<1>(x).to_vector() == std::vector<std::int64_t>{1, 1, 0});
  CHECK(argmin<1>(x).to_vector() == std::vector<std::int64_t>{0, 1, 2});
  const auto mx = max<1>(x).to_vector(), mn = min<1>(x).to_vector();
  CHECK(mx[0] == 5);
  CHECK(std::isnan(mx[1]));
  CHECK(std::isnan(mn[1]));
  CHECK(mx[2] == -1);
  CHECK(mn[2] == -2);
  CHECK(std::isnan(sum<1>(x).to_vector()[1]));
  auto empty = Tensor<float, DynShape<2>>::zeros(DynShape<2>(3, 0));
  CHECK_THROWS_AS(max<1>(empty), ValueError);
  CHECK_THROWS_WITH(min<1>(empty), Catch::Contains("min") && Catch::Contains("empty") && Catch::Contains("[3, 0]"));
  CHECK(sum<1>(empty).to_vector() == std::vector<float>{0, 0, 0});
  auto col = make<float, 2>({3, 1}, {1, 2, 3});
  CHECK(variance<1>(col).to_vector() == std::vector<float>{0, 0, 0});
  CHECK_THROWS_AS(variance<1>(col, 1), ValueError);
  CHECK_THROWS_WITH(variance<1>(col, 1), Catch::Contains("variance") && Catch::Contains("ddof 1"));
}

// ---- softmax -----------------------------------------------------------------------------------------
namespace {
template <int Axis, class T>
void check_softmax_axis(const Tensor<T, DynShape<3>>& x, double tol) {
  constexpr std::size_t A = Axis < 0 ? std::size_t(Axis + 3) : std::size_t(Axis);
  const auto e = x.extents();
  const auto v = view_of(e, A);
  const auto xv = x.to_vector();
  std::vector<double> ref(xv.size()), lref(xv.size());
  for (index_t o = 0; o < v.outer; ++o)
    for (index_t i = 0; i < v.inner; ++i) {
      double m = -INFINITY;
      for (index_t k = 0; k < v.n; ++k) m = std::max(m, double(xv[(o * v.n + k) * v.inner + i]));
      double s = 0;
      for (index_t k = 0; k < v.n; ++k) s += std::exp(double(xv[(o * v.n + k) * v.inner + i]) - m);
      for (index_t k = 0; k < v.n; ++k) {
        const index_t p = (o * v.n + k) * v.inner + i;
        ref[p] = std::exp(double(xv[p]) - m) / s;
        lref[p] = double(xv[p]) - m - std::log(s);
      }
    }
  INFO("softmax axis " << Axis << " extents " << extents_to_string(e));
  auto y = softmax<Axis>(x);
  CHECK(y.extents() == e);
  CHECK_CLOSE(y.to_vector(), ref, tol, tol);
  CHECK_CLOSE(log_softmax<Axis>(x).to_vector(), lref, tol, tol);
  // Probabilities along the axis sum to one.
  CHECK_CLOSE(sum<Axis>(y).to_vector(), std::vector<double>(v.outer * v.inner, 1.0), tol, tol);
}
}  // namespace

TEMPLATE_TEST_CASE("softmax and log_softmax match the naive formula along any axis", "[core][softmax]", float, double) {
  const double tol = std::is_same_v<TestType, float> ? 2e-6 : 1e-13;
  for (auto e : {std::array<index_t, 3>{3, 4, 37}, std::array<index_t, 3>{2, 19, 5}, std::array<index_t, 3>{1, 1, 1}}) {
    auto x = make_random<TestType, 3>(e, -5, 5, 20);
    check_softmax_axis<-1>(x, tol);
    check_softmax_axis<1>(x, tol);
    check_softmax_axis<0>(x, tol);
  }
  // Large inputs: exp would overflow without subtracting the maximum.
  auto big = make_random<TestType, 3>({2, 3, 41}, 900, 1000, 21);
  check_softmax_axis<-1>(big, tol);
  check_softmax_axis<1>(big, tol);
  auto neg = make_random<TestType, 3>({2, 3, 41}, -1000, -900, 22);
  check_softmax_axis<-1>(neg, tol);
}

TEST_CASE("softmax is stable for extreme and masked rows", "[core][softmax]") {
  const float inf = std::numeric_limits<float>::infinity();
  auto x = make<float, 2>({3, 4}, {1000, 1000, 1000, 1000, /**/ 88.8f, -1e4f, 1e4f, 0, /**/ 0, -inf, 1, -inf});
  const auto y = softmax(x).to_vector();
  for (float v : y) CHECK(std::isfinite(v));
  CHECK(y[0] == Approx(0.25));
  CHECK(y[6] == Approx(1.0));
  CHECK(y[4] == 0.0f);
  CHECK(y[9] == 0.0f);  // -inf (a masked position) gets exactly zero probability
  CHECK(y[11] == 0.0f);
  CHECK(y[8] == Approx(1 / (1 + std::exp(1.0))));
  const auto l = log_softmax(x).to_vector();
  CHECK(l[0] == Approx(-std::log(4.0)));
  CHECK(l[6] == Approx(0.0).margin(1e-6));
  CHECK(l[5] == Approx(-2e4).epsilon(1e-6));
  CHECK(l[9] == -inf);
  const auto lse = logsumexp<1>(x).to_vector();
  CHECK(lse[0] == Approx(1000 + std::log(4.0)));
  CHECK(lse[1] == Approx(1e4));
  auto all_masked = make<float, 1>({2}, {-inf, -inf});
  CHECK(logsumexp<0>(all_masked).item() == -inf);
  // A causal row longer than one SIMD vector, masked inside its partial last vector (the tail path).
  std::vector<float> row(21, 0.5f);
  row[17] = row[20] = -inf;
  row[18] = 2.f;
  const auto p = softmax(make<float, 1>({21}, row)).to_vector();
  const double z = 18 * std::exp(0.5) + std::exp(2.0);
  CHECK(p[17] == 0.0f);
  CHECK(p[20] == 0.0f);
  CHECK(p[18] == Approx(std::exp(2.0) / z));
  CHECK(p[19] == Approx(std::exp(0.5) / z));
}

// ---- matmul ------------------------------------------------------------------------------------------
namespace {
// op(A)[M,K] op(B)[K,N] with A stored [M,K] (or [K,M] when ta) and B [K,N] (or [N,K] when tb).
template <class T>
std::vector<double> mm_ref(bool ta, bool tb, index_t M, index_t N, index_t K, const T* A, const T* B) {
  std::vector<double> C(M * N, 0.0);
  for (index_t i = 0; i < M; ++i)
    for (index_t j = 0; j < N; ++j) {
      double s = 0;
      for (index_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * M + i] : A[i * K + k];
        const double b = tb ? B[j * K + k] : B[k * N + j];
        s += a * b;
      }
      C[i * N + j] = s;
    }
  return C;
}
template <class T>
double mm_tol(index_t K) {
  return (std::is_same_v<T, float> ? 3e-7 : 1e-15) * double(std::max<index_t>(K, 1)) * 4;
}
template <class T, bool TA, bool TB>
void check_mm(index_t M, index_t N, index_t K, std::uint64_t seed) {
  auto a = make_random<T, 2>(TA ? std::array<index_t, 2>{K, M} : std::array<index_t, 2>{M, K}, -1, 1, seed);
  auto b = make_random<T, 2>(TB ? std::array<index_t, 2>{N, K} : std::array<index_t, 2>{K, N}, -1, 1, seed + 1);
  auto c = matmul<TA, TB>(a, b);
  INFO("matmul<" << TA << ", " << TB << "> M " << M << " N " << N << " K " << K);
  REQUIRE(c.extents() == std::array<index_t, 2>{M, N});
  CHECK_CLOSE(c.to_vector(), mm_ref(TA, TB, M, N, K, a.data(), b.data()), mm_tol<T>(K), mm_tol<T>(K));
}
template <class T>
void check_mm_all(index_t M, index_t N, index_t K, std::uint64_t seed) {
  check_mm<T, false, false>(M, N, K, seed);
  check_mm<T, false, true>(M, N, K, seed + 10);
  check_mm<T, true, false>(M, N, K, seed + 20);
  check_mm<T, true, true>(M, N, K, seed + 30);
}
template <class T, bool TA, bool TB>
void check_batched(index_t batch, index_t M, index_t N, index_t K, std::uint64_t seed) {
  auto a = make_random<T, 3>(TA ? std::array<index_t, 3>{batch, K, M} : std::array<index_t, 3>{batch, M, K}, -1, 1, seed);
  auto b = make_random<T, 3>(TB ? std::array<index_t, 3>{batch, N, K} : std::array<index_t, 3>{batch, K, N}, -1, 1, seed + 1);
  auto c = matmul<TA, TB>(a, b);
  INFO("batched matmul<" << TA << ", " << TB << "> batch " << batch << " M " << M << " N " << N << " K " << K);
  REQUIRE(c.extents() == std::array<index_t, 3>{batch, M, N});
  std::vector<double> ref;
  for (index_t i = 0; i < batch; ++i) {
    auto r = mm_ref(TA, TB, M, N, K, a.data() + i * M * K, b.data() + i * K * N);
    ref.insert(ref.end(), r.begin(), r.end());
  }
  CHECK_CLOSE(c.to_vector(), ref, mm_tol<T>(K), mm_tol<T>(K));
}
}  // namespace

TEMPLATE_TEST_CASE("matmul matches naive loops in all transpose forms", "[core][matmul]", float, double) {
  using T = TestType;
  check_mm_all<T>(1, 1, 1, 1);
  check_mm_all<T>(3, 5, 1, 2);     // K = 1
  check_mm_all<T>(1, 7, 4, 3);     // M = 1
  check_mm_all<T>(31, 1, 7, 4);    // N = 1
  check_mm_all<T>(17, 33, 15, 5);  // not multiples of 16
  check_mm_all<T>(16, 16, 16, 6);
  check_mm_all<T>(130, 150, 120, 7);  // above the threading threshold, split along N
  check_mm_all<T>(301, 40, 90, 8);    // split along M with a ragged last block
  check_mm_all<T>(257, 65, 40, 9);    // below the threshold
}

TEST_CASE("float GEMM on the packed kernel: every transpose, ragged tiles, K over one block, alpha and beta",
          "[core][matmul]") {
  // Sizes that reach the packed AVX-512 kernel where it is built (M >= 4 * 8 * threads, enough work),
  // with edge slivers in M (not a multiple of 8) and N (not a multiple of 48), K across two k-blocks
  // (> 384), N = 128 (the 6 x 64 tile shape), and M large enough for row chunks of several slivers.
  // beta = 0 must not read C: it is filled with NaN first. Elsewhere the Eigen path answers, and must
  // give the same results.
  ThreadCountGuard guard;
  for (std::size_t threads : {std::size_t(2), std::size_t(1)}) {
    cpu_backend::set_num_threads(threads);
    for (auto [M, N, K] : {std::array<index_t, 3>{67, 101, 33}, std::array<index_t, 3>{200, 48, 800},
                           std::array<index_t, 3>{130, 390, 385}, std::array<index_t, 3>{197, 128, 64},
                           std::array<index_t, 3>{1001, 100, 400}}) {  // rows in chunks of 7 slivers, the last ragged
      for (int form = 0; form < 4; ++form) {
        const bool ta = form & 1, tb = form & 2;
        const auto a = random_values<float>(M * K, -1, 1, 500 + form), b = random_values<float>(K * N, -1, 1, 510 + form);
        const auto c0 = random_values<float>(M * N, -1, 1, 520 + form);
        const auto ab = mm_ref(ta, tb, M, N, K, a.data(), b.data());
        for (float beta : {0.f, 1.f, -0.5f}) {
          std::vector<float> c = beta == 0.f ? std::vector<float>(M * N, std::numeric_limits<float>::quiet_NaN()) : c0;
          cpu_backend::GemmKernels::gemm(ta, tb, M, N, K, 0.75f, a.data(), ta ? M : K, b.data(), tb ? K : N, beta, c.data(), N);
          std::vector<double> want(M * N);
          for (index_t i = 0; i < M * N; ++i) want[i] = 0.75 * ab[i] + (beta == 0.f ? 0.0 : double(beta) * c0[i]);
          INFO("threads " << threads << " M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb << " beta " << beta);
          CHECK_CLOSE(c, want, mm_tol<float>(K), mm_tol<float>(K));
        }
      }
    }
  }
  // gemm_bias (nn.Linear's forward): C = alpha A B^T + bias, C not read, float (packed kernel) and double.
  for (index_t M : {index_t(150), index_t(5)}) {
    const index_t N = 100, K = 70;
    const auto a = random_values<float>(M * K, -1, 1, 540), b = random_values<float>(N * K, -1, 1, 541);
    const auto bias = random_values<float>(N, -1, 1, 542);
    const auto ab = mm_ref(false, true, M, N, K, a.data(), b.data());
    std::vector<double> want(M * N);
    for (index_t i = 0; i < M * N; ++i) want[i] = 2.0 * ab[i] + bias[i % N];
    std::vector<float> c(M * N, std::numeric_limits<float>::quiet_NaN());
    cpu_backend::GemmKernels::gemm_bias(false, true, M, N, K, 2.f, a.data(), K, b.data(), K, bias.data(), c.data(), N);
    CHECK_CLOSE(c, want, mm_tol<float>(K), mm_tol<float>(K));
    const std::vector<double> ad(a.begin(), a.end()), bd(b.begin(), b.end()), biasd(bias.begin(), bias.end());
    std::vector<double> cd(M * N, std::numeric_limits<double>::quiet_NaN());
    cpu_backend::GemmKernels::gemm_bias(false, true, M, N, K, 2.0, ad.data(), K, bd.data(), K, biasd.data(), cd.data(), N);
    CHECK_CLOSE(cd, want, 1e-12, 1e-12);
  }
  // gemm_epilogue: bias + residual, then GELU in place / beside the pre-activation / GELU's VJP, on
  // the packed kernel (float; K = 900 spans three k-blocks, so the activation must wait for the last
  // one; M and N leave edge tiles; N = 128 takes the 6 x 64 tile) and on the GEMM-then-pass path
  // (double), against the same computation in double.
  for (const auto& mnk : {std::array<index_t, 3>{150, 100, 900}, {67, 128, 70}, {5, 7, 3}}) {
    const index_t M = mnk[0], N = mnk[1], K = mnk[2];  // not a structured binding: clang 14 cannot capture one
    const auto a = random_values<float>(M * K, -1, 1, 550), b = random_values<float>(N * K, -1, 1, 551);
    const auto bias = random_values<float>(N, -1, 1, 552), res = random_values<float>(M * N, -2, 2, 553);
    const auto pre_in = random_values<float>(M * N, -3, 3, 554);
    const auto ab = mm_ref(false, true, M, N, K, a.data(), b.data());
    std::vector<double> z(M * N), gelu_z(M * N), vjp_z(M * N);
    for (index_t i = 0; i < M * N; ++i) {
      z[i] = 0.5 * ab[i] + bias[i % N] + res[i];
      gelu_z[i] = op::gelu::apply(z[i]);
      double ga;
      op::gelu::vjp(double(pre_in[i]), 0.0, z[i], ga);
      vjp_z[i] = ga;
    }
    auto run = [&]<class T>(T, int mode) {  // mode 0: in place, 1: pre kept beside, 2: VJP
      const std::vector<T> at(a.begin(), a.end()), bt(b.begin(), b.end()), biast(bias.begin(), bias.end());
      const std::vector<T> rt(res.begin(), res.end()), pt(pre_in.begin(), pre_in.end());
      std::vector<T> c(M * N, std::numeric_limits<T>::quiet_NaN()), act(M * N, std::numeric_limits<T>::quiet_NaN());
      GemmEpilogue<T> ep;
      ep.bias = biast.data(), ep.residual = rt.data(), ep.ld_residual = N;
      if (mode == 1) ep.activated = act.data(), ep.ld_activated = N;
      if (mode == 2) ep.act_input = pt.data(), ep.ld_act_input = N;
      cpu_backend::GemmKernels::gemm_epilogue<op::gelu>(false, true, M, N, K, T(0.5), at.data(), K, bt.data(), K,
                                                        c.data(), N, ep);
      return std::pair{c, act};
    };
    for (int threads : {1, 2}) {
      cpu_backend::set_num_threads(std::size_t(threads));
      INFO("M " << M << " N " << N << " K " << K << " threads " << threads);
      const double tol = mm_tol<float>(K) * 4;  // GELU and its VJP have slopes of at most ~1.13
      CHECK_CLOSE(run(0.f, 0).first, gelu_z, tol, tol);
      const auto [pre, act] = run(0.f, 1);
      CHECK_CLOSE(pre, z, tol, tol);
      CHECK_CLOSE(act, gelu_z, tol, tol);
      CHECK_CLOSE(run(0.f, 2).first, vjp_z, tol, tol);
      CHECK_CLOSE(run(0.0, 0).first, gelu_z, 1e-12, 1e-12);
      CHECK_CLOSE(run(0.0, 2).first, vjp_z, 1e-12, 1e-12);
    }
  }
  // Inside a pool job (nested) the GEMM runs serially on the calling thread and still answers right.
  cpu_backend::set_num_threads(2);
  const index_t M = 96, N = 96, K = 64;
  const auto a = random_values<float>(M * K, -1, 1, 530), b = random_values<float>(K * N, -1, 1, 531);
  std::vector<float> c(M * N);
  cpu_backend::ThreadPool::instance().run_on_all([&](std::size_t t, std::size_t) {
    if (t == 0) cpu_backend::GemmKernels::gemm(false, false, M, N, K, 1.f, a.data(), K, b.data(), N, 0.f, c.data(), N);
  });
  CHECK_CLOSE(c, mm_ref(false, false, M, N, K, a.data(), b.data()), mm_tol<float>(K), mm_tol<float>(K));
}

TEST_CASE("thread pool: run_on_available does every item once and never calls a job after it returns",
          "[core][threads]") {
  // Jobs that take items from a shared counter, run back to back so that the worker is sometimes
  // still asleep (released) and sometimes joins: every item must be done exactly once, a worker
  // released from a job must never call it afterwards (the job lives on the caller's stack), and an
  // exception from a job still reaches the caller.
  ThreadCountGuard guard;
  cpu_backend::set_num_threads(2);
  auto& pool = cpu_backend::ThreadPool::instance();
  static std::atomic<int> open{0}, calls_after_return{0};
  std::size_t joined = 0;
  for (int job = 0; job < 3000; ++job) {
    const index_t n = 1 + job % 7;
    std::vector<std::atomic<int>> done(static_cast<std::size_t>(n));
    std::atomic<index_t> next{0};
    std::atomic<int> participants{0};
    open.store(1);
    pool.run_on_available([&](std::size_t, std::size_t) {
      if (open.load() == 0) calls_after_return.fetch_add(1);
      participants.fetch_add(1);
      for (index_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) done[std::size_t(i)].fetch_add(1);
    });
    open.store(0);
    bool once = true;
    for (const auto& d : done) once = once && d.load() == 1;
    REQUIRE(once);
    joined += participants.load() == 2;
  }
  INFO("jobs the worker joined: " << joined << " of 3000");
  CHECK(calls_after_return.load() == 0);
  CHECK_THROWS_AS(pool.run_on_available([](std::size_t t, std::size_t) {
    if (t == 0) throw ValueError("from the caller's share");
  }), ValueError);
  // The pool still runs a full job afterwards (every thread index once).
  std::vector<int> seen(2);
  pool.run_on_all([&](std::size_t t, std::size_t) { seen[t] += 1; });
  CHECK(seen == std::vector<int>{1, 1});
}

namespace {
// op(A) op(B) in double for operands with leading dimensions (A stored [M, lda] or [K, lda] when ta).
std::vector<double> strided_ref(bool ta, bool tb, index_t M, index_t N, index_t K, const float* A, index_t lda,
                                const float* B, index_t ldb) {
  std::vector<double> C(M * N, 0.0);
  for (index_t i = 0; i < M; ++i)
    for (index_t j = 0; j < N; ++j)
      for (index_t k = 0; k < K; ++k)
        C[i * N + j] += double(ta ? A[k * lda + i] : A[i * lda + k]) * double(tb ? B[j * ldb + k] : B[k * ldb + j]);
  return C;
}

/// Random operands of one GEMM form with leading dimensions wider than the matrices (lda + 3, ldb +
/// 5, ldc + 2), C's start values c0, and op(A) op(B) in double.
struct StridedOperands {
  index_t lda, ldb, ldc;
  std::vector<float> a, b, c0;
  std::vector<double> ab;
  StridedOperands(bool ta, bool tb, index_t M, index_t N, index_t K, std::uint64_t& seed)
      : lda((ta ? M : K) + 3), ldb((tb ? K : N) + 5), ldc(N + 2),
        a(random_values<float>((ta ? K : M) * lda, -1, 1, ++seed)),
        b(random_values<float>((tb ? N : K) * ldb, -1, 1, ++seed)),
        c0(random_values<float>(M * ldc, -1, 1, ++seed)),
        ab(strided_ref(ta, tb, M, N, K, a.data(), lda, b.data(), ldb)) {}
};

/// CHECKs C = beta c0 - 1.25 op(A) op(B) (what both strided cases compute) and that C's padding
/// columns still hold c0.
void check_strided_result(const std::vector<float>& c, const StridedOperands& ops, index_t M, index_t N, index_t K,
                          float beta) {
  std::vector<double> got, want;
  bool padding_kept = true;
  for (index_t i = 0; i < M; ++i) {
    for (index_t j = 0; j < N; ++j) {
      got.push_back(c[i * ops.ldc + j]);
      want.push_back(double(beta) * ops.c0[i * ops.ldc + j] - 1.25 * ops.ab[i * N + j]);
    }
    for (index_t j = N; j < ops.ldc; ++j) padding_kept = padding_kept && c[i * ops.ldc + j] == ops.c0[i * ops.ldc + j];
  }
  CHECK(padding_kept);
  CHECK_CLOSE(got, want, mm_tol<float>(K) * 2, mm_tol<float>(K) * 2);
}
}  // namespace

namespace {
/// Runs `call` directly, or (nested) on pool thread 0 inside a parallel region, where a GEMM runs
/// serially on the calling thread.
template <class F>
void run_maybe_nested(bool nested, F&& call) {
  if (nested)
    cpu_backend::ThreadPool::instance().run_on_all([&](std::size_t t, std::size_t) {
      if (t == 0) call();
    });
  else
    call();
}
}  // namespace

TEST_CASE("float GEMM edge shapes: M, N, K off the tile, strided operands, beta 1, every epilogue", "[core][matmul]") {
  // Every size pair from {1, 7, 17, 63, 65} (and M = 130, which reaches the packed kernel with two
  // threads on AVX2 and AVX-512 builds) in every transpose form, with leading dimensions wider than
  // the matrices: the padding of C holds a sentinel that must survive. Then the same sizes serially
  // inside a pool job (serial_gemm's thresholds differ), and each epilogue alone and together.
  ThreadCountGuard guard;
  cpu_backend::set_num_threads(2);
  const std::vector<index_t> sizes{1, 7, 17, 63, 65};
  std::uint64_t seed = 700;
  for (index_t M : {index_t(1), index_t(7), index_t(17), index_t(63), index_t(65), index_t(130)})
    for (index_t N : sizes)
      for (index_t K : {index_t(1), index_t(7), index_t(17), index_t(65), index_t(400)})
        for (int form = 0; form < 4; ++form) {
          const bool ta = form & 1, tb = form & 2;
          const StridedOperands ops(ta, tb, M, N, K, seed);
          const index_t lda = ops.lda, ldb = ops.ldb, ldc = ops.ldc;
          const auto &a = ops.a, &b = ops.b, &c0 = ops.c0;
          for (int nested = 0; nested < 2; ++nested) {
            std::vector<float> c = c0;  // beta = 1: accumulate onto C
            auto call = [&] {
              cpu_backend::GemmKernels::gemm(ta, tb, M, N, K, -1.25f, a.data(), lda, b.data(), ldb, 1.f, c.data(), ldc);
            };
            run_maybe_nested(nested, call);
            INFO("M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb << " nested " << nested);
            check_strided_result(c, ops, M, N, K, 1.f);
          }
        }
  // Epilogues one at a time and together (bias, residual, SiLU / ReLU in place, beside, VJP), K over
  // two k-blocks, ragged M and N, C and the side outputs with padded leading dimensions.
  for (const auto& mnk : {std::array<index_t, 3>{130, 65, 400}, {65, 17, 63}, {7, 63, 17}}) {
    const index_t M = mnk[0], N = mnk[1], K = mnk[2], ld = N + 3;
    const auto a = random_values<float>(M * K, -1, 1, 801), b = random_values<float>(N * K, -1, 1, 802);
    const auto bias = random_values<float>(N, -1, 1, 803), res = random_values<float>(M * ld, -2, 2, 804);
    const auto pre_in = random_values<float>(M * ld, -3, 3, 805);
    const auto ab = mm_ref(false, true, M, N, K, a.data(), b.data());
    for (int parts = 1; parts < 4; ++parts) {  // bit 0: bias, bit 1: residual
      const bool with_bias = parts & 1, with_res = parts & 2;
      std::vector<double> z(M * N);
      for (index_t i = 0; i < M; ++i)
        for (index_t j = 0; j < N; ++j)
          z[i * N + j] = 1.5 * ab[i * N + j] + (with_bias ? bias[j] : 0.0) + (with_res ? res[i * ld + j] : 0.0);
      auto run = [&]<class Act>(Act*, int mode) {  // mode 0: in place, 1: pre kept beside, 2: VJP
        std::vector<float> c(M * ld, std::numeric_limits<float>::quiet_NaN()), act = c;
        GemmEpilogue<float> ep;
        if (with_bias) ep.bias = bias.data();
        if (with_res) ep.residual = res.data(), ep.ld_residual = ld;
        if (mode == 1) ep.activated = act.data(), ep.ld_activated = ld;
        if (mode == 2) ep.act_input = pre_in.data(), ep.ld_act_input = ld;
        cpu_backend::GemmKernels::gemm_epilogue<Act>(false, true, M, N, K, 1.5f, a.data(), K, b.data(), K, c.data(), ld, ep);
        std::vector<double> cv, av;
        for (index_t i = 0; i < M; ++i)
          for (index_t j = 0; j < N; ++j) cv.push_back(c[i * ld + j]), av.push_back(act[i * ld + j]);
        return std::pair{cv, av};
      };
      const double tol = mm_tol<float>(K) * 8;
      INFO("M " << M << " N " << N << " K " << K << " bias " << with_bias << " residual " << with_res);
      CHECK_CLOSE(run(static_cast<void*>(nullptr), 0).first, z, tol, tol);
      auto check_act = [&]<class Act>(Act* tag) {
        std::vector<double> fz(M * N), vz(M * N);
        for (index_t i = 0; i < M; ++i)
          for (index_t j = 0; j < N; ++j) {
            fz[i * N + j] = Act::apply(z[i * N + j]);
            Act::vjp(double(pre_in[i * ld + j]), 0.0, z[i * N + j], vz[i * N + j]);
          }
        INFO("activation " << Act::name);
        CHECK_CLOSE(run(tag, 0).first, fz, tol, tol);
        const auto [pre, act] = run(tag, 1);
        CHECK_CLOSE(pre, z, tol, tol);
        CHECK_CLOSE(act, fz, tol, tol);
        CHECK_CLOSE(run(tag, 2).first, vz, tol * 4, tol * 4);
      };
      check_act(static_cast<op::silu*>(nullptr));
      check_act(static_cast<op::relu*>(nullptr));
    }
  }
}

#if defined(TTMOE_PACKED_GEMM)
TEST_CASE("packed GEMM split by columns (LLM prefill): every form, ragged units, k-blocks, beta, epilogues",
          "[core][matmul]") {
  // gemm_column_split directly, at shapes far below where gemm() picks it: M off the tile's rows, N
  // over several column units with a ragged last unit and last sliver, K over two k-blocks with a
  // remainder, leading dimensions wider than the matrices (the padding of C must survive), beta 0 (C
  // filled with NaN: not read), 1 and -0.5; 1 and 2 threads and nested in a pool job (serial).
  using cpu_backend::packed::WideTile;
  ThreadCountGuard guard;
  const index_t unit = cpu_backend::packed::kColumnUnit;
  std::uint64_t seed = 900;
  for (std::size_t threads : {std::size_t(1), std::size_t(2)}) {
    cpu_backend::set_num_threads(threads);
    for (const auto& mnk : {std::array<index_t, 3>{37, 3 * unit + 21, 801}, {5, 7, 3}, {64, 2 * unit, 384}})
      for (int form = 0; form < 4; ++form) {
        const index_t M = mnk[0], N = mnk[1], K = mnk[2];
        const bool ta = form & 1, tb = form & 2;
        const StridedOperands ops(ta, tb, M, N, K, seed);
        const index_t lda = ops.lda, ldb = ops.ldb, ldc = ops.ldc;
        const auto &a = ops.a, &b = ops.b, &c0 = ops.c0;
        for (float beta : {0.f, 1.f, -0.5f})
          for (int nested = 0; nested < 2; ++nested) {
            std::vector<float> c = c0;
            if (beta == 0.f)
              for (index_t i = 0; i < M; ++i)
                for (index_t j = 0; j < N; ++j) c[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
            auto call = [&] {
              cpu_backend::packed::gemm_column_split<WideTile, void>(ta, tb, M, N, K, -1.25f, a.data(), lda, b.data(),
                                                                     ldb, beta, c.data(), ldc, {});
            };
            run_maybe_nested(nested, call);
            INFO("threads " << threads << " M " << M << " N " << N << " K " << K << " ta " << ta << " tb " << tb
                            << " beta " << beta << " nested " << nested);
            check_strided_result(c, ops, M, N, K, beta);
          }
      }
  }
  // The epilogue (bias + residual + SiLU, the pre-activation kept beside) rides on the last k-block's
  // store of every unit, with the column offsets of the unit.
  cpu_backend::set_num_threads(2);
  const index_t M = 45, N = 2 * unit + 9, K = 700, ld = N + 3;
  const auto a = random_values<float>(M * K, -1, 1, 950), b = random_values<float>(N * K, -1, 1, 951);
  const auto bias = random_values<float>(N, -1, 1, 952), res = random_values<float>(M * ld, -2, 2, 953);
  const auto ab = mm_ref(false, true, M, N, K, a.data(), b.data());
  std::vector<float> c(M * ld, std::numeric_limits<float>::quiet_NaN()), act = c;
  GemmEpilogue<float> ep;
  ep.bias = bias.data(), ep.residual = res.data(), ep.ld_residual = ld, ep.activated = act.data(), ep.ld_activated = ld;
  cpu_backend::packed::gemm_column_split<WideTile, op::silu>(false, true, M, N, K, 1.5f, a.data(), K, b.data(), K, 0.f,
                                                             c.data(), ld, ep);
  std::vector<double> pre, post, want_pre, want_post;
  for (index_t i = 0; i < M; ++i)
    for (index_t j = 0; j < N; ++j) {
      const double z = 1.5 * ab[i * N + j] + bias[j] + res[i * ld + j];
      want_pre.push_back(z), want_post.push_back(op::silu::apply(z));
      pre.push_back(c[i * ld + j]), post.push_back(act[i * ld + j]);
    }
  const double tol = mm_tol<float>(K) * 8;
  CHECK_CLOSE(pre, want_pre, tol, tol);
  CHECK_CLOSE(post, want_post, tol, tol);
  // gemm() takes the column split for a wide, large B (an LLM projection's shape, fewer rows): the
  // same bits as calling it directly, and the right product.
  const index_t wn = 2 * 2 * unit + 40, wk = cpu_backend::packed::kColumnSplitMinB / wn + 1, wm = 70;
  REQUIRE(cpu_backend::packed::splits_columns<WideTile, float>(wm, wn, wk));
  const auto wa = random_values<float>(wm * wk, -1, 1, 960), wb = random_values<float>(wn * wk, -1, 1, 961);
  std::vector<float> via_gemm(wm * wn), direct(wm * wn);
  cpu_backend::packed::gemm(false, true, wm, wn, wk, 1.f, wa.data(), wk, wb.data(), wk, 0.f, via_gemm.data(), wn);
  cpu_backend::packed::gemm_column_split<WideTile, void>(false, true, wm, wn, wk, 1.f, wa.data(), wk, wb.data(), wk, 0.f,
                                                         direct.data(), wn, {});
  CHECK(via_gemm == direct);
  std::vector<double> row0(wn);  // the first row against a double reference (the whole product is slow in double)
  for (index_t j = 0; j < wn; ++j)
    for (index_t k = 0; k < wk; ++k) row0[j] += double(wa[k]) * wb[j * wk + k];
  CHECK_CLOSE(std::vector<float>(via_gemm.begin(), via_gemm.begin() + wn), row0, mm_tol<float>(wk), mm_tol<float>(wk));
}
#endif

TEST_CASE("matmul with K = 0 gives zeros, folded and batched forms match per-matrix loops", "[core][matmul]") {
  ThreadCountGuard guard;
  cpu_backend::set_num_threads(4);  // batches below and above the thread count take different paths
  auto a0 = Tensor<float, DynShape<2>>::zeros(DynShape<2>(3, 0));
  auto b0 = Tensor<float, DynShape<2>>::zeros(DynShape<2>(0, 4));
  auto c0 = matmul(a0, b0);
  CHECK(c0.to_vector() == std::vector<float>(12, 0.f));

  // Folded: [B, T, K] @ [K, N] is one [B*T, K] @ [K, N] GEMM; also x W^T with W [N, K].
  auto x = make_random<float, 3>({3, 5, 7}, -1, 1, 40);
  auto w = make_random<float, 2>({7, 6}, -1, 1, 41);
  auto wt = make_random<float, 2>({6, 7}, -1, 1, 42);
  auto y = matmul(x, w);
  CHECK(y.extents() == std::array<index_t, 3>{3, 5, 6});
  CHECK_CLOSE(y.to_vector(), mm_ref(false, false, 15, 6, 7, x.data(), w.data()), 1e-5, 1e-5);
  auto yt = matmul<false, true>(x, wt);
  CHECK_CLOSE(yt.to_vector(), mm_ref(false, true, 15, 6, 7, x.data(), wt.data()), 1e-5, 1e-5);
  auto x4 = make_random<double, 4>({2, 3, 4, 5}, -1, 1, 43);
  auto w4 = make_random<double, 2>({5, 3}, -1, 1, 44);
  CHECK_CLOSE(matmul(x4, w4).to_vector(), mm_ref(false, false, 24, 3, 5, x4.data(), w4.data()), 1e-14, 1e-14);
  // Static shapes keep their static extents.
  auto xs = Tensor<float, Shape<dyn, 4, 3>>::from_host(Shape<dyn, 4, 3>(2), random_values<float>(24, -1, 1, 45));
  auto ws = Tensor<float, Shape<3, 2>>::from_host({}, random_values<float>(6, -1, 1, 46));
  Tensor<float, Shape<dyn, 4, 2>> ys = matmul(xs, ws);
  CHECK_CLOSE(ys.to_vector(), mm_ref(false, false, 8, 2, 3, xs.data(), ws.data()), 1e-6, 1e-6);

  // Batched, every transpose form, batch below and above the thread count.
  for (index_t batch : {1u, 2u, 5u}) {
    check_batched<float, false, false>(batch, 7, 9, 11, 50 + batch);
    check_batched<float, false, true>(batch, 7, 9, 11, 60 + batch);
    check_batched<float, true, false>(batch, 7, 9, 11, 70 + batch);
    check_batched<double, true, true>(batch, 7, 9, 11, 80 + batch);
  }
  check_batched<double, false, false>(3, 100, 120, 90, 90);  // batch < threads: one threaded GEMM per matrix
  check_batched<float, false, true>(6, 100, 120, 90, 95);     // batch >= threads: matrices split over threads
  // Rank 4 batched: [a, b, M, K] @ [a, b, K, N].
  auto p = make_random<double, 4>({2, 3, 4, 5}, -1, 1, 91);
  auto q = make_random<double, 4>({2, 3, 5, 2}, -1, 1, 92);
  auto pq = matmul(p, q);
  CHECK(pq.extents() == std::array<index_t, 4>{2, 3, 4, 2});
  std::vector<double> ref;
  for (index_t i = 0; i < 6; ++i) {
    auto r = mm_ref(false, false, 4, 2, 5, p.data() + i * 20, q.data() + i * 10);
    ref.insert(ref.end(), r.begin(), r.end());
  }
  CHECK_CLOSE(pq.to_vector(), ref, 1e-14, 1e-14);
}

TEST_CASE("matmul shape errors name the op and both shapes", "[core][matmul]") {
  auto a = make_random<float, 2>({2, 3}, -1, 1, 1);
  auto b = make_random<float, 2>({4, 5}, -1, 1, 2);
  CHECK_THROWS_AS(matmul(a, b), ShapeError);
  CHECK_THROWS_WITH(matmul(a, b), Catch::Contains("matmul") && Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]") &&
                                      Catch::Contains("inner"));
  CHECK_THROWS_WITH((matmul<false, true>(a, b)), Catch::Contains("matmul<B^T>") && Catch::Contains("(3 vs 5)"));
  CHECK_NOTHROW(matmul<true, false>(a, make_random<float, 2>({2, 5}, -1, 1, 3)));
  auto p = make_random<float, 3>({2, 3, 4}, -1, 1, 4);
  auto q = make_random<float, 3>({3, 4, 5}, -1, 1, 5);
  CHECK_THROWS_WITH(matmul(p, q), Catch::Contains("batch") && Catch::Contains("[2, 3, 4]") && Catch::Contains("[3, 4, 5]"));
}

// ---- indexing ----------------------------------------------------------------------------------------
TEST_CASE("index_select picks rows and reports bad indices", "[core][indexing]") {
  std::vector<float> v(30);
  std::iota(v.begin(), v.end(), 0.f);
  auto x = make<float, 3>({5, 3, 2}, v);
  auto idx = IndexTensor<Shape<4>>::from_host({}, {4, 0, 4, 2});
  auto y = index_select(x, idx);
  static_assert(std::is_same_v<decltype(y), Tensor<float, Shape<4, dyn, dyn>>>);
  CHECK(y.extents() == std::array<index_t, 3>{4, 3, 2});
  std::vector<float> ref;
  for (std::int64_t r : {4, 0, 4, 2})
    for (int k = 0; k < 6; ++k) ref.push_back(float(r * 6 + k));
  CHECK(y.to_vector() == ref);
  auto bad = IndexTensor<Shape<2>>::from_host({}, {1, 5});
  CHECK_THROWS_AS(index_select(x, bad), ValueError);
  CHECK_THROWS_WITH(index_select(x, bad), Catch::Contains("index_select") && Catch::Contains("index 5") &&
                                              Catch::Contains("position 1") && Catch::Contains("[0, 5)"));
  auto negative = IndexTensor<Shape<1>>::from_host({}, {-1});
  CHECK_THROWS_WITH(index_select(x, negative), Catch::Contains("index -1"));
}

TEST_CASE("index_select of wide rows: gather and the VJP's accumulation over repeated rows", "[core][indexing]") {
  // Rows of 300 elements (several column chunks of the CPU's scatter_add_rows) and 2000 picks (the
  // gather splits them over threads), with rows picked many times and some never: the gradient of
  // row r must be the sum of the upstream rows that picked it.
  const index_t n = 37, row = 300, m = 2000;
  std::vector<float> xv(std::size_t(n * row));
  for (std::size_t i = 0; i < xv.size(); ++i) xv[i] = float(i % 1013) * 0.5f;
  auto x = make<float, 2>({n, row}, xv);
  x.set_requires_grad();
  std::vector<std::int64_t> iv(static_cast<std::size_t>(m));
  for (std::size_t j = 0; j < iv.size(); ++j) iv[j] = std::int64_t((j * 7 + j / 13) % std::size_t(n - 3));
  auto idx = IndexTensor<DynShape<1>>::from_host(DynShape<1>(m), iv);
  std::vector<float> gv(std::size_t(m * row));
  for (std::size_t i = 0; i < gv.size(); ++i) gv[i] = float((i * 31) % 17) - 8.0f;  // small integers: exact sums
  auto g = make<float, 2>({m, row}, gv);
  Tensor<float, DynShape<2>> y;
  {
    autograd::Tape tape;
    y = index_select(x, idx);
    autograd::backward(tape, sum_all(y * g));
  }
  const auto yv = y.to_vector(), dx = x.grad().to_vector();
  std::vector<float> want(std::size_t(n * row), 0.0f);
  for (index_t j = 0; j < m; ++j)
    for (index_t i = 0; i < row; ++i) {
      REQUIRE(yv[std::size_t(j * row + i)] == xv[std::size_t(iv[std::size_t(j)] * row + i)]);
      want[std::size_t(iv[std::size_t(j)] * row + i)] += gv[std::size_t(j * row + i)];
    }
  CHECK(dx == want);
  for (index_t r = n - 3; r < n; ++r) CHECK(dx[std::size_t(r * row)] == 0.0f);  // never picked
}

namespace {
template <int Axis>
void check_gather_scatter(const std::array<index_t, 3>& ex, index_t m, std::uint64_t seed) {
  constexpr std::size_t A = Axis < 0 ? std::size_t(Axis + 3) : std::size_t(Axis);
  auto x = make_random<double, 3>(ex, -1, 1, seed);
  auto ei = ex;
  ei[A] = m;
  Rng r(seed + 1);
  std::vector<std::int64_t> iv(ei[0] * ei[1] * ei[2]);
  for (auto& i : iv) i = r.index(ex[A]);
  auto idx = IndexTensor<DynShape<3>>::from_host(DynShape<3>::from_extents(ei), iv);
  INFO("axis " << Axis << " x " << extents_to_string(ex) << " index " << extents_to_string(ei));
  // gather: out[p] = x[p with axis coordinate replaced by idx[p]].
  auto g = gather<Axis>(x, idx);
  CHECK(g.extents() == ei);
  const auto xs = strides_of(ex);
  std::vector<double> ref(iv.size());
  for (index_t p = 0; p < iv.size(); ++p) {
    auto c = unravel(p, ei);
    c[A] = static_cast<index_t>(iv[p]);
    ref[p] = x.data()[c[0] * xs[0] + c[1] * xs[1] + c[2] * xs[2]];
  }
  CHECK_CLOSE(g.to_vector(), ref, 0.0, 0.0);
  // scatter_add: out = base; out[p with axis coordinate idx[p]] += src[p] (duplicates accumulate).
  auto src = make_random<double, 3>(ei, -1, 1, seed + 2);
  auto out = scatter_add<Axis>(x, idx, src);
  CHECK(out.extents() == ex);
  auto sref = as_double(x.to_vector());
  for (index_t p = 0; p < iv.size(); ++p) {
    auto c = unravel(p, ei);
    c[A] = static_cast<index_t>(iv[p]);
    sref[c[0] * xs[0] + c[1] * xs[1] + c[2] * xs[2]] += src.data()[p];
  }
  CHECK_CLOSE(out.to_vector(), sref, 1e-15, 1e-15);
  CHECK(out.data() != x.data());  // the base is not modified in place
}
}  // namespace

TEST_CASE("gather and scatter_add along every axis match naive loops", "[core][indexing]") {
  check_gather_scatter<0>({4, 3, 5}, 6, 1);
  check_gather_scatter<1>({2, 7, 3}, 9, 2);
  check_gather_scatter<2>({3, 2, 5}, 4, 3);
  check_gather_scatter<-1>({64, 33, 17}, 20, 4);  // enough rows to split over threads
  check_gather_scatter<0>({3, 2, 2}, 1, 5);
}

TEST_CASE("gather and scatter_add report mismatched shapes and bad indices", "[core][indexing]") {
  auto x = make_random<float, 2>({3, 4}, -1, 1, 1);
  auto idx = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 2), {0, 1, 2, 3});
  CHECK_THROWS_AS(gather<1>(x, idx), ShapeError);
  CHECK_THROWS_WITH(gather<1>(x, idx), Catch::Contains("gather") && Catch::Contains("[3, 4]") && Catch::Contains("[2, 2]"));
  auto far = IndexTensor<DynShape<2>>::from_host(DynShape<2>(3, 1), {0, 4, 1});
  CHECK_THROWS_WITH(gather<1>(x, far), Catch::Contains("gather") && Catch::Contains("index 4") && Catch::Contains("[0, 4)"));
  auto ok_idx = IndexTensor<DynShape<2>>::from_host(DynShape<2>(3, 1), {0, 3, 1});
  auto src = make_random<float, 2>({3, 2}, -1, 1, 2);
  CHECK_THROWS_WITH(scatter_add<1>(x, ok_idx, src), Catch::Contains("scatter_add") && Catch::Contains("[3, 1]") && Catch::Contains("[3, 2]"));
  auto idx_rows = IndexTensor<DynShape<2>>::from_host(DynShape<2>(2, 1), {0, 1});
  auto src_rows = make_random<float, 2>({2, 1}, -1, 1, 3);
  CHECK_THROWS_WITH(scatter_add<1>(x, idx_rows, src_rows), Catch::Contains("scatter_add") && Catch::Contains("[3, 4]") && Catch::Contains("[2, 1]"));
  CHECK_THROWS_AS(scatter_add<1>(x, far, make_random<float, 2>({3, 1}, -1, 1, 4)), ValueError);
}

namespace {
template <int Axis>
void check_concat_narrow(std::uint64_t seed) {
  constexpr std::size_t A = Axis < 0 ? std::size_t(Axis + 3) : std::size_t(Axis);
  std::vector<Tensor<float, DynShape<3>>> parts;
  std::vector<index_t> lens = {2, 1, 3};
  for (std::size_t i = 0; i < lens.size(); ++i) {
    std::array<index_t, 3> e{4, 3, 2};
    e[A] = lens[i];
    parts.push_back(make_random<float, 3>(e, -1, 1, seed + i));
  }
  auto c = concat<Axis>(parts);
  std::array<index_t, 3> ec{4, 3, 2};
  ec[A] = 6;
  INFO("concat axis " << Axis);
  REQUIRE(c.extents() == ec);
  std::vector<double> ref(c.numel());
  for (index_t p = 0; p < c.numel(); ++p) {
    auto idx = unravel(p, ec);
    std::size_t part = 0;
    while (idx[A] >= lens[part]) idx[A] -= lens[part++];
    const auto pe = parts[part].extents();
    const auto ps = strides_of(pe);
    ref[p] = parts[part].data()[idx[0] * ps[0] + idx[1] * ps[1] + idx[2] * ps[2]];
  }
  CHECK_CLOSE(c.to_vector(), ref, 0.0, 0.0);
  // narrow gives back the middle part exactly.
  auto mid = narrow<Axis>(c, 2, 1);
  CHECK(mid.extents() == parts[1].extents());
  CHECK(mid.to_vector() == parts[1].to_vector());
  auto last = narrow<Axis>(c, 3, 3);
  CHECK(last.to_vector() == parts[2].to_vector());
  CHECK_THROWS_AS(narrow<Axis>(c, 4, 3), ValueError);
  CHECK_THROWS_WITH(narrow<Axis>(c, 5, 2), Catch::Contains("narrow") && Catch::Contains("[5, 7)") && Catch::Contains(extents_to_string(ec)));
}
}  // namespace

TEST_CASE("concat and narrow along every axis", "[core][indexing]") {
  check_concat_narrow<0>(10);
  check_concat_narrow<1>(20);
  check_concat_narrow<2>(30);
  check_concat_narrow<-2>(40);
  std::vector<Tensor<float, DynShape<2>>> bad = {make_random<float, 2>({2, 3}, -1, 1, 1), make_random<float, 2>({2, 4}, -1, 1, 2)};
  CHECK_THROWS_AS(concat<0>(bad), ShapeError);
  CHECK_THROWS_WITH(concat<0>(bad), Catch::Contains("concat") && Catch::Contains("[2, 3]") && Catch::Contains("[2, 4]"));
  CHECK_NOTHROW(concat<1>(bad));
  CHECK_THROWS_AS(concat<0>(std::vector<Tensor<float, DynShape<2>>>{}), ValueError);
}

namespace {
template <std::size_t... P, class S>
void check_permute(const Tensor<double, S>& x) {
  constexpr std::size_t R = S::rank;
  constexpr std::array<std::size_t, R> perm{P...};
  auto y = permute<P...>(x);
  const auto ex = x.extents();
  std::array<index_t, R> ey{};
  for (std::size_t d = 0; d < R; ++d) ey[d] = ex[perm[d]];
  INFO("permute " << extents_to_string(std::array<index_t, R>{P...}) << " of " << extents_to_string(ex));
  REQUIRE(y.extents() == ey);
  const auto xs = strides_of(ex);
  std::vector<double> ref(y.numel());
  for (index_t p = 0; p < y.numel(); ++p) {
    const auto oi = unravel(p, ey);
    index_t off = 0;
    for (std::size_t d = 0; d < R; ++d) off += oi[d] * xs[perm[d]];
    ref[p] = x.data()[off];
  }
  CHECK_CLOSE(y.to_vector(), ref, 0.0, 0.0);
}
}  // namespace

TEST_CASE("permute and transpose match index arithmetic", "[core][indexing]") {
  auto x = make_random<double, 3>({2, 3, 4}, -1, 1, 1);
  check_permute<0, 1, 2>(x);
  check_permute<0, 2, 1>(x);
  check_permute<1, 0, 2>(x);
  check_permute<1, 2, 0>(x);
  check_permute<2, 0, 1>(x);
  check_permute<2, 1, 0>(x);
  auto x4 = make_random<double, 4>({3, 5, 2, 7}, -1, 1, 2);
  check_permute<3, 1, 0, 2>(x4);
  check_permute<0, 2, 3, 1>(x4);
  auto big = make_random<double, 3>({64, 65, 33}, -1, 1, 3);  // many rows: threaded
  check_permute<2, 0, 1>(big);
  auto m = make_random<double, 2>({3, 5}, -1, 1, 4);
  auto mt = transpose(m);
  CHECK(mt.extents() == std::array<index_t, 2>{5, 3});
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 5; ++j) CHECK(mt(j, i) == m(i, j));
  auto bt = transpose(x);
  CHECK(bt.extents() == std::array<index_t, 3>{2, 4, 3});
  CHECK(bt(1, 3, 2) == x(1, 2, 3));
}

TEST_CASE("one_hot and topk", "[core][indexing]") {
  auto labels = IndexTensor<Shape<4>>::from_host({}, {2, 0, 2, 1});
  auto oh = one_hot(labels, 3);
  CHECK(oh.extents() == std::array<index_t, 2>{4, 3});
  CHECK(oh.to_vector() == std::vector<float>{0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 0});
  CHECK_THROWS_WITH(one_hot(labels, 2), Catch::Contains("one_hot") && Catch::Contains("index 2"));
  auto ohd = one_hot<double>(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, 2), {1, 0}), 2);
  CHECK(ohd.to_vector() == std::vector<double>{0, 1, 1, 0});

  // Descending, ties by lower index, NaN ranks highest.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto x = make<float, 2>({2, 5}, {1, 3, 3, 0, 2, /**/ 4, nan, -1, 4, 5});
  auto [v, i] = topk(x, 3);
  CHECK(v.extents() == std::array<index_t, 2>{2, 3});
  CHECK(i.to_vector() == std::vector<std::int64_t>{1, 2, 4, 1, 4, 0});
  const auto vv = v.to_vector();
  CHECK(vv[0] == 3);
  CHECK(vv[1] == 3);
  CHECK(vv[2] == 2);
  CHECK(std::isnan(vv[3]));
  CHECK(vv[4] == 5);
  CHECK(vv[5] == 4);
  // Against a sort on a larger random input.
  auto r = make_random<double, 2>({37, 50}, -1, 1, 5);
  auto [rv, ri] = topk(r, 7);
  for (index_t row = 0; row < 37; ++row) {
    std::vector<index_t> order(50);
    std::iota(order.begin(), order.end(), index_t(0));
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return r(row, a) > r(row, b); });
    for (index_t k = 0; k < 7; ++k) {
      CHECK(ri(row, k) == static_cast<std::int64_t>(order[k]));
      CHECK(rv(row, k) == r(row, order[k]));
    }
  }
  CHECK(topk(x, 5).first.extents() == std::array<index_t, 2>{2, 5});
  CHECK_THROWS_AS(topk(x, 6), ValueError);
  CHECK_THROWS_WITH(topk(x, 6), Catch::Contains("topk") && Catch::Contains("k = 6") && Catch::Contains("[2, 5]"));
}
