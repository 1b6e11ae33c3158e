// Finite-difference gradient checks of the MoE / TTMM components (tests/support/gradcheck.hpp), and
// the coverage test of this executable: every tape node recorded under include/ttmoe/moe must be
// produced by one of these cases (tests/support/gradcheck_coverage.hpp).
//
// Discrete choices (top-k picks, sparse-softmax selection and cap, relu) are constants of the
// function only away from their switching points, so each such case declares a kink: the distance
// of the drawn inputs to the nearest switch, divided by how far one +-h input step can move the
// compared quantities; the harness re-draws until that exceeds 3h. MoE-LayerNorm's straight-through
// coefficient p / stopgrad(p) also needs the module's test hook (coefficient_denominator), so that
// finite differences see the function whose derivative the straight-through gradient is.
// The MoE-FFN cases (the block at the end of this file) belong to the MoE-FFN rework.

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gradcheck_coverage.hpp"
#include "gradcheck.hpp"
#include "ttmoe/moe/aux_losses.hpp"
#include "ttmoe/moe/cosine_router.hpp"
#include "ttmoe/moe/gated_combine.hpp"
#include "ttmoe/moe/lora.hpp"
#include "ttmoe/moe/lora_merge.hpp"
#include "ttmoe/moe/moe_layernorm.hpp"
#include "ttmoe/moe/router.hpp"
#include "ttmoe/moe/sparse_softmax.hpp"

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {

using T1 = Tensor<double, DynShape<1>>;
using T2 = Tensor<double, DynShape<2>>;
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Flattens and concatenates outputs so one check covers all of them.
template <class... Ts>
Tensor<double, DynShape<1>> flat_cat(const Ts&... ts) {
  std::vector<Tensor<double, DynShape<1>>> parts{ts.reshape(DynShape<1>(ts.numel()))...};
  return concat<0>(parts);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Smallest gap between two values of one row of a row-major [rows, cols] matrix (where a top-k
/// pick or its order can switch).
double min_row_gap(const std::vector<double>& m, index_t rows, index_t cols) {
  double g = kInf;
  std::vector<double> r(cols);
  for (index_t i = 0; i < rows; ++i) {
    std::copy(m.begin() + i * cols, m.begin() + (i + 1) * cols, r.begin());
    std::sort(r.begin(), r.end());
    for (index_t j = 1; j < cols; ++j) g = std::min(g, r[j] - r[j - 1]);
  }
  return g;
}

/// z W^T (+ b) for z [N, D], W [E, D], b [E] (b may be empty: no bias).
std::vector<double> affine(const std::vector<double>& z, index_t N, index_t D, const std::vector<double>& w,
                           const std::vector<double>& b, index_t E) {
  std::vector<double> o(N * E);
  for (index_t n = 0; n < N; ++n)
    for (index_t e = 0; e < E; ++e) {
      double s = b.empty() ? 0.0 : b[e];
      for (index_t d = 0; d < D; ++d) s += z[n * D + d] * w[e * D + d];
      o[n * E + e] = s;
    }
  return o;
}

}  // namespace

// ---- MoE-LayerNorm -----------------------------------------------------------------------------------
namespace {
/// MoE-LayerNorm with the straight-through denominator frozen at the base point (the module's test
/// hook): the first (recorded) call of a draw computes stopgrad(p_top); the finite-difference calls
/// reuse it, so they see the function whose derivative is the straight-through gradient.
Output moe_ln(const Inputs& in, bool per_token, index_t top_k, std::shared_ptr<T2> denom) {
  moe::MoELayerNorm<double> m;
  auto x = in.get<3>(0);
  const index_t Dm = x.extent(2);
  auto rng = in.rng(7);
  std::vector<double> w(Dm), b(Dm);
  for (auto& v : w) v = rng.uniform(0.5, 1.5);
  for (auto& v : b) v = rng.uniform(-0.5, 0.5);
  m.weight = T1::from_host(DynShape<1>(Dm), w);
  m.bias = T1::from_host(DynShape<1>(Dm), b);
  m.experts.weight_delta = in.get<2>(1);
  m.experts.bias_delta = in.get<2>(2);
  m.router.weight = in.get<2>(3);
  m.router.bias = in.get<1>(4);
  m.per_token = per_token;
  m.top_k = top_k;
  if (autograd::is_recording()) {
    autograd::NoGrad ng;
    m.forward(x);
    *denom = gather<1>(m.probs, m.top_index);
  }
  m.coefficient_denominator = *denom;
  auto y = m.forward(x);
  auto bl = m.balance_loss();
  return flat_cat(y, m.probs, bl);
}

/// D >= 3: with D = 2 a row normalises to (+-1, -+1), whose derivative blows up as the two values
/// meet (a near-kink at h-scale steps).
Shapes moe_ln_shapes(Rng& r) {
  const index_t B = r.ext(2, 4), T = r.ext(1, 4), D = r.ext(3, 6), E = r.ext(2, 4);
  return {{B, T, D}, {E, D}, {E, D}, {E, D}, {E}};
}

/// The router's picks (and their order: the frozen denominators are per pick position) switch where
/// two logits of a row tie, per sample (token mean) or per token. One input step moves a logit gap by
/// at most 2h max(1, |x|, |W|).
double moe_ln_kink(const Draw& d) {
  const auto& e = d.extents[0];
  const index_t B = e[0], T = e[1], D = e[2], E = d.extents[3][0];
  const auto& x = d.values[0];
  std::vector<double> zs(B * D, 0.0);
  for (index_t b = 0; b < B; ++b)
    for (index_t t = 0; t < T; ++t)
      for (index_t k = 0; k < D; ++k) zs[b * D + k] += x[(b * T + t) * D + k] / double(T);
  const double gap = std::min(min_row_gap(affine(zs, B, D, d.values[3], d.values[4], E), B, E),
                              min_row_gap(affine(x, B * T, D, d.values[3], d.values[4], E), B * T, E));
  return gap / (2 * std::max({1.0, max_abs(x), max_abs(d.values[3])}));
}
}  // namespace

GRADCHECK_CASE("moe_layernorm") {
  auto d1 = std::make_shared<T2>(), d2 = std::make_shared<T2>(), d3 = std::make_shared<T2>();
  return Case()
      .kink(moe_ln_kink)
      .variant("per_sample", moe_ln_shapes, [d1](const Inputs& in) { return moe_ln(in, false, 1, d1); })
      .variant("per_token", moe_ln_shapes, [d2](const Inputs& in) { return moe_ln(in, true, 1, d2); })
      .variant("per_sample top-2", moe_ln_shapes, [d3](const Inputs& in) { return moe_ln(in, false, 2, d3); })
      .repeat(3);
}

// ---- routers -------------------------------------------------------------------------------------------
namespace {
/// Linear router inputs: x [N, D], weight [E, D], bias [E], noise [N, E] (constant, N(0,1)-like).
Shapes linear_router_shapes(Rng& r) {
  const index_t N = r.ext(1, 5), D = r.ext(1, 5), E = r.ext(2, 5);
  return {{N, D}, {E, D}, {E}, {N, E}};
}
constexpr double kGateNoise = 1.0;

/// Picks (and their order in top_probs / top_gates) switch where two logits of a row tie; the union
/// over with / without bias and with / without noise covers every variant. One input step moves a
/// gap by at most 2h max(1, |x|, |W|).
double linear_router_kink(const Draw& d) {
  const index_t N = d.extents[0][0], D = d.extents[0][1], E = d.extents[1][0];
  double gap = kInf;
  for (bool bias : {false, true}) {
    const auto clean = affine(d.values[0], N, D, d.values[1], bias ? d.values[2] : std::vector<double>{}, E);
    auto noisy = clean;
    for (index_t i = 0; i < N * E; ++i) noisy[i] += d.values[3][i] * kGateNoise / double(E);
    gap = std::min({gap, min_row_gap(clean, N, E), min_row_gap(noisy, N, E)});
  }
  return gap / (2 * std::max({1.0, max_abs(d.values[0]), max_abs(d.values[1])}));
}

/// Every differentiable output of a routing call, flattened.
Tensor<double, DynShape<1>> router_outputs(const moe::RouterOutput<double>& o) {
  return flat_cat(o.logits, o.noisy_logits, o.probs, o.top_probs, o.top_gates, o.gates);
}

Output linear_router(const Inputs& in, index_t k, bool bias, bool renormalize, bool noise) {
  moe::LinearRouter<double> r;
  r.weight = in.get<2>(1);
  if (bias) r.bias = in.get<1>(2);
  const index_t E = r.weight.extent(0);
  r.top_k = k ? k : E;
  r.renormalize = renormalize;
  r.gate_noise = kGateNoise;
  return router_outputs(r.forward(in.get<2>(0), noise ? in.get<2>(3) : T2()));
}
}  // namespace

GRADCHECK_CASE("linear_router") {
  return Case()
      .constant_input(3)
      .kink(linear_router_kink)
      .variant("bias, top-1", linear_router_shapes, [](const Inputs& in) { return linear_router(in, 1, true, false, false); })
      .variant("bias, top-2 renormalised", linear_router_shapes,
               [](const Inputs& in) { return linear_router(in, 2, true, true, false); })
      .variant("bias, top-k = E renormalised", linear_router_shapes,
               [](const Inputs& in) { return linear_router(in, 0, true, true, false); })
      .variant("no bias, top-2", linear_router_shapes, [](const Inputs& in) { return linear_router(in, 2, false, false, false); })
      .variant("no bias, top-1 renormalised (gate 1)", linear_router_shapes,
               [](const Inputs& in) { return linear_router(in, 1, false, true, false); })
      .variant("bias, training noise, top-2", linear_router_shapes,
               [](const Inputs& in) { return linear_router(in, 2, true, false, true); })
      .variant("bias, training noise, top-2 renormalised", linear_router_shapes,
               [](const Inputs& in) { return linear_router(in, 2, true, true, true); });
}

GRADCHECK_CASE("route_logits topk_gates") {
  // The routing step every router shares, on logits directly: noise, softmax, top-k, gates.
  auto shapes = [](Rng& r) {
    const index_t N = r.ext(1, 6), E = r.ext(2, 6);
    return Shapes{{N, E}, {N, E}};
  };
  auto f = [](index_t k, bool renormalize, bool noise) {
    return [=](const Inputs& in) -> Output {
      auto logits = in.get<2>(0);
      const index_t kk = std::min(k, logits.extent(1));
      return router_outputs(moe::route_logits(logits, noise ? in.get<2>(1) : T2(), kk, renormalize, 0.5, "gradcheck"));
    };
  };
  return Case()
      .constant_input(1)
      .kink([](const Draw& d) {
        // One step moves one logit by h: a gap by at most h. Clean and noisy (sigma 0.5 / E) gaps.
        const index_t N = d.extents[0][0], E = d.extents[0][1];
        auto noisy = d.values[0];
        for (index_t i = 0; i < N * E; ++i) noisy[i] += d.values[1][i] * 0.5 / double(E);
        return std::min(min_row_gap(d.values[0], N, E), min_row_gap(noisy, N, E));
      })
      .variant("top-1", shapes, f(1, false, false))
      .variant("top-2 renormalised", shapes, f(2, true, false))
      .variant("top-3 with noise", shapes, f(3, false, true))
      .variant("top-2 with noise, renormalised", shapes, f(2, true, true));
}

namespace {
/// Cosine router inputs: x [N, D], proj.weight [H, D], proj.bias [H], codebook [H, E], noise [N, E]
/// (constant), log_scale [].
Shapes cosine_shapes(Rng& r) {
  const index_t N = r.ext(2, 6), D = r.ext(2, 5), H = r.ext(2, 5), E = r.ext(2, 4);
  return {{N, D}, {H, D}, {H}, {H, E}, {N, E}, {}};
}

/// Gaps of the cosine router's clean and noisy logits s * <h_n / |h_n|, c_e / |c_e|>, over a bound on
/// how far one input step moves a gap: 2 s max(max(1, |x|, sqrt(H) |W|) / min |h_n|, 1 / min |c_e|, 1).
double cosine_kink(const Draw& d) {
  const index_t N = d.extents[0][0], D = d.extents[0][1], H = d.extents[1][0], E = d.extents[3][1];
  const auto& x = d.values[0];
  const auto& W = d.values[1];
  const auto& c = d.values[3];
  const auto h = affine(x, N, D, W, d.values[2], H);
  std::vector<double> hn(N), cn(E, 0.0);
  for (index_t n = 0; n < N; ++n) {
    double s = 0;
    for (index_t j = 0; j < H; ++j) s += h[n * H + j] * h[n * H + j];
    hn[n] = std::sqrt(s);
  }
  for (index_t j = 0; j < H; ++j)
    for (index_t e = 0; e < E; ++e) cn[e] += c[j * E + e] * c[j * E + e];
  for (auto& v : cn) v = std::sqrt(v);
  const double scale = std::exp(std::min(d.values[5][0], std::log(100.0)));
  std::vector<double> clean(N * E), noisy(N * E);
  for (index_t n = 0; n < N; ++n)
    for (index_t e = 0; e < E; ++e) {
      double s = 0;
      for (index_t j = 0; j < H; ++j) s += h[n * H + j] * c[j * E + e];
      clean[n * E + e] = scale * s / (std::max(hn[n], 1e-12) * std::max(cn[e], 1e-12));
      noisy[n * E + e] = clean[n * E + e] + d.values[4][n * E + e] * 1.0 / double(E);
    }
  const double min_h = *std::min_element(hn.begin(), hn.end()), min_c = *std::min_element(cn.begin(), cn.end());
  const double step = std::max({1.0, max_abs(x), std::sqrt(double(H)) * max_abs(W)});
  const double lip = 2 * scale * std::max({step / min_h, 1.0 / min_c, 1.0});
  return std::min(min_row_gap(clean, N, E), min_row_gap(noisy, N, E)) / lip;
}

Output cosine_router(const Inputs& in, index_t k, bool renormalize, bool noise) {
  moe::CosineRouter<double> c;
  c.proj.weight = in.get<2>(1);
  c.proj.bias = in.get<1>(2);
  c.codebook = in.get<2>(3);
  c.log_scale = in.get<0>(5);
  c.top_k = std::min(k, c.codebook.extent(1));
  c.renormalize = renormalize;
  c.gate_noise = 1.0;
  return router_outputs(c.forward(in.get<2>(0), noise ? in.get<2>(4) : T2()));
}
}  // namespace

GRADCHECK_CASE("cosine_router") {
  return Case()
      .constant_input(4)
      .range_of(5, -1, 1)  // log_scale below the ln 100 clamp: the scale is differentiable
      .kink(cosine_kink)
      .variant("train, top-1", cosine_shapes, [](const Inputs& in) { return cosine_router(in, 1, false, true); })
      .variant("eval, top-2 renormalised", cosine_shapes, [](const Inputs& in) { return cosine_router(in, 2, true, false); })
      .variant("train, top-2", cosine_shapes, [](const Inputs& in) { return cosine_router(in, 2, false, true); })
      .repeat(3);
}

GRADCHECK_CASE("cosine_router clamped log_scale") {
  // log_scale above ln 100: the scale is the constant 100 (gradient 0 for log_scale); the kink of
  // min(log_scale, ln 100) is declared, so no draw straddles it.
  return Case()
      .constant_input(4)
      .range_of(5, 4.0, 5.5)
      .kink(kink_at(5, std::log(100.0)))
      .kink(cosine_kink)
      .variant("eval, top-1", cosine_shapes, [](const Inputs& in) { return cosine_router(in, 1, false, false); })
      .variant("train, top-2 renormalised", cosine_shapes, [](const Inputs& in) { return cosine_router(in, 2, true, true); });
}

GRADCHECK_CASE("normalized_rows_matmul") {
  // The cosine router's similarity as one op: l2_normalize<1>(h) @ c, gradients to h and c (rows of
  // h drawn away from 0: the norm's clamp at 1e-12 is never near).
  return Case()
      .variant("[N, K] @ [K, E]", [](Rng& r) { const auto K = r.ext(1, 6); return Shapes{{r.ext(1, 5), K}, {K, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return moe::normalized_rows_matmul(in.get<2>(0), in.get<2>(1)); })
      .variant("h used again after (its gradient accumulates)",
               [](Rng& r) { const auto K = r.ext(1, 6); return Shapes{{r.ext(1, 5), K}, {K, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output {
                 Tensor<double, DynShape<2>> h = tanh(in.get<2>(0));
                 Tensor<double, DynShape<2>> hh = h * h;
                 return flat_cat(moe::normalized_rows_matmul(h, in.get<2>(1)), hh);
               });
}

GRADCHECK_CASE("gated_combine") {
  // An MoE combine read from the experts' separate outputs: input 0 the gates [N, k], then the parts;
  // picks in a fixed shuffled order reading every part row once, the rest dropped.
  auto combine = [](index_t k) {
    return [k](const Inputs& in) -> Output {
      const index_t N = in.get<2>(0).extent(0);
      std::vector<Tensor<double, DynShape<2>>> parts;
      std::vector<std::int64_t> part, row;
      for (std::size_t p = 1; p < in.size(); ++p) {
        parts.push_back(in.get<2>(p));
        for (index_t r = 0; r < parts.back().extent(0); ++r) part.push_back(std::int64_t(p - 1)), row.push_back(r);
      }
      while (index_t(part.size()) < N * k) part.push_back(-1), row.push_back(0);
      std::vector<std::size_t> perm(part.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), std::mt19937_64(std::uint64_t(N * 131 + k)));
      std::vector<std::int64_t> part_q, row_q;
      for (const auto q : perm) part_q.push_back(part[q]), row_q.push_back(row[q]);
      return moe::gated_combine(parts, part_q, row_q, in.get<2>(0));
    };
  };
  auto shapes = [](index_t k) {
    return [k](Rng& r) {
      const index_t N = r.ext(4, 7), D = r.ext(1, 5);
      const index_t picks = N * k - r.ext(0, 1);  // kept picks (both parts non-empty); the others are dropped
      const index_t a = picks / 2;
      return Shapes{{N, k}, {a, D}, {picks - a, D}};
    };
  };
  return Case().variant("top-1", shapes(1), combine(1)).variant("top-2", shapes(2), combine(2));
}

GRADCHECK_CASE("l2_normalize") {
  return Case()
      .variant("rows (Axis 1)", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 6)}}; },
               [](const Inputs& in) -> Output { return moe::l2_normalize<1>(in.get<2>(0)); })
      .variant("columns (Axis 0)", [](Rng& r) { return Shapes{{r.ext(1, 6), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return moe::l2_normalize<0>(in.get<2>(0)); });
}

// ---- auxiliary losses ----------------------------------------------------------------------------------
namespace {
Tensor<double, DynShape<1>> aux_outputs(const moe::AuxLosses<double>& a) {
  return flat_cat(a.l_aux, a.l_imp, a.l_load, a.importance, a.load, a.threshold, a.noisy_logits);
}
}  // namespace

GRADCHECK_CASE("moe_aux_losses") {
  // Inputs: logits [N, E], noise [N, E] (constant), noisy logits [N, E] (the router-output form).
  // The threshold is the k-th largest noisy logit: it switches where two noisy logits of a row tie.
  auto shapes = [](Rng& r) {
    const index_t N = r.ext(3, 8), E = r.ext(3, 5);
    return Shapes{{N, E}, {N, E}, {N, E}};
  };
  auto from_noise = [](index_t k) {
    return [k](const Inputs& in) -> Output { return aux_outputs(moe::gmoe_aux_losses(in.get<2>(0), in.get<2>(1), k)); };
  };
  auto from_noisy = [](index_t k) {
    return [k](const Inputs& in) -> Output {
      auto logits = in.get<2>(0);
      return aux_outputs(moe::gmoe_aux_losses_noisy(logits, in.get<2>(2), k, 1.0 / double(logits.extent(1))));
    };
  };
  return Case()
      .constant_input(1)
      .kink([](const Draw& d) {
        const index_t N = d.extents[0][0], E = d.extents[0][1];
        auto noisy = d.values[0];
        for (index_t i = 0; i < N * E; ++i) noisy[i] += d.values[1][i] / double(E);  // gate_noise 1
        return std::min(min_row_gap(noisy, N, E), min_row_gap(d.values[2], N, E));
      })
      .variant("k1", shapes, from_noise(1))
      .variant("k2", shapes, from_noise(2))
      .variant("noisy logits given, k2", shapes, from_noisy(2))
      .variant("noisy logits given, k = 3", shapes, from_noisy(3))
      .repeat(3);
}

// ---- LoRA and TTMM merging ------------------------------------------------------------------------------
GRADCHECK_CASE("lora") {
  auto f = [](bool bias) {
    return [bias](const Inputs& in) -> Output {
      moe::LoRALinear<double> l;
      l.weight = in.get<2>(3);
      if (bias) l.bias = in.get<1>(4);
      l.lora_A.weight = in.get<2>(1);
      l.lora_B.weight = in.get<2>(2);
      l.scaling = 2.0;
      if (in.extents(0).size() == 2) return l.forward(in.get<2>(0));
      return l.forward(in.get<3>(0));
    };
  };
  auto shapes = [](bool rank3) {
    return [rank3](Rng& r) {
      const index_t B = r.ext(1, 3), T = r.ext(1, 3), I = r.ext(2, 6), O = r.ext(2, 6), R = r.ext(1, 3);
      return Shapes{rank3 ? Extents{B, T, I} : Extents{B * T, I}, {R, I}, {O, R}, {O, I}, {O}};
    };
  };
  // The base weight and bias are frozen (constant inputs): only x, A and B get gradients.
  return Case()
      .constant_input(3)
      .constant_input(4)
      .variant("rank3", shapes(true), f(true))
      .variant("rank2 input, no bias", shapes(false), f(false));
}

namespace {
/// K adapters: inputs `first`.. hold A_0 [r_0, in], B_0 [out, r_0], A_1, B_1, ...
Shapes adapters(Rng& r, Shapes head, index_t in, index_t out) {
  const index_t K = r.ext(1, 3);
  for (index_t k = 0; k < K; ++k) {
    const index_t rk = r.ext(1, 3);
    head.push_back({rk, in});
    head.push_back({out, rk});
  }
  return head;
}
std::vector<T2> factors(const Inputs& in, std::size_t first, std::size_t which) {
  std::vector<T2> v;
  for (std::size_t i = first + which; i < in.size(); i += 2) v.push_back(in.get<2>(i));
  return v;
}
/// Merge coefficients and LoRA scalings (plain numbers, fixed per draw).
std::pair<std::vector<double>, std::vector<double>> coefficients(const Inputs& in, std::size_t K) {
  auto rng = in.rng(3);
  std::vector<double> w(K), s(K);
  for (auto& v : w) v = rng.uniform(0.1, 1.0);
  for (auto& v : s) v = rng.uniform(0.5, 2.0);
  return {w, s};
}
}  // namespace

GRADCHECK_CASE("lora_merge") {
  return Case()
      .variant("dense delta W = B_cat A_cat (gradients of every factor)",
               [](Rng& r) { return adapters(r, {}, r.ext(1, 5), r.ext(1, 5)); },
               [](const Inputs& in) -> Output {
                 const auto A = factors(in, 0, 0), B = factors(in, 0, 1);
                 const auto [w, s] = coefficients(in, A.size());
                 auto st = moe::stack_lora(A, B, w, s);
                 return flat_cat(moe::merged_delta(st), st.A_cat, st.B_cat);
               })
      .variant("unmaterialised x W^T + (x A_cat^T) B_cat^T (x, base W and factors)",
               [](Rng& r) {
                 const index_t in = r.ext(1, 5), out = r.ext(1, 5);
                 return adapters(r, {{r.ext(1, 4), in}, {out, in}}, in, out);
               },
               [](const Inputs& in) -> Output {
                 const auto A = factors(in, 2, 0), B = factors(in, 2, 1);
                 const auto [w, s] = coefficients(in, A.size());
                 return moe::apply_stacked(in.get<2>(0), in.get<2>(1), moe::stack_lora(A, B, w, s));
               })
      .variant("merge weights as a tensor [K] folded into A_k (gradient of the weights)",
               [](Rng& r) {
                 const index_t in = r.ext(1, 4), out = r.ext(1, 4);
                 Shapes s = adapters(r, {{}, {r.ext(1, 3), in}}, in, out);
                 s[0] = {index_t((s.size() - 2) / 2)};  // w [K]
                 return s;
               },
               [](const Inputs& in) -> Output {
                 // stack_lora takes the coefficients as numbers; a differentiable merge scales A_k by
                 // w[k] first and passes coefficient 1 (the same delta: w_k s_k B_k A_k).
                 auto wt = in.get<1>(0);
                 auto A = factors(in, 2, 0);
                 const auto B = factors(in, 2, 1);
                 for (std::size_t k = 0; k < A.size(); ++k) A[k] = A[k] * narrow<0>(wt, index_t(k), 1);
                 const auto [w, s] = coefficients(in, A.size());
                 auto st = moe::stack_lora(A, B, std::vector<double>(A.size(), 1.0), s);
                 return flat_cat(moe::merged_delta(st), moe::apply_stacked(in.get<2>(1), moe::merged_delta(st), st));
               });
}

// ---- sparse-softmax merging weights ---------------------------------------------------------------------
namespace {
/// The selection (w > tau, the max_experts cap by descending w) switches where some w_k crosses a
/// tau or two w of a row tie, w = softmax(q . c / beta^2). One input step moves a w by at most
/// h M / (2 beta^2) and a gap by h M / beta^2, M = max(|q|, |c|).
Kink sparse_softmax_kink(double beta, std::vector<double> taus) {
  return [=](const Draw& d) {
    const index_t Q = d.extents[0][0], dd = d.extents[0][1], K = d.extents[1][0];
    const auto sim = affine(d.values[0], Q, dd, d.values[1], {}, K);
    std::vector<double> w(Q * K);
    double m = kInf;
    for (index_t q = 0; q < Q; ++q) {
      double mx = -kInf, z = 0;
      for (index_t k = 0; k < K; ++k) mx = std::max(mx, sim[q * K + k] / (beta * beta));
      for (index_t k = 0; k < K; ++k) z += std::exp(sim[q * K + k] / (beta * beta) - mx);
      for (index_t k = 0; k < K; ++k) {
        w[q * K + k] = std::exp(sim[q * K + k] / (beta * beta) - mx) / z;
        for (double t : taus) m = std::min(m, std::abs(w[q * K + k] - t));
      }
    }
    m = std::min(m, min_row_gap(w, Q, K));
    return m / (std::max(max_abs(d.values[0]), max_abs(d.values[1])) / (beta * beta));
  };
}
}  // namespace

GRADCHECK_CASE("sparse_softmax") {
  auto shapes = [](Rng& r) {
    const index_t Q = r.ext(1, 3), K = r.ext(3, 8), d = r.ext(2, 4);
    return Shapes{{Q, d}, {K, d}};
  };
  auto f = [](moe::SparseSoftmaxConfig cfg) {
    return [cfg](const Inputs& in) -> Output {
      auto r = moe::sparse_softmax_weights(in.get<2>(0), in.get<2>(1), cfg);
      return flat_cat(r.similarity, r.kernel_weights, r.weights);
    };
  };
  return Case()
      .range(-0.6, 0.6)
      .kink(sparse_softmax_kink(0.5, {0.05, 0.3}))
      .variant("cap 3 of K (weights)", shapes, f({0.5, 0.05, 3}))
      .variant("no cap", shapes, f({0.5, 0.05, 50}))
      .variant("tau 0.3: rows keep few experts or none (base model)", shapes, f({0.5, 0.3, 50}))
      .variant("paper form relu(w - tau) / sum", shapes,
               [](const Inputs& in) -> Output {
                 auto r = moe::sparse_softmax_weights(in.get<2>(0), in.get<2>(1), moe::SparseSoftmaxConfig{0.5, 0.05, 50});
                 return moe::sparse_softmax_paper(r.kernel_weights, 0.05);
               })
      .repeat(4);
}

// ---- coverage of this executable ------------------------------------------------------------------------
TEST_CASE("gradcheck coverage (moe): every node recorded under moe/ has a case", "[gradcheck][coverage]") {
  // Every case passes and records something; together they record every node of the moe list.
  coverage::check_cases_cover(coverage::Suite::moe);
  // The moe list matches the names spelled under include/ttmoe/moe (parsed now).
  coverage::check_lists_match_sources(coverage::Suite::moe);
}

TEST_CASE("gradcheck moe kinks: declared kinks re-draw at a coarse step and keep the check exact", "[gradcheck][harness]") {
  // The kink functions above must not be vacuous: at a step h far above the default, draws near a
  // switch (ties of router logits, w crossing tau, ...) exist, are rejected, and every accepted draw
  // still matches finite differences (loose tolerance: truncation error grows as h^2).
  const std::vector<std::pair<std::string, double>> cases = {
      {"moe_layernorm", 1e-2}, {"linear_router", 1e-2},  {"route_logits topk_gates", 1e-2},
      {"cosine_router", 1e-2}, {"moe_aux_losses", 1e-2}, {"sparse_softmax", 3e-3}};
  for (const auto& [name, h] : cases) {
    const auto& reg = registry();
    auto it = std::find_if(reg.begin(), reg.end(), [&](const Registered& r) { return r.name == name; });
    REQUIRE(it != reg.end());
    Case c = it->make();
    REQUIRE(!c.kinks.empty());
    c.step(h).tolerance(5e-3, 5e-2);
    const Result r = run_case(name, c);
    INFO(name << " at h " << h << ": " << r.message << " (" << r.redraws << " re-draws)");
    CHECK(r.ok);
    CHECK(r.redraws > 0);
  }
}

// =====================================================================================================
// MoE-FFN (moe/moe_ffn.hpp; this block belongs to the MoE-FFN rework): router -> noisy top-k ->
// capacity with dropping -> per-expert MLPs -> gated combine, plus the GMoE aux loss; the checked
// output is [y, l_aux]. The picks and the kept/dropped slots are discrete, so the function is
// differentiable only while they stay put: a kink re-draws inputs whose routing margins (gaps between
// a token's top-3 probabilities, and between two tokens' priorities, which order the capacity) are
// small, and every finite-difference call verifies that the routing equals the recorded call's, so a
// step that crossed a switch fails loudly instead of producing a wrong numeric gradient.
// =====================================================================================================
#include <type_traits>

#include "ttmoe/moe/moe_ffn.hpp"

namespace {
namespace moe_ffn_gc {

using Cosine = moe::CosineRouter<double>;
using Linear = moe::LinearRouter<double>;

/// Input layout: 0 x [B, T, D]; 1 noise [N, E] (constant); the router's parameters (cosine:
/// proj.weight [P, D], proj.bias [P], codebook [P, E], log_scale []; linear: weight [E, D], bias [E]);
/// then per expert fc1.weight [H, D], fc1.bias [H], fc2.weight [D, H], fc2.bias [D].
template <class R>
Shapes shapes(Rng& r) {
  const index_t B = r.ext(1, 2), T = r.ext(3, 5), D = r.ext(2, 4), H = r.ext(2, 4), E = r.ext(3, 4), P = r.ext(2, 4);
  Shapes s{{B, T, D}, {B * T, E}};
  if constexpr (std::is_same_v<R, Cosine>)
    s.insert(s.end(), {{P, D}, {P}, {P, E}, {}});
  else
    s.insert(s.end(), {{E, D}, {E}});
  for (index_t e = 0; e < E; ++e) s.insert(s.end(), {{H, D}, {H}, {D, H}, {D}});
  return s;
}

/// The layer over the inputs (shares their leaves, so gradients reach the harness). Capacity factor 1:
/// C = k * ceil(N / E), so unbalanced draws drop picks.
template <class R>
moe::MoEFFN<double, cpu, R> build(const Inputs& in, index_t k, bool renormalize,
                                  moe::ExpertThreads threads = moe::ExpertThreads::automatic) {
  moe::MoEFFN<double, cpu, R> m;
  m.expert_threads = threads;
  std::size_t i = 2;
  if constexpr (std::is_same_v<R, Cosine>) {
    m.router.proj.weight = in.get<2>(i++);
    m.router.proj.bias = in.get<1>(i++);
    m.router.codebook = in.get<2>(i++);
    m.router.log_scale = in.get<0>(i++);  // drawn in [-2, 2): below the ln 100 clamp
  } else {
    m.router.weight = in.get<2>(i++);
    m.router.bias = in.get<1>(i++);
  }
  m.router.top_k = k;
  m.router.renormalize = renormalize;
  while (i < in.size()) {
    moe::FFNExpert<double> x;
    x.fc1.weight = in.get<2>(i++);
    x.fc1.bias = in.get<1>(i++);
    x.fc2.weight = in.get<2>(i++);
    x.fc2.bias = in.get<1>(i++);
    m.experts.push_back(std::move(x));
  }
  m.capacity_factor = 1.0;
  return m;
}

/// Smallest gap that decides the routing: between consecutive entries of each token's top-3
/// probabilities (picks, their order, the top-k boundary for k <= 2) and between two tokens' top
/// probabilities (the capacity priority order).
double routing_margin(const moe::RouterOutput<double>& o) {
  const index_t N = o.probs.extent(0), E = o.probs.extent(1);
  const auto p = o.probs.to_vector();
  double m = std::numeric_limits<double>::infinity();
  std::vector<double> prio;
  for (index_t n = 0; n < N; ++n) {
    std::vector<double> row(p.begin() + n * E, p.begin() + (n + 1) * E);
    std::sort(row.rbegin(), row.rend());
    for (index_t j = 0; j + 1 < std::min<index_t>(3, E); ++j) m = std::min(m, row[j] - row[j + 1]);
    prio.push_back(row[0]);
  }
  std::sort(prio.begin(), prio.end());
  for (std::size_t j = 1; j < prio.size(); ++j) m = std::min(m, prio[j] - prio[j - 1]);
  return m;
}

/// A constant (no-gradient) input of rank 0..3 holding `v`, for evaluating the layer inside a kink.
gradcheck::detail::Leaf leaf_of(const Extents& e, const std::vector<double>& v) {
  using gradcheck::detail::Leaf;
  switch (e.size()) {
    case 0: return Leaf(std::in_place_index<0>, Tensor<double, DynShape<0>>::from_host(DynShape<0>{}, v));
    case 1: return Leaf(std::in_place_index<1>, Tensor<double, DynShape<1>>::from_host(DynShape<1>(e[0]), v));
    case 2: return Leaf(std::in_place_index<2>, Tensor<double, DynShape<2>>::from_host(DynShape<2>(e[0], e[1]), v));
    case 3:
      return Leaf(std::in_place_index<3>, Tensor<double, DynShape<3>>::from_host(DynShape<3>(e[0], e[1], e[2]), v));
  }
  throw ValueError("moe_ffn gradcheck: unexpected input rank " + std::to_string(e.size()));
}

/// Kink: the routing margin of the drawn inputs (the layer run on them), scaled by 0.02 (a probability
/// moves by up to ~50x an input step here), so the harness keeps only draws whose routing a +-h step
/// cannot flip. The probabilities, hence the margin, do not depend on k.
template <class R>
double routing_kink(const Draw& d) {
  std::vector<gradcheck::detail::Leaf> leaves;
  for (std::size_t i = 0; i < d.extents.size(); ++i) leaves.push_back(leaf_of(d.extents[i], d.values[i]));
  Inputs in(leaves, d.extents, 0);
  autograd::NoGrad ng;
  auto m = build<R>(in, 1, false);
  m.forward(in.get<3>(0), in.get<2>(1));
  return 0.02 * routing_margin(m.routing.out);
}

/// Recorded draws whose routing dropped at least one pick (so the capacity path is covered).
inline int& draws_with_drops() {
  static int n = 0;
  return n;
}

/// [y, l_aux] of the layer; the recorded call stores the routing (picks + kept flags), the
/// finite-difference calls must reproduce it.
template <class R>
Output forward(const Inputs& in, index_t k, bool renormalize, moe::ExpertThreads threads,
               const std::shared_ptr<std::vector<std::int64_t>>& seen) {
  auto m = build<R>(in, k, renormalize, threads);
  auto y = m.forward(in.get<3>(0), in.get<2>(1));
  auto aux = m.aux_losses();
  std::vector<std::int64_t> routing = m.routing.top_index;
  routing.insert(routing.end(), m.routing.plan.kept.begin(), m.routing.plan.kept.end());
  if (autograd::is_recording()) {
    *seen = routing;
    if (m.routing.plan.dropped() > 0) ++draws_with_drops();
  } else if (routing != *seen) {
    throw ValueError("moe_ffn gradcheck: a finite-difference step changed the routing (picks or kept slots)");
  }
  return flat_cat(y, aux.l_aux);
}

/// One variant per (k, renormalise) pair with the experts one by one, and each again with the experts
/// as side-by-side tasks (ops/parallel_tasks.hpp: their ops replayed from the tasks' own tapes).
template <class R>
Case make_case(std::vector<std::pair<index_t, bool>> variants) {
  Case c;
  c.constant_input(1).kink(routing_kink<R>).repeat(3);
  for (auto [k, renorm] : variants)
    for (const auto threads : {moe::ExpertThreads::one_by_one, moe::ExpertThreads::side_by_side}) {
      auto seen = std::make_shared<std::vector<std::int64_t>>();
      c.variant("top-" + std::to_string(k) + (renorm ? " renormalised" : "") +
                    (threads == moe::ExpertThreads::side_by_side ? ", experts side by side" : ""),
                shapes<R>, [k, renorm, threads, seen](const Inputs& in) { return forward<R>(in, k, renorm, threads, seen); });
    }
  return c;
}

}  // namespace moe_ffn_gc
}  // namespace

// GMoE's router: top-1 unnormalised (the authors' code) and top-2 renormalised (the paper, Tutel).
GRADCHECK_CASE("moe_ffn cosine router") {
  auto c = moe_ffn_gc::make_case<moe_ffn_gc::Cosine>({{1, false}, {2, true}});
  // The router L2-normalises a projection of as few as 2 dimensions: where its norm is small the
  // gradient reaches the hundreds and central differences keep ~4 digits (seed 120 hits 1e-4).
  c.tolerance(1e-6, 2e-4);
  return c;
}
// The same layer over a linear router with bias and training noise.
GRADCHECK_CASE("moe_ffn linear router") {
  return moe_ffn_gc::make_case<moe_ffn_gc::Linear>({{1, false}, {2, false}});
}

// The draws above must exercise the capacity path, not only the routing (a check on the test itself).
TEST_CASE("gradcheck/moe_ffn draws drop picks", "[gradcheck]") {
  for (const char* name : {"moe_ffn cosine router", "moe_ffn linear router"}) {
    const auto& reg = registry();
    auto it = std::find_if(reg.begin(), reg.end(), [&](const Registered& r) { return r.name == name; });
    REQUIRE(it != reg.end());
    const int before = moe_ffn_gc::draws_with_drops();
    const Result r = run_case(name, it->make());
    INFO(name << ": " << r.message);
    REQUIRE(r.ok);
    CHECK(moe_ffn_gc::draws_with_drops() > before);
  }
}
