// TTMM's evaluation side without reference libraries: the ensemble against averaging the experts'
// next-token distributions by hand, TTT's neighbour order and step count, the normalisation between
// the base model and TTT, the prompt/continuation cut, the comparison table, and bad input.

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "ttmm_test_util.hpp"
#include "ttmoe/backend/cpu/backend.hpp"
#include "ttmoe/ttmm/ensemble.hpp"
#include "ttmoe/ttmm/evaluation.hpp"
#include "ttmoe/ttmm/test_time_training.hpp"

using namespace ttmoe;

namespace {

std::vector<std::int64_t> some_ids(std::size_t n, std::int64_t salt) {
  std::vector<std::int64_t> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = std::int64_t((i * 7 + std::size_t(salt) * 13 + 3) % 50);
  return ids;
}

/// Every row's softmax of the full sequence's logits, computed here without the library's scorer.
std::vector<std::vector<double>> softmax_rows(const models::LlamaForCausalLM<float>& m, const std::vector<std::int64_t>& ids) {
  autograd::NoGrad ng;
  const index_t n = index_t(ids.size()), V = m.config.vocab_size;
  auto h = m.hidden_states(IndexTensor<DynShape<2>>::from_host(DynShape<2>(1, n), ids));
  const auto z = m.logits(h.reshape(DynShape<2>(n, h.extent(2)))).to_vector();
  std::vector<std::vector<double>> p(static_cast<std::size_t>(n), std::vector<double>(static_cast<std::size_t>(V)));
  for (index_t r = 0; r < n; ++r) {
    double sum = 0;
    for (index_t v = 0; v < V; ++v) sum += p[std::size_t(r)][std::size_t(v)] = std::exp(double(z[std::size_t(r * V + v)]));
    for (auto& x : p[std::size_t(r)]) x /= sum;
  }
  return p;
}

}  // namespace

TEST_CASE("ttmm ensemble: the w-weighted average of the experts' next-token distributions", "[ttmm][eval]") {
  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 5);
  auto e0 = ttmm_test::random_expert(m, 21), e1 = ttmm_test::random_expert(m, 22);
  // Scaled down so the experts move the model by a realistic amount, not beyond recognition.
  for (auto* e : {&e0, &e1})
    for (auto& [name, mod] : e->modules) mod.scaling *= 0.05;
  const auto ids = some_ids(20, 1);
  const index_t prefix = 8;
  const double w0 = 0.7, w1 = 0.3;

  std::vector<std::vector<std::vector<double>>> probs;
  for (auto* e : {&e0, &e1}) {
    models::AttachedAdapters<float> a(m, {{e, 1.0}}, models::LoraMode::merged);
    probs.push_back(softmax_rows(m, ids));
  }
  double by_hand = 0;
  for (index_t t = prefix; t < index_t(ids.size()); ++t) {
    const auto tok = std::size_t(ids[std::size_t(t)]);
    by_hand += std::log(w0 * probs[0][std::size_t(t - 1)][tok] + w1 * probs[1][std::size_t(t - 1)][tok]);
  }
  const auto base_before = models::score_continuation(m, ids, prefix);
  const auto s = ttmm::ensemble_continuation(m, {{&e0, w0}, {&e1, w1}}, ids, prefix);
  CHECK(s.tokens == index_t(ids.size()) - prefix);
  CHECK(s.logprob == Approx(by_hand).epsilon(1e-5));
  // Not the average of the NLLs (the distributions are averaged, so Jensen makes it at least that).
  const auto s0 = ttmm::ensemble_continuation(m, {{&e0, 1.0}}, ids, prefix);
  const auto s1 = ttmm::ensemble_continuation(m, {{&e1, 1.0}}, ids, prefix);
  CHECK(s.logprob >= w0 * s0.logprob + w1 * s1.logprob - 1e-9);
  CHECK(s0.logprob != Approx(s1.logprob));
  // The model is left unchanged, and no expert means the base model.
  CHECK(models::score_continuation(m, ids, prefix).logprob == base_before.logprob);
  CHECK(ttmm::ensemble_continuation(m, {}, ids, prefix).logprob == base_before.logprob);
}

TEST_CASE("ttmm mixture_logprobs: log-sum-exp of weighted rows, bad input is a ValueError", "[ttmm][eval]") {
  const std::vector<std::vector<double>> lp = {{std::log(0.2), std::log(0.5)}, {std::log(0.6), -1000.0}};
  const auto m = ttmm::mixture_logprobs(lp, {0.25, 0.75});
  CHECK(m[0] == Approx(std::log(0.25 * 0.2 + 0.75 * 0.6)));
  CHECK(m[1] == Approx(std::log(0.25 * 0.5)));  // the -1000 term underflows in exp but not here
  CHECK_THROWS_AS(ttmm::mixture_logprobs(lp, {1.0}), ValueError);
  CHECK_THROWS_AS(ttmm::mixture_logprobs({{0.0}, {0.0, 0.0}}, {0.5, 0.5}), ValueError);
  CHECK_THROWS_AS(ttmm::mixture_logprobs({{0.0}}, {-1.0}), ValueError);
}

TEST_CASE("ttmm TTT: neighbours most similar first, one step per neighbour, the model unchanged", "[ttmm][eval]") {
  // Four unit embeddings at increasing angles from the query (1, 0): similarities 1, cos 30°, 0, -1.
  const std::vector<float> e = {0.f, 1.f, 1.f, 0.f, -1.f, 0.f, 0.8660254f, 0.5f};
  const auto docs = Tensor<float, DynShape<2>>::from_host(DynShape<2>(4, 2), e);
  const std::vector<float> q = {1.f, 0.f};
  CHECK(ttmm::nearest_documents(q, docs, 3) == std::vector<std::size_t>{1, 3, 0});
  CHECK(ttmm::nearest_documents(q, docs, 10) == std::vector<std::size_t>{1, 3, 0, 2});
  CHECK_THROWS_AS(ttmm::nearest_documents(std::vector<float>{1.f}, docs, 3), ShapeError);

  const auto c = models::LlamaConfig::from_json(ttmm_test::tiny_llama_json());
  models::LlamaForCausalLM<float> m(c, 7);
  const std::vector<std::vector<std::int64_t>> neighbours = {some_ids(12, 1), some_ids(9, 2), some_ids(15, 3)};
  const auto probe = some_ids(16, 4);
  const auto before = models::score_continuation(m, probe, 4);
  ttmm::TestTimeTrainingOptions o;
  o.lora.rank = 4;
  CHECK(o.neighbours == 100);
  CHECK(o.lora.adam.lr == 5e-4);
  std::size_t steps = 0, total = 0;
  auto a = ttmm::test_time_train(m, neighbours, o, [&](const training::StepReport& r) {
    CHECK(r.step == steps);
    ++steps;
    total = r.total_steps;
  });
  CHECK(steps == neighbours.size());
  CHECK(total == neighbours.size());
  CHECK(models::score_continuation(m, probe, 4).logprob == before.logprob);
  // Training moved B away from PEFT's zero initialisation; the order of the neighbours matters.
  double moved = 0;
  for (auto& [name, mod] : a.modules)
    for (float x : mod.lora_B.weight.to_vector()) moved += std::fabs(x);
  CHECK(moved > 0);
  auto reversed = ttmm::test_time_train(m, {neighbours[2], neighbours[1], neighbours[0]}, o);
  const auto& name = a.modules.begin()->first;
  CHECK(a.modules.at(name).lora_B.weight.to_vector() != reversed.modules.at(name).lora_B.weight.to_vector());
  CHECK_THROWS_AS(ttmm::test_time_train(m, {}, o), ValueError);
}

TEST_CASE("ttmm normalised perplexity: base 0, TTT 1, linear between", "[ttmm][eval]") {
  CHECK(ttmm::normalised_perplexity(20.0, 20.0, 10.0) == 0.0);
  CHECK(ttmm::normalised_perplexity(10.0, 20.0, 10.0) == 1.0);
  CHECK(ttmm::normalised_perplexity(15.0, 20.0, 10.0) == Approx(0.5));
  CHECK(ttmm::normalised_perplexity(8.0, 20.0, 10.0) == Approx(1.2));
  CHECK(ttmm::normalised_perplexity(25.0, 20.0, 10.0) == Approx(-0.5));
  CHECK_THROWS_AS(ttmm::normalised_perplexity(15.0, 20.0, 20.0), ValueError);
  CHECK_THROWS_AS(ttmm::normalised_perplexity(std::nan(""), 20.0, 10.0), ValueError);
  CHECK_THROWS_AS(ttmm::normalised_perplexity(0.0, 20.0, 10.0), ValueError);
}

TEST_CASE("ttmm evaluation: prompt lengths, the cut, the comparison table", "[ttmm][eval]") {
  CHECK(ttmm::prompt_tokens(ttmm::DocumentKind::prose) == 50);
  CHECK(ttmm::prompt_tokens(ttmm::DocumentKind::code) == 200);
  const auto d = ttmm::cut_document(some_ids(80, 1), 50);
  CHECK(d.prefix == 50);
  CHECK(d.prompt().size() == 50);
  CHECK(ttmm::cut_document(some_ids(30, 1), 50).prefix == 15);  // short: half is the prompt
  CHECK(ttmm::cut_document(some_ids(2, 1), 50).prefix == 1);
  CHECK_THROWS_AS(ttmm::cut_document(some_ids(1, 1), 50), ValueError);
  CHECK_THROWS_AS(ttmm::cut_document({}, 50), ValueError);

  auto row = [](std::string name, double nll, double seconds) {
    ttmm::MethodResult r;
    r.method = std::move(name);
    r.add({-nll * 10, 10});
    r.add({-nll * 30, 30});
    r.seconds_per_prompt = seconds;
    return r;
  };
  const std::vector<ttmm::MethodResult> rows = {row("base", std::log(20.0), 0.1), row("ttmm-3", std::log(15.0), 0.2),
                                                row("ttt", std::log(10.0), 4.0)};
  CHECK(rows[1].documents == 2);
  CHECK(rows[1].perplexity() == Approx(15.0));
  const auto table = ttmm::format_comparison(rows);
  CHECK(table.find("ttmm-3") != std::string::npos);
  CHECK(table.find("15.000") != std::string::npos);
  CHECK(table.find("0.500") != std::string::npos);  // normalised
  CHECK(table.find("4000.0") != std::string::npos); // ms per prompt
  CHECK(table.find("1.000") != std::string::npos);
  // Without a TTT row there is no scale: the column shows "-".
  const auto no_ttt = ttmm::format_comparison({rows[0], rows[1]});
  CHECK(no_ttt.find("0.500") == std::string::npos);
  CHECK(no_ttt.find(" - ") != std::string::npos);
}
