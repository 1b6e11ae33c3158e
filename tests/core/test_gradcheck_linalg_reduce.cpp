// Gradient checks of matmul (all transpose forms, folded and batched), reductions, softmax and a
// small composite network. See tests/support/gradcheck.hpp.

#include <gradcheck.hpp>

using namespace ttmoe;
using namespace ttmoe::gradcheck;

namespace {
// Shapes of op(A) = [M, K] and op(B) = [K, N] stored as A / A^T and B / B^T.
Shapes mm_shapes(Rng& r, bool ta, bool tb, bool k1 = false) {
  const index_t m = r.ext(1, 6), n = r.ext(1, 6), k = k1 ? 1 : r.ext(1, 6);
  return {ta ? Extents{k, m} : Extents{m, k}, tb ? Extents{n, k} : Extents{k, n}};
}
template <bool TA, bool TB>
Case matmul2() {
  return Case()
      .variant("random [M,K]", [](Rng& r) { return mm_shapes(r, TA, TB); },
               [](const Inputs& in) -> Output { return matmul<TA, TB>(in.get<2>(0), in.get<2>(1)); })
      .variant("K = 1", [](Rng& r) { return mm_shapes(r, TA, TB, true); },
               [](const Inputs& in) -> Output { return matmul<TA, TB>(in.get<2>(0), in.get<2>(1)); })
      .variant("expression consumer: gelu(op(A) op(B))", [](Rng& r) { return mm_shapes(r, TA, TB); },
               [](const Inputs& in) -> Output { return gelu(matmul<TA, TB>(in.get<2>(0), in.get<2>(1))); })
      .variant("alpha = -0.37", [](Rng& r) { return mm_shapes(r, TA, TB); },
               [](const Inputs& in) -> Output { return matmul<TA, TB>(in.get<2>(0), in.get<2>(1), -0.37); });
}
template <bool TA, bool TB>
Variant batched(const char* label) {
  return {label,
          [](Rng& r) {
            const index_t b = r.ext(1, 3), m = r.ext(1, 5), n = r.ext(1, 5), k = r.ext(1, 5);
            return Shapes{TA ? Extents{b, k, m} : Extents{b, m, k}, TB ? Extents{b, n, k} : Extents{b, k, n}};
          },
          [](const Inputs& in) -> Output { return matmul<TA, TB>(in.get<3>(0), in.get<3>(1), 0.125); }};
}
}  // namespace

// ---- matmul ----------------------------------------------------------------------------------------
GRADCHECK_CASE("matmul A B") { return matmul2<false, false>(); }
GRADCHECK_CASE("matmul A B^T") { return matmul2<false, true>(); }
GRADCHECK_CASE("matmul A^T B") { return matmul2<true, false>(); }
GRADCHECK_CASE("matmul A^T B^T") { return matmul2<true, true>(); }
GRADCHECK_CASE("matmul folded [B,T,K] @ [K,N]") {
  return Case()
      .variant("[B,T,K] @ [K,N]", [](Rng& r) { auto k = r.ext(1, 5); return Shapes{{r.ext(1, 3), r.ext(1, 4), k}, {k, r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return matmul(in.get<3>(0), in.get<2>(1)); })
      .variant("[B,T,K] @ W^T, W [N,K] (nn.Linear)", [](Rng& r) { auto k = r.ext(1, 5); return Shapes{{r.ext(1, 3), r.ext(1, 4), k}, {r.ext(1, 5), k}}; },
               [](const Inputs& in) -> Output { return matmul<false, true>(in.get<3>(0), in.get<2>(1)); })
      .variant("static Shape<?,3,4> @ Shape<4,?>", [](Rng& r) { return Shapes{{r.ext(1, 3), 3, 4}, {4, r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output {
                 return matmul(in.get_as<Shape<dyn, 3, 4>>(0), in.get_as<Shape<4, dyn>>(1));
               })
      .variant("rank 4 [A,B,T,K] @ [K,N]", [](Rng& r) { auto k = r.ext(1, 4); return Shapes{{2, r.ext(1, 2), r.ext(1, 3), k}, {k, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return matmul(in.get<4>(0), in.get<2>(1)); });
}
GRADCHECK_CASE("linear x W^T + b") {
  return Case()
      .variant("[M,K] W [N,K] b [N]", [](Rng& r) { auto k = r.ext(1, 6), n = r.ext(1, 6); return Shapes{{r.ext(1, 6), k}, {n, k}, {n}}; },
               [](const Inputs& in) -> Output { return linear(in.get<2>(0), in.get<2>(1), in.get<1>(2)); })
      .variant("[B,T,K] (leading dims folded)", [](Rng& r) { auto k = r.ext(1, 5), n = r.ext(1, 5); return Shapes{{r.ext(1, 3), r.ext(1, 4), k}, {n, k}, {n}}; },
               [](const Inputs& in) -> Output { return linear(in.get<3>(0), in.get<2>(1), in.get<1>(2)); })
      .variant("consumer reads the output twice: gelu(y) * y", [](Rng& r) { auto k = r.ext(1, 5), n = r.ext(1, 5); return Shapes{{r.ext(1, 5), k}, {n, k}, {n}}; },
               [](const Inputs& in) -> Output {
                 auto y = linear(in.get<2>(0), in.get<2>(1), in.get<1>(2));
                 return gelu(y) * y;
               });
}
GRADCHECK_CASE("fused_qkv_attention") {
  return Case()
      .variant("[B,T,3D], 2 heads", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 5), 3 * 2 * r.ext(1, 3)}}; },
               [](const Inputs& in) -> Output { return fused_qkv_attention(in.get<3>(0), 2, 0.7); })
      .variant("1 head, T = 1", [](Rng& r) { return Shapes{{r.ext(1, 3), 1, 3 * r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return fused_qkv_attention(in.get<3>(0), 1, 0.5); })
      .variant("consumer reads the output twice: o * tanh(o)", [](Rng& r) { return Shapes{{2, r.ext(2, 4), 3 * 3 * 2}}; },
               [](const Inputs& in) -> Output {
                 auto o = fused_qkv_attention(in.get<3>(0), 3, 0.9);
                 return o * tanh(o);
               })
      .variant("qkv also feeds a residual (its gradient accumulates)",
               [](Rng& r) { return Shapes{{2, r.ext(2, 4), 3 * 2 * 2}}; },
               [](const Inputs& in) -> Output {
                 const auto& x = in.get<3>(0);
                 auto o = fused_qkv_attention(x, 2, 0.6);  // recorded first, so replayed after the
                 auto q = narrow<2>(x, 4, 4);              // narrow: the attention VJP adds (beta 1)
                 return o + q * 0.5;
               });
}
GRADCHECK_CASE("causal_gqa_attention") {
  // q [B,H,T,hd], k [B,KV,T,hd], v [B,T,KV*hd] -> [B,T,H*hd]; query head h reads kv head h / (H / KV).
  auto shapes = [](index_t H, index_t KV, index_t t) {
    return [=](Rng& r) {
      const index_t b = r.ext(1, 2), tn = t ? t : r.ext(1, 5), hd = r.ext(1, 3);
      return Shapes{{b, H, tn, hd}, {b, KV, tn, hd}, {b, tn, KV * hd}};
    };
  };
  auto attn = [](double scale) {
    return [=](const Inputs& in) -> Output {
      return causal_gqa_attention(in.get<4>(0), in.get<4>(1), in.get<3>(2), scale);
    };
  };
  return Case()
      .variant("4 heads sharing 2 kv heads", shapes(4, 2, 0), attn(0.7))
      .variant("3 heads, 1 kv head (multi-query)", shapes(3, 1, 0), attn(0.5))
      .variant("T = 1 (one key, probability 1)", shapes(2, 2, 1), attn(0.9))
      .variant("k and v also feed a residual (their gradients accumulate)", shapes(2, 2, 0),
               [](const Inputs& in) -> Output {
                 const auto& k = in.get<4>(1);
                 const auto& v = in.get<3>(2);
                 auto o = causal_gqa_attention(in.get<4>(0), k, v, 0.6);  // recorded first: its VJP adds (beta 1)
                 Tensor<double, DynShape<3>> k_rows =
                     permute<0, 2, 1, 3>(k).reshape(DynShape<3>(k.extent(0), k.extent(2), 2 * k.extent(3)));
                 return o * tanh(o) + v * 0.5 + k_rows * 0.25;
               });
}
GRADCHECK_CASE("matmul batched") {
  Case c;
  c.variants.push_back(batched<false, false>("[b,M,K] @ [b,K,N]"));
  c.variants.push_back(batched<false, true>("[b,M,K] @ [b,N,K]^T"));
  c.variants.push_back(batched<true, false>("[b,K,M]^T @ [b,K,N]"));
  c.variants.push_back(batched<true, true>("[b,K,M]^T @ [b,N,K]^T"));
  c.variant("rank 4 [a,b,M,K] @ [a,b,K,N]",
            [](Rng& r) {
              auto a = r.ext(1, 2), b = r.ext(1, 3), m = r.ext(1, 4), k = r.ext(1, 4), n = r.ext(1, 4);
              return Shapes{{a, b, m, k}, {a, b, k, n}};
            },
            [](const Inputs& in) -> Output { return matmul(in.get<4>(0), in.get<4>(1)); });
  return c;
}
GRADCHECK_CASE("matmul frozen weight") {
  // Only the activation needs a gradient: the VJP must work from the saved weight alone.
  return Case()
      .constant_input(1)
      .variant("x W^T", [](Rng& r) { auto k = r.ext(1, 6); return Shapes{{r.ext(1, 3), r.ext(1, 4), k}, {r.ext(1, 5), k}}; },
               [](const Inputs& in) -> Output { return matmul<false, true>(in.get<3>(0), in.get<2>(1)); })
      .variant("A^T B batched", [](Rng& r) { auto b = r.ext(1, 3), k = r.ext(1, 4); return Shapes{{b, k, r.ext(1, 4)}, {b, k, r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return matmul<true, false>(in.get<3>(0), in.get<3>(1)); });
}
GRADCHECK_CASE("matmul frozen input") {
  // Only the weight needs a gradient: the VJP must work from the saved input alone.
  return Case()
      .constant_input(0)
      .variant("x W", [](Rng& r) { auto k = r.ext(1, 6); return Shapes{{r.ext(1, 3), r.ext(1, 4), k}, {k, r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return matmul(in.get<3>(0), in.get<2>(1)); })
      .variant("A^T B^T", [](Rng& r) { auto k = r.ext(1, 5); return Shapes{{k, r.ext(1, 5)}, {r.ext(1, 5), k}}; },
               [](const Inputs& in) -> Output { return matmul<true, true>(in.get<2>(0), in.get<2>(1)); });
}

// ---- reductions ----------------------------------------------------------------------------------
GRADCHECK_CASE("sum") {
  return Case()
      .variant("sum<0> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 11)}}; },
               [](const Inputs& in) -> Output { return sum<0>(in.get<2>(0)); })
      .variant("sum<1, keepdim> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return sum<1, true>(in.get<2>(0)); })
      .variant("sum<1> [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return sum<1>(in.get<3>(0)); })
      .variant("sum<-1, keepdim> [?,?,?]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return sum<-1, true>(in.get<3>(0)); })
      .variant("sum<0> of an expression x * y", [](Rng& r) { auto b = r.ext(1, 7); return Shapes{{r.ext(1, 4), b}, {b}}; },
               [](const Inputs& in) -> Output { return sum<0>(in.get<2>(0) * in.get<1>(1)); });
}
GRADCHECK_CASE("mean") {
  return Case()
      .variant("mean<0> [?,?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 3), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return mean<0>(in.get<3>(0)); })
      .variant("mean<1, keepdim> [?,?,?]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return mean<1, true>(in.get<3>(0)); })
      .variant("mean<-1> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return mean<-1>(in.get<2>(0)); });
}
GRADCHECK_CASE("max") {
  return Case()
      .kink(ties_within(0))
      .variant("max<0> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 7)}}; },
               [](const Inputs& in) -> Output { return max<0>(in.get<2>(0)); })
      .variant("max<-1, keepdim> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return max<-1, true>(in.get<2>(0)); })
      .variant("max<1> [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return max<1>(in.get<3>(0)); });
}
GRADCHECK_CASE("min") {
  return Case()
      .kink(ties_within(0))
      .variant("min<0, keepdim> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 7)}}; },
               [](const Inputs& in) -> Output { return min<0, true>(in.get<2>(0)); })
      .variant("min<-1> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return min<-1>(in.get<2>(0)); })
      .variant("min<1, keepdim> [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 4), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return min<1, true>(in.get<3>(0)); });
}
GRADCHECK_CASE("variance") {
  return Case()
      .variant("variance<1> ddof 0 [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 12)}}; },
               [](const Inputs& in) -> Output { return variance<1>(in.get<2>(0), 0); })
      .variant("variance<-1, keepdim> ddof 1 [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(2, 12)}}; },
               [](const Inputs& in) -> Output { return variance<-1, true>(in.get<2>(0), 1); })
      .variant("variance<0> ddof 1 [?,?,?]", [](Rng& r) { return Shapes{{r.ext(2, 5), r.ext(1, 3), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return variance<0>(in.get<3>(0), 1); })
      .variant("variance<1, keepdim> ddof 0 [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 5), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return variance<1, true>(in.get<3>(0)); });
}
GRADCHECK_CASE("logsumexp") {
  return Case()
      .range(-3, 3)
      .variant("logsumexp<-1> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return logsumexp<-1>(in.get<2>(0)); })
      .variant("logsumexp<0, keepdim> [?,?]", [](Rng& r) { return Shapes{{r.ext(1, 6), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return logsumexp<0, true>(in.get<2>(0)); })
      .variant("logsumexp<1> [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 5), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return logsumexp<1>(in.get<3>(0)); });
}
GRADCHECK_CASE("softmax") {
  return Case()
      .range(-3, 3)
      .variant("softmax<-1> [?,?] (SIMD rows)", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return softmax(in.get<2>(0)); })
      .variant("softmax<1> [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 5), r.ext(2, 4)}}; },
               [](const Inputs& in) -> Output { return softmax<1>(in.get<3>(0)); })
      .variant("softmax<0> of an expression", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 4)}}; },
               [](const Inputs& in) -> Output { return softmax<0>(in.get<2>(0) * 2.0); });
}
GRADCHECK_CASE("log_softmax") {
  return Case()
      .range(-3, 3)
      .variant("log_softmax<-1> [?,?] (SIMD rows)", [](Rng& r) { return Shapes{{r.ext(1, 4), r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return log_softmax(in.get<2>(0)); })
      .variant("log_softmax<1> [?,?,?] middle", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 5), r.ext(2, 4)}}; },
               [](const Inputs& in) -> Output { return log_softmax<1>(in.get<3>(0)); })
      .variant("log_softmax<-1> [?,?,?]", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output { return log_softmax<-1>(in.get<3>(0)); });
}
GRADCHECK_CASE("sum_all") {
  return Case()
      .variant("[?,?]", [](Rng& r) { return Shapes{{r.ext(1, 5), r.ext(1, 9)}}; },
               [](const Inputs& in) -> Output { return sum_all(in.get<2>(0)); })
      .variant("[?,?,?] expression", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return sum_all(square(in.get<3>(0))); });
}
GRADCHECK_CASE("mean_all") {
  return Case()
      .variant("[?]", [](Rng& r) { return Shapes{{r.ext(1, 19)}}; },
               [](const Inputs& in) -> Output { return mean_all(in.get<1>(0)); })
      .variant("[?,?,?] expression", [](Rng& r) { return Shapes{{r.ext(1, 3), r.ext(1, 3), r.ext(1, 5)}}; },
               [](const Inputs& in) -> Output { return mean_all(in.get<3>(0) * in.get<3>(0)); });
}

// ---- composite: a leaf reaching the loss through several different ops ------------------------------
GRADCHECK_CASE("composite two-layer network") {
  // x [N,D] -> tanh(x W1^T + b1) -> W2 -> log_softmax -> pick class 0 per row (gather) -> mean.
  return Case().range(-1, 1).variant(
      "mlp with cross-entropy through gather",
      [](Rng& r) { auto n = r.ext(2, 4), d = r.ext(1, 3), h = r.ext(2, 5), c = r.ext(2, 4); return Shapes{{n, d}, {h, d}, {h}, {h, c}}; },
      [](const Inputs& in) -> Output {
        auto x = in.get<2>(0);
        auto hdn = eval(tanh(matmul<false, true>(x, in.get<2>(1)) + in.get<1>(2)));
        auto logits = matmul(hdn, in.get<2>(3));
        auto lp = log_softmax(logits);
        auto rng = in.rng(7);
        auto labels = random_indices<2>(rng, {x.extent(0), 1}, logits.extent(1));
        // The input x is used again directly: its gradient accumulates from two paths.
        return -mean_all(gather<1>(lp, labels)) + sum_all(x * x) * 0.1 + sum<1>(hdn) * 0.5;
      });
}

// ---- ops recorded as side-by-side tasks ------------------------------------------------------------
GRADCHECK_CASE("parallel_tasks") {
  // run_recorded_tasks (ops/parallel_tasks.hpp): each task records onto its own tape and ONE node
  // replays them; every task here owns its leaves (the contract), and the caller's ops use the outputs.
  return Case()
      .variant("two tasks: x0 W0, tanh(x1 W1)",
               [](Rng& r) {
                 const index_t k = r.ext(1, 5);
                 return Shapes{{r.ext(1, 5), k}, {k, r.ext(1, 4)}, {r.ext(1, 5), k}, {k, r.ext(1, 4)}};
               },
               [](const Inputs& in) -> Output {
                 std::vector<Tensor<double, DynShape<2>>> y(2);
                 run_recorded_tasks<cpu>(2, [&](index_t i) {
                   const auto a = matmul(in.get<2>(2 * std::size_t(i)), in.get<2>(2 * std::size_t(i) + 1));
                   y[std::size_t(i)] = i == 0 ? a : Tensor<double, DynShape<2>>(tanh(a));
                 });
                 // Both outputs in one: [M0 + M1] rows of summed columns (a caller op after the tasks).
                 return concat<0>(std::vector<Tensor<double, DynShape<1>>>{sum<1>(y[0]), sum<1>(y[1])});
               })
      .variant("three tasks whose outputs the caller multiplies",
               [](Rng& r) { const index_t m = r.ext(1, 5), n = r.ext(1, 5); return Shapes{{m, n}, {m, n}, {m, n}}; },
               [](const Inputs& in) -> Output {
                 std::vector<Tensor<double, DynShape<2>>> y(3);
                 run_recorded_tasks<cpu>(3, [&](index_t i) {
                   y[std::size_t(i)] = Tensor<double, DynShape<2>>(exp(in.get<2>(std::size_t(i)) * 0.5));
                 });
                 return Tensor<double, DynShape<2>>(y[0] * y[1] + y[2]);
               });
}
