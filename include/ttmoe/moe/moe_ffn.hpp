#pragma once
// MoE feed-forward layer (GMoE, after V-MoE / Tutel): a router (any type with the router interface of
// router.hpp: moe::LinearRouter, moe::CosineRouter), top-k picks per token, capacity-limited
// batch-prioritised slots (capacity.hpp), and E experts fc2(gelu(fc1(x))) (nn::Mlp, timm's ViT MLP, so
// a dense block's MLP upcycles into the experts by copy).
//
// Output of token n: sum over its kept picks j of gate[n, j] * expert_{e_j}(x_n), gate = the picked
// probability (renormalised over the k picks when the router says so, before any pick is dropped, as
// Tutel). A token whose picks are all dropped outputs 0 (its residual, when forward is given one).
//
// Data flow, chosen so that the cost is one GEMM per expert and layer (fc1, fc2) and O(N k Dm) copies:
//   - dispatch: each expert's kept tokens are gathered into one [n_e, Dm] batch (dispatch_rows.hpp:
//     one backward pass adds all batches' gradients back) and its MLP runs on them, never token by
//     token; the experts run one after another with each GEMM split over the threads, or whole
//     experts side by side when they spread evenly over the threads (expert_schedule.hpp), forward
//     and backward;
//   - combine: ONE gated_combine (gated_combine.hpp) reads each (token, pick)'s row of its expert's
//     output, times its gate, summed over the picks: one pass each way on backends with gated rows,
//     else the experts' outputs stacked, read back in (token, pick) order and multiplied. Scattering
//     each expert's rows into a zero [N, Dm] output instead would copy the whole output once per
//     expert (O(E N Dm)).
// The routing decisions (picks, slots) are made on the host from two small tensors ([N, k] indices
// and priorities), which is what lets the layer run unchanged on any device.

#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "ttmoe/moe/aux_losses.hpp"
#include "ttmoe/moe/capacity.hpp"
#include "ttmoe/moe/cosine_router.hpp"
#include "ttmoe/moe/dispatch_rows.hpp"
#include "ttmoe/moe/expert_schedule.hpp"
#include "ttmoe/moe/gated_combine.hpp"
#include "ttmoe/moe/router.hpp"
#include "ttmoe/nn/dropout.hpp"
#include "ttmoe/nn/mlp.hpp"
#include "ttmoe/ops/indexing.hpp"
#include "ttmoe/ops/parallel_tasks.hpp"
#include "ttmoe/ops/reduce.hpp"

namespace ttmoe::moe {

/// One expert: timm's Mlp fc2(act(fc1(x))) with exact GELU by default; parameters `fc1.*`, `fc2.*`.
template <class T, class D = cpu>
using FFNExpert = nn::Mlp<T, D>;

/// What MoEFFN needs of a router: routing of [N, D] tokens with optional noise, the expert count, the
/// input size (checked against the layer's input) and top_k (checked against the expert count).
template <class R, class T, class D>
concept MoERouter = requires(const R& r, const Tensor<T, DynShape<2>, D>& x) {
  { r.forward(x, x) } -> std::same_as<RouterOutput<T, D>>;
  { r.num_experts() } -> std::convertible_to<index_t>;
  { r.in_features() } -> std::convertible_to<index_t>;
  { r.top_k } -> std::convertible_to<index_t>;
};

/// Routing state of a MoEFFN's last forward, flattened over the B * T tokens.
template <class T, class D = cpu>
struct MoEFFNRouting {
  RouterOutput<T, D> out;                 ///< the router's tensors (recorded: the aux losses read them)
  std::vector<std::int64_t> top_index;    ///< [N * k] host copy of out.indices
  CapacityPlan plan;                      ///< slots and kept flags per pick, [N * k]
};

namespace detail {
/// A deep copy of a Linear as a fresh trainable leaf (upcycling must not share the dense weights).
template <class T, class D>
nn::Linear<T, D> copy_linear(const nn::Linear<T, D>& l) {
  autograd::NoGrad ng;
  nn::Linear<T, D> c;
  c.weight = l.weight.detach().clone();
  c.weight.set_requires_grad();
  if (l.bias.defined()) {
    c.bias = l.bias.detach().clone();
    c.bias.set_requires_grad();
  }
  return c;
}
}  // namespace detail

/// MoE FFN; parameters `router.*` (the router's own names), `experts.{e}.fc1.{weight,bias}`,
/// `experts.{e}.fc2.{weight,bias}`.
template <class T, class D = cpu, class Router = LinearRouter<T, D>>
  requires MoERouter<Router, T, D>
struct MoEFFN {
  Router router;
  std::vector<FFNExpert<T, D>> experts;
  /// C = k * int(capacity_factor * ceil(N / E)) slots per expert (GMoE: 1.5); must be > 0, and
  /// infinity disables dropping.
  double capacity_factor = 1.5;
  /// Dropout on each expert's hidden activations, fc2(dropout(act(fc1(x)))), in training only (GMoE:
  /// 0.1, Tutel's activation_fn Dropout(GELU)); applied when forward is given a generator.
  double expert_dropout = 0.0;

  /// How the experts share the host's threads (expert_schedule.hpp); the results are the same.
  ExpertThreads expert_threads = ExpertThreads::automatic;

  MoEFFNRouting<T, D> routing;  ///< of the last forward

  /// GMoE's upcycling: E copies of a pretrained dense MLP (deep, trainable), routed by `router`.
  static MoEFFN from_dense(const FFNExpert<T, D>& dense, Router router, double capacity_factor = 1.5) {
    MoEFFN m;
    m.router = std::move(router);
    m.capacity_factor = capacity_factor;
    const index_t E = m.router.num_experts();
    m.experts.reserve(E);
    for (index_t e = 0; e < E; ++e) {
      FFNExpert<T, D> x;
      x.fc1 = detail::copy_linear(dense.fc1);
      x.fc2 = detail::copy_linear(dense.fc2);
      x.act = dense.act;
      m.experts.push_back(std::move(x));
    }
    return m;
  }

  /// Parameters `router.*` then `experts.{e}.fc1.*`, `experts.{e}.fc2.*` (stable names for checkpoints).
  template <class V>
  void visit_parameters(V& v) {
    v.sub("router", router);
    for (std::size_t e = 0; e < experts.size(); ++e) v.sub("experts." + std::to_string(e), experts[e]);
  }

  /// E, as the router sees it (validate() checks that there are as many experts).
  index_t num_experts() const { return router.num_experts(); }
  /// k, the router's picks per token.
  index_t top_k() const { return router.top_k; }

  /// Throws ValueError / ShapeError naming the mismatch unless the configuration fits inputs of
  /// `dim` features: top_k in [1, E], capacity_factor > 0, expert_dropout in [0, 1), one expert per
  /// router output, router and experts taking `dim` features and the experts returning `dim`. Run by
  /// forward before any work.
  void validate(index_t dim) const {
    const index_t E = num_experts();
    check_top_k(index_t(router.top_k), E, "MoEFFN");
    check_capacity_factor(capacity_factor, "MoEFFN");
    if (!(expert_dropout >= 0.0 && expert_dropout < 1.0))
      throw ValueError("MoEFFN: expert_dropout = " + std::to_string(expert_dropout) + " must lie in [0, 1)");
    if (index_t(experts.size()) != E)
      throw ValueError("MoEFFN: the router has " + std::to_string(E) + " outputs but there are " +
                       std::to_string(experts.size()) + " experts");
    if (router.in_features() != dim)
      throw ShapeError("MoEFFN: the router takes " + std::to_string(router.in_features()) +
                       " features but the input has " + std::to_string(dim));
    for (std::size_t e = 0; e < experts.size(); ++e) {
      const auto& x = experts[e];
      if (x.fc1.in_features() != dim || x.fc2.out_features() != dim || x.fc2.in_features() != x.fc1.out_features())
        throw ShapeError("MoEFFN: expert " + std::to_string(e) + " (fc1 " + x.fc1.weight.shape().to_string() +
                         ", fc2 " + x.fc2.weight.shape().to_string() + ") does not map " + std::to_string(dim) +
                         " features to " + std::to_string(dim));
    }
  }

  /// y [B, T, D] for x [B, T, D]; all B*T tokens compete for capacity in one call. `noise` [B*T, E]
  /// ~ N(0, 1) in training (the router scales it by gate_noise / E), undefined for evaluation.
  /// `dropout_rng` non-null means training: expert_dropout masks are drawn from it. A defined
  /// `residual` [B, T, D] (the block's skip connection) is added inside the combine's pass: residual
  /// + y without a pass of its own each way, and where it is x itself, x's gradient is gathered in
  /// one buffer without a zero fill or a final add.
  Tensor<T, DynShape<3>, D> forward(const Tensor<T, DynShape<3>, D>& x, const Tensor<T, DynShape<2>, D>& noise = {},
                                    nn::Rng* dropout_rng = nullptr, const Tensor<T, DynShape<3>, D>& residual = {}) {
    const index_t B = x.extent(0), Tn = x.extent(1), Dm = x.extent(2), N = B * Tn;
    validate(Dm);
    if (residual.defined() && residual.extents() != x.extents())
      throw ShapeError("MoEFFN: the residual " + residual.shape().to_string() + " is not shaped like x " +
                       x.shape().to_string());
    const index_t E = num_experts();
    auto xf = x.reshape(DynShape<2>(N, Dm));
    routing.out = router.forward(xf, noise);
    const index_t k = routing.out.top_k();

    // Host-side decisions from two small tensors: the picks [N, k] and the priorities [N].
    routing.top_index = routing.out.indices.to_vector();
    std::vector<T> priority(N);
    {
      const auto tp = routing.out.top_probs.to_vector();
      for (index_t n = 0; n < N; ++n) priority[n] = tp[n * k];
    }
    routing.plan = plan_capacity(routing.top_index, priority, E, k, capacity_factor);

    // Group the kept picks per expert (tokens ascending); pos = row of the pick in its expert's batch.
    std::vector<std::vector<std::int64_t>> rows(E);
    std::vector<std::int64_t> pos(N * k, -1);
    for (index_t n = 0; n < N; ++n)
      for (index_t j = 0; j < k; ++j) {
        const index_t q = n * k + j;
        if (!routing.plan.kept[q]) continue;
        auto& r = rows[routing.top_index[q]];
        pos[q] = std::int64_t(r.size());
        r.push_back(n);
      }

    // One batched MLP per expert over its gathered tokens: the gathers here, one recorded node whose
    // backward sums the batches' gradients into x's (dispatch_rows.hpp), the experts one after another
    // or side by side (expert_schedule.hpp).
    std::vector<std::int64_t> expert_of(N * k);
    for (index_t q = 0; q < N * k; ++q) expert_of[q] = routing.plan.kept[q] ? routing.top_index[q] : -1;
    // (A dropped pick's pos is -1; neither the dispatch nor the combine reads it.)
    std::vector<Tensor<T, DynShape<2>, D>> inputs = dispatch_rows(xf, rows, expert_of, pos, k), outputs(E);
    std::vector<index_t> tokens(E);
    for (index_t e = 0; e < E; ++e) tokens[e] = index_t(rows[e].size());
    // Expert e's dropout draws from its own copy of the generator, which then advances by the one draw
    // a mask takes: the masks are those of drawing in expert order, whichever thread runs an expert.
    std::vector<nn::Rng> expert_rng(dropout_rng != nullptr && expert_dropout > 0.0 ? std::size_t(E) : 0);
    for (index_t e = 0; e < index_t(expert_rng.size()); ++e)
      if (tokens[e] > 0) {
        expert_rng[e] = *dropout_rng;
        dropout_rng->discard(1);
      }
    auto run = [&](index_t e) { outputs[e] = run_expert(e, inputs[e], expert_rng.empty() ? nullptr : &expert_rng[e]); };
    const ExpertSchedule schedule = schedule_experts(tokens, task_threads<D>());
    if (expert_threads == ExpertThreads::side_by_side ||
        (expert_threads == ExpertThreads::automatic && schedule.side_by_side))
      run_recorded_tasks<D>(index_t(schedule.longest_first.size()),
                            [&](index_t i) { run(schedule.longest_first[std::size_t(i)]); });
    else
      for (index_t e = 0; e < E; ++e)
        if (tokens[e] > 0) run(e);
    // Combine: each (token, pick) reads its row of its expert's output, times its gate (gated_combine:
    // one pass each way where the backend has gated rows).
    std::vector<Tensor<T, DynShape<2>, D>> parts;
    std::vector<std::int64_t> part_of(E, -1);
    for (index_t e = 0; e < E; ++e)
      if (tokens[e] > 0) {
        part_of[e] = std::int64_t(parts.size());
        parts.push_back(std::move(outputs[e]));
      }
    std::vector<std::int64_t> part(N * k);
    for (index_t q = 0; q < N * k; ++q) part[q] = expert_of[q] < 0 ? -1 : part_of[expert_of[q]];
    const bool self_residual = residual.defined() && residual.data() == x.data() && residual.meta() == x.meta();
    const Tensor<T, DynShape<2>, D> rf = !residual.defined() ? Tensor<T, DynShape<2>, D>()
                                         : self_residual     ? xf
                                                             : residual.reshape(DynShape<2>(N, Dm));
    Tensor<T, DynShape<2>, D> y;
    if (!parts.empty())
      y = gated_combine(parts, part, pos, routing.out.top_gates, rf);
    else  // N = 0
      y = rf.defined() ? rf : Tensor<T, DynShape<2>, D>::zeros(DynShape<2>(N, Dm));
    return y.reshape(DynShape<3>(B, Tn, Dm));
  }

  /// Expert e on its gathered tokens [n_e, D]: fc2(dropout(act(fc1(x)))), the dropout only with a
  /// generator (training) and expert_dropout > 0.
  Tensor<T, DynShape<2>, D> run_expert(index_t e, const Tensor<T, DynShape<2>, D>& xe, nn::Rng* rng) const {
    const auto& ex = experts[std::size_t(e)];
    // (nn::Mlp's fused op with a zero residual was tried here: 1.18x the dense FFN instead of 1.03x
    // in bench_gmoe_layer --expert-dropout 0 on a loaded 2-core EPYC, so the plain form stays.)
    if (rng == nullptr || expert_dropout <= 0.0) return ex(xe);
    // act(h) * mask as ONE elementwise pass (and one in the backward): evaluating act(h) and then
    // dropout would write and re-read the [n_e, H] hidden activation once more each way. The mask is
    // an expression operand computed from its element index inside that pass (and again inside its
    // backward), so no [n_e, H] mask is filled on the host, stored, or kept by the tape.
    const auto h = ex.fc1(xe);
    const auto mask = nn::dropout_mask_expr<T, D>(h.extents(), expert_dropout, *rng);
    return ex.fc2(nn::visit_activation(
        ex.act, [&]<class Act>(Act) { return Tensor<T, DynShape<2>, D>(expr::make_expr<Act>(h) * mask); }));
  }

  /// GMoE's auxiliary losses (importance + load, aux_losses.hpp) of the last forward's routing; add
  /// 0.01 * l_aux per MoE layer to the task loss. Call within the same tape as the forward.
  AuxLosses<T, D> aux_losses() const {
    if (!routing.out.logits.defined()) throw ValueError("MoEFFN::aux_losses: no forward has run yet");
    return gmoe_aux_losses(routing.out);
  }
};

/// GMoE's configuration of the layer: cosine router (moe::CosineRouter::init(dim, 256, 6, rng), top-1
/// not renormalised in the authors' code; the paper says top-2), capacity factor 1.5.
template <class T, class D = cpu>
using GMoEFFN = MoEFFN<T, D, CosineRouter<T, D>>;

}  // namespace ttmoe::moe
