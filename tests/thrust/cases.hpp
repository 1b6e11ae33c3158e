#pragma once
// Device-generic parity cases: each returns named result vectors (as double) computed on device D.
// The thrust suite runs them on `cpu` and `thrust_host`; tests/cuda runs them on `cuda` (in a .cu TU)
// and on `cpu` (in a host TU). Include after the headers that define Backend<D> for the devices used.
// Only core headers here: no Eigen, no fmt, no Catch.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ttmoe/autograd/backward.hpp"
#include "ttmoe/expr/expr.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/matmul.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe_parity {

using Results = std::vector<std::pair<std::string, std::vector<double>>>;

/// Deterministic values in about [-scale, scale].
inline std::vector<double> values(std::size_t n, unsigned seed, double scale = 1.0) {
  std::vector<double> v(n);
  std::uint64_t s = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = scale * (double((s >> 11) & ((1ull << 53) - 1)) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

template <class T, class D, class S>
ttmoe::Tensor<T, S, D> make(const S& shape, unsigned seed, double scale = 1.0) {
  const auto v = values(shape.numel(), seed, scale);
  std::vector<T> t(v.begin(), v.end());
  return ttmoe::Tensor<T, S, D>::from_host(shape, t);
}

template <class D, class S>
ttmoe::IndexTensor<S, D> make_idx(const S& shape, std::vector<std::int64_t> v) {
  return ttmoe::IndexTensor<S, D>::from_host(shape, v);
}

template <class X>
std::vector<double> host(const X& x) {
  const auto v = x.to_vector();
  return std::vector<double>(v.begin(), v.end());
}

/// Fused elementwise expressions, with broadcasting.
template <class D, class T>
Results elementwise() {
  using namespace ttmoe;
  auto a = make<T, D>(Shape<4, 1, 5>(), 1);
  auto b = make<T, D>(Shape<3, 5>(), 2);
  auto c = make<T, D>(Shape<5>(), 3);
  auto d = make<T, D>(DynShape<2>(7, 33), 4, 3.0);
  Results r;
  r.emplace_back("gelu_bcast", host(eval(gelu(a * b + c))));
  r.emplace_back("mix", host(eval(exp(-square(b)) / (T(1) + abs(c)) + tanh(a) * sigmoid(b))));
  r.emplace_back("where", host(eval(where(a > b, a, b) + maximum(a, c) - minimum(b, T(0.25)))));
  r.emplace_back("pow_rsqrt", host(eval(pow(abs(a) + T(1), b) + rsqrt(T(1) + square(c)) + sqrt(abs(b)))));
  r.emplace_back("silu_erf", host(eval(silu(d) + erf(d * T(0.5)) + gelu_tanh(d) + relu(d) + log(T(4) + d))));
  r.emplace_back("cmp", host(eval((a >= c) + (b < T(0)) + (b <= c) + equal(a, a) + muladd(a, b, c))));
  r.emplace_back("scalar_shape", host(eval(sum_all(d) * T(2) + T(1))));
  Tensor<T, DynShape<2>, D> dst = Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(7, 33));
  assign(dst, d * T(3) - T(1));
  r.emplace_back("assign", host(dst));
  return r;
}

/// Every reduction and softmax / log_softmax, along several axes.
template <class D, class T>
Results reductions() {
  using namespace ttmoe;
  auto x = make<T, D>(Shape<3, 4, 5>(), 5, 2.0);
  auto big = make<T, D>(DynShape<2>(6, 1000), 6, 3.0);
  Results r;
  r.emplace_back("sum0", host(sum<0>(x)));
  r.emplace_back("sum1", host(sum<1>(x)));
  r.emplace_back("sum2", host(sum<2>(x)));
  r.emplace_back("sum_big", host(sum<1>(big)));
  r.emplace_back("mean1_keep", host(mean<1, true>(x)));
  r.emplace_back("max1", host(max<1>(x)));
  r.emplace_back("min2", host(min<2>(x)));
  r.emplace_back("argmax1", host(argmax<1>(x)));
  r.emplace_back("argmin0", host(argmin<0>(x)));
  r.emplace_back("var1", host(variance<1>(x, 1)));
  r.emplace_back("var2", host(variance<2>(x)));
  r.emplace_back("lse2", host(logsumexp<2>(x)));
  r.emplace_back("lse0", host(logsumexp<0>(x)));
  r.emplace_back("softmax_last", host(softmax(x)));
  r.emplace_back("softmax1", host(softmax<1>(x)));
  r.emplace_back("log_softmax_last", host(log_softmax(x)));
  r.emplace_back("log_softmax0", host(log_softmax<0>(x)));
  r.emplace_back("softmax_big", host(softmax(big)));
  r.emplace_back("sum_all", host(sum_all(x)));
  r.emplace_back("mean_all", host(mean_all(big)));
  return r;
}

/// matmul forms (folded, B^T, A^T, batched).
template <class D, class T>
Results matmuls() {
  using namespace ttmoe;
  auto a = make<T, D>(Shape<2, 3, 4>(), 7);
  auto w = make<T, D>(Shape<4, 5>(), 8);
  auto wt = make<T, D>(Shape<5, 4>(), 9);
  auto bb = make<T, D>(Shape<2, 4, 5>(), 10);
  auto at = make<T, D>(Shape<4, 3>(), 11);
  auto big = make<T, D>(DynShape<2>(37, 65), 12);
  auto bigw = make<T, D>(DynShape<2>(29, 65), 13);
  Results r;
  r.emplace_back("folded", host(matmul(a, w)));
  r.emplace_back("bt", host(matmul<false, true>(a, wt)));
  r.emplace_back("batched", host(matmul(a, bb)));
  r.emplace_back("at", host(matmul<true, false>(at, w)));
  r.emplace_back("big_bt", host(matmul<false, true>(big, bigw)));
  return r;
}

/// Indexing ops.
template <class D, class T>
Results indexing() {
  using namespace ttmoe;
  auto x = make<T, D>(Shape<5, 4>(), 14);
  auto y = make<T, D>(Shape<3, 5, 4>(), 15);
  auto rows = make_idx<D>(Shape<6>(), {4, 0, 2, 2, 1, 4});
  auto gi = make_idx<D>(Shape<3, 2, 4>(), {0, 1, 2, 3, 4, 4, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4,
                                           4, 3, 2, 1, 0, 0, 0, 0});
  auto src = make<T, D>(Shape<3, 2, 4>(), 16);
  auto cls = make_idx<D>(Shape<4>(), {2, 0, 3, 2});
  auto tk = make<T, D>(DynShape<2>(7, 50), 17);
  Results r;
  r.emplace_back("index_select", host(index_select(x, rows)));
  r.emplace_back("gather1", host(gather<1>(y, gi)));
  r.emplace_back("scatter_add1", host(scatter_add<1>(y, gi, src)));
  r.emplace_back("concat0", host(concat<0>(std::vector<Tensor<T, Shape<5, 4>, D>>{x, eval(x * T(2))})));
  r.emplace_back("concat1", host(concat<1>(std::vector<Tensor<T, Shape<5, 4>, D>>{x, eval(x + T(1))})));
  r.emplace_back("narrow1", host(narrow<1>(y, 1, 3)));
  r.emplace_back("permute201", host(permute<2, 0, 1>(y)));
  r.emplace_back("transpose", host(transpose(y)));
  r.emplace_back("one_hot", host(one_hot<T>(cls, 4)));
  auto [v, i] = topk(tk, 5);
  r.emplace_back("topk_values", host(v));
  r.emplace_back("topk_indices", host(i));
  return r;
}

/// Backward of composites: a 2-layer MLP cross-entropy loss plus a second loss touching every other
/// VJP kernel (broadcast reduction, sum / max / variance / logsumexp / softmax / gather / scatter /
/// index_select / topk / concat / narrow / permute backward). Returns the loss and every gradient.
template <class D, class T>
Results gradients() {
  using namespace ttmoe;
  auto x = make<T, D>(Shape<8, 6>(), 20);
  auto w1 = make<T, D>(Shape<16, 6>(), 21, 0.5).set_requires_grad();
  auto b1 = make<T, D>(Shape<16>(), 22, 0.1).set_requires_grad();
  auto w2 = make<T, D>(Shape<4, 16>(), 23, 0.5).set_requires_grad();
  auto b2 = make<T, D>(Shape<4>(), 24, 0.1).set_requires_grad();
  auto labels = make_idx<D>(Shape<8>(), {0, 1, 2, 3, 3, 2, 1, 0});
  auto emb = make<T, D>(Shape<5, 6>(), 25).set_requires_grad();
  auto z = make<T, D>(Shape<2, 3, 6>(), 26).set_requires_grad();
  auto ids = make_idx<D>(Shape<7>(), {1, 4, 1, 0, 4, 4, 2});
  auto gi = make_idx<D>(Shape<2, 4, 6>(), std::vector<std::int64_t>(48, 0));
  {
    std::vector<std::int64_t> g(48);
    for (std::size_t k = 0; k < g.size(); ++k) g[k] = std::int64_t((k * 7 + k / 5) % 3);
    gi = make_idx<D>(Shape<2, 4, 6>(), g);
  }
  T loss_value = 0;
  {
    autograd::Tape tape;
    auto h = eval(gelu(matmul<false, true>(x, w1) + b1));
    auto logits = eval(matmul<false, true>(h, w2) + b2);
    auto ce = mean_all(-sum<-1>(log_softmax(logits) * one_hot<T>(labels, 4)));
    auto reg = sum_all(square(w1)) * T(0.01);
    auto e = index_select(emb, ids);                                       // [7, 6]
    auto part1 = sum_all(softmax(matmul<false, true>(e, w1)) * T(0.3));   // softmax VJP, scatter
    auto part2 = mean_all(variance<1>(z)) + mean_all(logsumexp<2>(z)) + mean_all(max<0>(z)) * T(0.5);
    auto part3 = sum_all(gather<1>(z, gi) * T(0.2)) + sum_all(topk(z, 2).first);
    auto whole = narrow<2>(z, 0, 6), mid = narrow<2>(z, 1, 3);
    auto cat = concat<2>(std::vector<decltype(whole)>{whole, mid});
    auto p = permute<2, 0, 1>(z);
    auto part4 = sum_all(square(narrow<0>(p, 1, 3)) * T(0.1)) + mean_all(sum<1>(tanh(z)));
    auto loss = eval(ce + reg + part1 + part2 + part3 + part4 + sum_all(square(cat)) * T(0.05));
    loss_value = loss.item();
    autograd::backward(tape, loss);
  }
  Results r;
  r.emplace_back("loss", std::vector<double>{double(loss_value)});
  r.emplace_back("grad_w1", host(w1.grad()));
  r.emplace_back("grad_b1", host(b1.grad()));
  r.emplace_back("grad_w2", host(w2.grad()));
  r.emplace_back("grad_b2", host(b2.grad()));
  r.emplace_back("grad_emb", host(emb.grad()));
  r.emplace_back("grad_z", host(z.grad()));
  return r;
}

/// Runs every case group on device D with element type T.
template <class D, class T>
Results all_cases() {
  Results r;
  for (auto* f : {&elementwise<D, T>, &reductions<D, T>, &matmuls<D, T>, &indexing<D, T>, &gradients<D, T>})
    for (auto& kv : f()) r.push_back(std::move(kv));
  return r;
}

/// Compares two result sets; returns a description of the first mismatch ("" when equal).
/// Tolerance: |a - b| <= tol * max(1, |b|).
inline std::string compare(const Results& got, const Results& ref, double tol) {
  if (got.size() != ref.size()) return "different number of results";
  for (std::size_t k = 0; k < ref.size(); ++k) {
    const auto& [name, rv] = ref[k];
    const auto& gv = got[k].second;
    if (got[k].first != name) return "result order differs at " + name;
    if (rv.empty()) return name + ": empty reference result";
    if (gv.size() != rv.size())
      return name + ": size " + std::to_string(gv.size()) + " vs " + std::to_string(rv.size());
    for (std::size_t i = 0; i < rv.size(); ++i) {
      const double d = gv[i] - rv[i], s = rv[i] < 0 ? -rv[i] : rv[i];
      if (!(d <= tol * (s > 1 ? s : 1) && -d <= tol * (s > 1 ? s : 1)))
        return name + "[" + std::to_string(i) + "]: " + std::to_string(gv[i]) + " vs reference " + std::to_string(rv[i]);
    }
  }
  return "";
}

}  // namespace ttmoe_parity
