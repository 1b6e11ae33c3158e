#pragma once
// `ttmm eval`: the TTMM paper's comparison on held-out documents (ttmm/evaluation.hpp's protocol).
// Methods (--methods, comma-separated):
//   base       the base model alone;
//   finetune   one LoRA trained on the whole training set (--train) with the experts' settings and
//              the same budget as all experts together (one epoch at batch 4), saved to --finetuned
//              when given and reused from there;
//   ttmm       TTMM with at most 1, 3 and 10 active experts (rows ttmm-1, ttmm-3, ttmm-10; β --beta,
//              τ --tau), merged with the automatic mode (dense or unmaterialised);
//   ensemble   the experts ttmm-3 and ttmm-10 select, run as separate models and their next-token
//              distributions averaged with the same weights (ensemble-3, ensemble-10);
//   ttt        test-time training: a fresh LoRA takes one step on each of the N (--neighbours)
//              training documents nearest the prompt, most similar first (--ttt-lr).
// The prompt is a document's first 50 tokens (prose) or 200 (code: ids ending in a source-code
// extension; --prompt-tokens overrides both); the continuation is scored. φ of the prompt is the
// embedder the store was trained with (the base model's mean-pooled states for "lm-mean-pooled:").
// Cost per prompt (--cost-prompts prompts, timed): what the method does for one prompt before and
// while generating --gen-tokens (100) tokens: selection + merge + generation + restore for TTMM, one
// generation per selected expert for the ensemble, N training steps + generation for TTT.

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ttmoe/training/progress.hpp"
#include "ttmoe/ttmm/ensemble.hpp"
#include "ttmoe/ttmm/evaluation.hpp"
#include "ttmoe/ttmm/test_time_merge.hpp"
#include "ttmoe/ttmm/test_time_training.hpp"
#include "train.hpp"

namespace ttmm_example {

/// What `ttmm eval` does (its command-line options).
struct EvalOptions {
  std::string model, experts, eval, train, finetuned;
  std::string methods = "base,finetune,ttmm,ensemble,ttt";
  ttmoe::ttmm::CorpusOptions corpus_options;
  ttmoe::moe::SparseSoftmaxConfig selection;  ///< β, τ (M is set per row)
  std::vector<ttmoe::index_t> active = {1, 3, 10};  ///< M of the ttmm rows
  std::vector<ttmoe::index_t> ensemble_active = {3, 10};
  ttmoe::index_t prompt_tokens = 0;  ///< 0: 50 for prose, 200 for code
  ttmoe::index_t gen_tokens = 100;
  std::size_t cost_prompts = 3;
  std::size_t max_documents = 0;  ///< 0: all
  ttmoe::ttmm::TestTimeTrainingOptions ttt;
  ttmoe::ttmm::ExpertTrainingOptions finetune;
  bool quiet = false;  ///< no progress lines
};

/// Whether a document id names source code (the protocol's 200-token prompt).
inline bool is_code_document(const std::string& id) {
  for (const char* ext : {".py", ".c", ".h", ".cpp", ".hpp", ".js", ".rs", ".go", ".java"})
    if (id.size() > std::strlen(ext) && id.compare(id.size() - std::strlen(ext), std::strlen(ext), ext) == 0) return true;
  return false;
}

/// The methods named by a comma-separated list; throws ValueError naming an unknown one.
inline std::vector<std::string> parse_methods(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string m; std::getline(ss, m, ',');) {
    if (m.empty()) continue;
    if (m != "base" && m != "finetune" && m != "ttmm" && m != "ensemble" && m != "ttt")
      throw ttmoe::ValueError("--methods: unknown method '" + m + "' (known: base, finetune, ttmm, ensemble, ttt)");
    out.push_back(m);
  }
  if (out.empty()) throw ttmoe::ValueError("--methods: no method given");
  return out;
}

/// Everything the methods share: the model, its tokenizer, the store, the evaluation documents
/// with their prompts' φ, and (for finetune and TTT) the training documents with their φ.
struct EvalSetup {
  ttmoe::models::LlamaForCausalLM<float> model;
  std::shared_ptr<ttmoe::text::Tokenizer> tokenizer;
  std::optional<ttmoe::ttmm::ExpertStore> store;
  std::vector<ttmoe::ttmm::EvalDocument> documents;
  ttmoe::Tensor<float, ttmoe::DynShape<2>> queries;  ///< φ of each document's prompt [n, d]
  std::vector<std::vector<std::int64_t>> train_tokens;
  ttmoe::Tensor<float, ttmoe::DynShape<2>> train_phi;  ///< φ of each training document
};

/// φ of token sequences with the store's embedder (phi.hpp).
inline ttmoe::Tensor<float, ttmoe::DynShape<2>> store_embeddings(const EvalSetup& s,
                                                                   const std::vector<std::vector<std::int64_t>>& tokens) {
  return Phi(s.store->index().embedder_id).embed(s.model, *s.tokenizer, tokens);
}

/// Reads a corpus and cuts its documents for evaluation; throws ValueError for a corpus with no
/// usable document.
inline std::vector<ttmoe::ttmm::EvalDocument> eval_documents(const EvalOptions& o, const ttmoe::text::Tokenizer& tok,
                                                            std::size_t context) {
  using namespace ttmoe;
  const auto corpus = ttmm::load_corpus(o.eval, o.corpus_options);
  if (!corpus.skipped.empty()) std::fputs(corpus.skipped_report().c_str(), stderr);
  auto tokens = ttmm::tokenize_corpus(corpus, tok, context);
  std::vector<ttmm::EvalDocument> out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (o.max_documents && out.size() == o.max_documents) break;
    if (tokens[i].size() < 2) continue;
    const auto kind = is_code_document(corpus.documents[i].id) ? ttmm::DocumentKind::code : ttmm::DocumentKind::prose;
    out.push_back(ttmm::cut_document(std::move(tokens[i]), o.prompt_tokens ? o.prompt_tokens : ttmm::prompt_tokens(kind)));
  }
  if (out.empty()) throw ValueError(o.eval + ": no evaluation document of at least 2 tokens");
  return out;
}

/// Loads everything `o` names; finetune and TTT need --train.
inline EvalSetup load_eval_setup(const EvalOptions& o, const std::vector<std::string>& methods) {
  using namespace ttmoe;
  EvalSetup s;
  s.model = models::load_llama<float>(o.model);
  s.tokenizer = text::load_tokenizer(o.model);
  s.store.emplace(ttmm::ExpertStore::open(o.experts, models::linear_shapes(s.model), base_model_id(o.model)));
  const auto context = std::size_t(s.model.config.max_position_embeddings);
  s.documents = eval_documents(o, *s.tokenizer, context);
  std::vector<std::vector<std::int64_t>> prompts;
  for (const auto& d : s.documents) prompts.push_back(d.prompt());
  s.queries = store_embeddings(s, prompts);
  const bool needs_train = std::find(methods.begin(), methods.end(), "ttt") != methods.end() ||
                           (std::find(methods.begin(), methods.end(), "finetune") != methods.end() &&
                            (o.finetuned.empty() || !std::filesystem::exists(std::filesystem::path(o.finetuned) / "adapter_config.json")));
  if (needs_train) {
    if (o.train.empty()) throw ValueError("--methods finetune and ttt need the training documents: give --train PATH");
    s.train_tokens = ttmm::tokenize_corpus(ttmm::load_corpus(o.train, o.corpus_options), *s.tokenizer, context);
    s.train_phi = store_embeddings(s, s.train_tokens);
  }
  return s;
}

/// Row i of a [n, d] tensor as a vector.
inline std::vector<float> row_of(const ttmoe::Tensor<float, ttmoe::DynShape<2>>& t, std::size_t i) {
  const auto v = t.to_vector();
  const auto d = std::size_t(t.extent(1));
  return {v.begin() + std::ptrdiff_t(i * d), v.begin() + std::ptrdiff_t((i + 1) * d)};
}

/// Seconds `f` takes.
template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Greedy generation of o.gen_tokens tokens after `prompt` (what the cost column times).
inline void generate_for_cost(const EvalSetup& s, const EvalOptions& o, const std::vector<std::int64_t>& prompt) {
  ttmoe::models::GenerationOptions g;
  g.max_new_tokens = o.gen_tokens;
  (void)ttmoe::models::generate(s.model, {prompt}, g);
}

/// One method's progress over the documents, drawn with the shared progress line unless quiet.
struct EvalProgress {
  const EvalOptions& o;
  std::string label;
  std::size_t total;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  /// After document `done` (1-based) of `total`.
  void step(std::size_t done) const {
    if (o.quiet) return;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ttmoe::training::draw_progress_line(label, done, total, secs > 0 ? double(done) / secs : 0.0, "documents");
  }
};

/// The multitask fine-tune: loaded from o.finetuned when there, else trained (and saved there).
inline ttmoe::models::PeftAdapter<float> multitask_adapter(EvalSetup& s, const EvalOptions& o) {
  using namespace ttmoe;
  if (!o.finetuned.empty() && std::filesystem::exists(std::filesystem::path(o.finetuned) / "adapter_config.json"))
    return models::load_peft_adapter(o.finetuned, s.model);
  auto a = ttmm::train_expert(s.model, s.train_tokens, 0, o.finetune, o.model,
                              o.quiet ? nullptr : training::stderr_progress("finetune", 1));
  if (!o.finetuned.empty()) models::save_peft_adapter(a, o.finetuned);
  return a;
}

/// Runs the methods on the setup's documents, in the order given; rows as ttmm::MethodResult.
inline std::vector<ttmoe::ttmm::MethodResult> run_methods(EvalSetup& s, const EvalOptions& o,
                                                          const std::vector<std::string>& methods) {
  using namespace ttmoe;
  std::vector<ttmm::MethodResult> rows;
  const std::size_t n = s.documents.size(), timed = std::min(o.cost_prompts, n);
  auto finish = [&](ttmm::MethodResult& r, double cost_seconds) {
    r.seconds_per_prompt = timed ? cost_seconds / double(timed) : 0.0;
    rows.push_back(r);
  };
  // Scores every document with the model as it stands; the cost is one generation per prompt.
  auto plain = [&](const std::string& name) {
    ttmm::MethodResult r;
    r.method = name;
    const EvalProgress progress{o, name, n};
    for (std::size_t i = 0; i < n; ++i) {
      r.add(models::score_continuation(s.model, s.documents[i].ids, s.documents[i].prefix));
      progress.step(i + 1);
    }
    double cost = 0;
    for (std::size_t i = 0; i < timed; ++i) cost += seconds_of([&] { generate_for_cost(s, o, s.documents[i].prompt()); });
    finish(r, cost);
  };
  // One row per M of `Ms` ("<prefix>M"): o's β and τ with at most M experts; `per_document(cfg,
  // row, cost, i)` scores document i into the row and adds its timing to cost when i < timed.
  auto sparse_rows = [&](const std::string& prefix, const std::vector<index_t>& Ms, auto&& per_document) {
    for (const index_t M : Ms) {
      auto cfg = o.selection;
      cfg.max_experts = M;
      ttmm::MethodResult r;
      r.method = prefix + std::to_string(M);
      double cost = 0;
      const EvalProgress progress{o, r.method, n};
      for (std::size_t i = 0; i < n; ++i) {
        per_document(cfg, r, cost, i);
        progress.step(i + 1);
      }
      finish(r, cost);
    }
  };
  ttmm::TestTimeMerger merger(s.model, *s.store, std::size_t(1) << 30, ttmm::MappedBaseWeights::open_model_folder(o.model));
  for (const auto& method : methods) {
    if (method == "base") plain("base");
    if (method == "finetune") {
      auto a = multitask_adapter(s, o);
      models::AttachedAdapters<float> on(s.model, {{&a, 1.0}}, models::LoraMode::merged);
      plain("finetune");
    }
    if (method == "ttmm")
      sparse_rows("ttmm-", o.active, [&](const moe::SparseSoftmaxConfig& cfg, ttmm::MethodResult& r, double& cost, std::size_t i) {
        const auto& d = s.documents[i];
        if (i < timed)
          cost += seconds_of([&] {
            const auto q = store_embeddings(s, {d.prompt()}).to_vector();  // φ of the prompt is part of selection
            auto active = merger.activate(q, o.gen_tokens, ttmm::MergeMode::automatic, cfg);
            generate_for_cost(s, o, d.prompt());
          });
        auto active = merger.activate(row_of(s.queries, i), index_t(d.ids.size()), ttmm::MergeMode::automatic, cfg);
        r.add(models::score_continuation(s.model, d.ids, d.prefix));
      });
    if (method == "ensemble")
      sparse_rows("ensemble-", o.ensemble_active, [&](const moe::SparseSoftmaxConfig& cfg, ttmm::MethodResult& r, double& cost, std::size_t i) {
        const auto& d = s.documents[i];
        const auto sel = ttmm::select_experts(row_of(s.queries, i), s.store->centroids(), cfg);
        std::vector<std::shared_ptr<const ttmm::ExpertCache::Expert>> held;
        std::vector<models::WeightedAdapter<float>> experts;
        for (std::size_t k = 0; k < sel.experts.size(); ++k) {
          held.push_back(merger.cache().get(sel.experts[k]));
          experts.push_back({held.back().get(), sel.weights[k]});
        }
        r.add(ttmm::ensemble_continuation(s.model, experts, d.ids, d.prefix));
        // Cost: the experts run as separate models, one generation each (the base model when none).
        if (i < timed)
          cost += seconds_of([&] {
            if (experts.empty()) generate_for_cost(s, o, d.prompt());
            for (const auto& e : experts) {
              models::AttachedAdapters<float> one(s.model, {{e.adapter, 1.0}}, models::LoraMode::unmerged);
              generate_for_cost(s, o, d.prompt());
            }
          });
      });
    if (method == "ttt") {
      ttmm::MethodResult r;
      r.method = "ttt";
      double cost = 0;
      const EvalProgress ttt_progress{o, "ttt", n};
      for (std::size_t i = 0; i < n; ++i) {
        const auto& d = s.documents[i];
        models::PeftAdapter<float> a;
        const double train_seconds = seconds_of([&] {
          std::vector<std::vector<std::int64_t>> near;
          for (const auto j : ttmm::nearest_documents(row_of(s.queries, i), s.train_phi, o.ttt.neighbours))
            near.push_back(s.train_tokens[j]);
          a = ttmm::test_time_train(s.model, near, o.ttt);
        });
        models::AttachedAdapters<float> on(s.model, {{&a, 1.0}}, models::LoraMode::merged);
        r.add(models::score_continuation(s.model, d.ids, d.prefix));
        if (i < timed) cost += train_seconds + seconds_of([&] { generate_for_cost(s, o, d.prompt()); });
        ttt_progress.step(i + 1);
      }
      finish(r, cost);
    }
  }
  return rows;
}

/// Runs `ttmm eval`; returns the exit status.
inline int run_eval(const EvalOptions& o) {
  try {
    const auto methods = parse_methods(o.methods);
    auto s = load_eval_setup(o, methods);
    std::printf("documents: %zu  experts: %lld  beta %.3g  tau %.3g\n", s.documents.size(),
                static_cast<long long>(s.store->num_experts()), o.selection.beta, o.selection.tau);
    const auto rows = run_methods(s, o, methods);
    std::fputs(ttmoe::ttmm::format_comparison(rows).c_str(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ttmm eval: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ttmm_example
