#pragma once
// `ttmm train`: the TTMM training side end to end, alone or under `mpirun -np N`.
//   every rank   loads the base model, its tokenizer and the corpus, truncates each document to its
//                first --max-tokens tokens (capped at the model's context);
//   rank 0       embeds the documents (φ), clusters them into K (bisecting k-means, largest
//                diameter first), writes centroids.safetensors and index.json through the store
//                writer (or, restarting, checks that the store there is this run's), clears what
//                killed writers left, and broadcasts the clusters;
//   every rank   trains the experts the rank plan gives it (largest cluster first, to the
//                least-loaded rank; ttmm::assign_experts_to_ranks) and writes each atomically,
//                skipping experts already in the store;
//   rank 0       after the last rank is done, opens the finished store with its validating reader.
// A failure on any rank is reported and every rank exits with status 1 (nothing is left that looks
// like a finished expert: see ttmm/expert_store.hpp). For the restart test, the environment variable
// TTMM_EXIT_AFTER_EXPERTS=n makes each rank exit abruptly (no MPI_Finalize, like a killed process)
// once it has written n experts.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "phi.hpp"
#include "ranks.hpp"
#include "ttmoe/models/llm.hpp"
#include "ttmoe/text.hpp"
#include "ttmoe/ttmm/clustering.hpp"
#include "ttmoe/ttmm/corpus.hpp"
#include "ttmoe/ttmm/expert_store.hpp"
#include "ttmoe/ttmm/expert_training.hpp"

namespace ttmm_example {

/// What `ttmm train` does (its command-line options).
struct TrainOptions {
  std::string model, embedder = "lm", corpus, out;
  ttmoe::ttmm::CorpusOptions corpus_options;
  ttmoe::index_t clusters = 100;
  std::size_t max_tokens = 1024;
  ttmoe::ttmm::ExpertTrainingOptions expert;
};

/// The id of the embedder φ as the store records it: the base model's for `lm`, else the
/// sentence-transformers folder's absolute path (so `ttmm eval` finds it from any directory).
inline std::string embedder_id(const TrainOptions& o) {
  return o.embedder == "lm" ? lm_embedder_id(o.model) : std::filesystem::absolute(o.embedder).lexically_normal().string();
}

/// φ of every document, by --embedder (see phi.hpp).
inline ttmoe::Tensor<float, ttmoe::DynShape<2>> embed_documents(const TrainOptions& o,
                                                                  const ttmoe::models::LlamaForCausalLM<float>& m,
                                                                  const ttmoe::text::Tokenizer& tok,
                                                                  const std::vector<std::vector<std::int64_t>>& tokens) {
  return Phi(embedder_id(o)).embed(m, tok, tokens);
}

/// The base model's identity for the store: its folder and a fingerprint of its config.json.
inline ttmoe::ttmm::BaseModelId base_model_id(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  if (!in) throw ttmoe::ValueError(dir + "/config.json: cannot read");
  return {dir, ttmoe::ttmm::config_fingerprint(nlohmann::json::parse(in))};
}

/// The index this run writes.
inline ttmoe::ttmm::StoreIndex store_index(const TrainOptions& o, const ttmoe::ttmm::Clusters& c, ttmoe::index_t dim) {
  ttmoe::ttmm::StoreIndex x;
  x.num_experts = ttmoe::index_t(c.count());
  x.rank = o.expert.rank;
  x.lora_alpha = o.expert.alpha;
  x.target_modules = o.expert.targets;
  x.embedder_id = embedder_id(o);
  x.embedding_dim = dim;
  x.base_model = base_model_id(o.model);
  x.cluster_sizes = c.sizes;
  return x;
}

/// Restarting into an existing store: it must be this run's (same settings, base model, embedder,
/// clusters and centroids), else the experts there would be mixed with others. Throws StoreError
/// naming the field that differs.
inline void check_same_store(const std::filesystem::path& dir, const ttmoe::ttmm::StoreIndex& want,
                             const ttmoe::Tensor<float, ttmoe::DynShape<2>>& centroids) {
  using ttmoe::ttmm::StoreError;
  const auto file = (dir / "index.json").string();
  std::ifstream in(dir / "index.json");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw StoreError(file, std::string("invalid JSON: ") + e.what());
  }
  const auto have = ttmoe::ttmm::StoreIndex::from_json(j, file);
  const std::string hint = " (this store was written by another training run: use another --out, or delete it)";
  auto differ = [&](const std::string& field, const std::string& there, const std::string& here) {
    throw StoreError(file, "mismatched store: " + field + " is " + there + " there but " + here + " in this run" + hint);
  };
  if (have.num_experts != want.num_experts) differ("num_experts", std::to_string(have.num_experts), std::to_string(want.num_experts));
  if (have.rank != want.rank) differ("rank", std::to_string(have.rank), std::to_string(want.rank));
  if (have.lora_alpha != want.lora_alpha) differ("lora_alpha", std::to_string(have.lora_alpha), std::to_string(want.lora_alpha));
  if (have.target_modules != want.target_modules)
    differ("target_modules", nlohmann::json(have.target_modules).dump(), nlohmann::json(want.target_modules).dump());
  if (have.embedder_id != want.embedder_id) differ("embedder.id", have.embedder_id, want.embedder_id);
  if (have.base_model.config_fingerprint != want.base_model.config_fingerprint)
    differ("the base model's config", have.base_model.config_fingerprint, want.base_model.config_fingerprint);
  if (have.cluster_sizes != want.cluster_sizes)
    differ("cluster_sizes", nlohmann::json(have.cluster_sizes).dump(), nlohmann::json(want.cluster_sizes).dump());
  const auto cfile = (dir / "centroids.safetensors").string();
  try {
    ttmoe::io::SafetensorsFile f(dir / "centroids.safetensors");
    std::vector<float> v(std::size_t(centroids.numel()));
    if (!f.contains("centroids") || ttmoe::index_t(f.info("centroids").shape.size()) != 2 ||
        ttmoe::index_t(f.info("centroids").numel()) != centroids.numel())
      throw StoreError(cfile, "mismatched store: 'centroids' missing or of another shape" + hint);
    f.read_as<float>("centroids", std::span<float>(v));
    const auto mine = centroids.to_vector();
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!(std::fabs(v[i] - mine[i]) <= 1e-4f))
        throw StoreError(cfile, "mismatched store: centroid value " + std::to_string(i) + " is " + std::to_string(v[i]) +
                                    " there but " + std::to_string(mine[i]) + " in this run (another corpus?)" + hint);
  } catch (const ttmoe::io::SafetensorsError& e) {
    throw StoreError(cfile, std::string("unreadable: ") + e.what());
  }
}

/// Rank 0's part before training: embed, cluster, write or check the store's index and centroids.
inline ttmoe::ttmm::Clusters prepare_store(const TrainOptions& o, const ttmoe::models::LlamaForCausalLM<float>& m,
                                           const ttmoe::text::Tokenizer& tok,
                                           const std::vector<std::vector<std::int64_t>>& tokens) {
  using namespace ttmoe;
  const auto phi = embed_documents(o, m, tok, tokens);
  auto c = ttmm::cluster_embeddings(phi, o.clusters);
  const auto index = store_index(o, c, phi.extent(1));
  ttmm::ExpertStoreWriter store(o.out);
  if (std::filesystem::exists(std::filesystem::path(o.out) / "index.json")) {
    check_same_store(o.out, index, c.centroids);
    if (const auto n = store.remove_partial_experts())
      std::fprintf(stderr, "ttmm train: removed %zu half-written expert folder(s) of an interrupted run\n", n);
  } else {
    store.write_centroids(c.centroids);
    store.write_index(index);
  }
  std::string sizes;
  for (auto s : c.sizes) sizes += (sizes.empty() ? "" : " ") + std::to_string(s);
  std::printf("documents: %zu\nclusters: %zu\ncluster_sizes: %s\n", tokens.size(), c.count(), sizes.c_str());
  std::fflush(stdout);
  return c;
}

/// Runs `ttmm train` on this rank; returns the process's exit status (0 on every rank, or 1 on
/// every rank when any failed).
inline int run_train(const Ranks& ranks, TrainOptions o) {
  using namespace ttmoe;
  const std::string who = ranks.size() > 1 ? "ttmm train [rank " + std::to_string(ranks.rank()) + "]" : "ttmm train";
  auto report = [&](const std::exception& e) { std::fprintf(stderr, "%s: error: %s\n", who.c_str(), e.what()); };

  // Every rank: model, tokenizer, corpus, tokens. The same inputs fail the same way on every rank,
  // so only rank 0 reports those.
  models::LlamaForCausalLM<float> model;
  std::shared_ptr<text::Tokenizer> tok;
  ttmm::Corpus corpus;
  std::vector<std::vector<std::int64_t>> tokens;
  int failed = 0;
  try {
    model = models::load_llama<float>(o.model);
    tok = text::load_tokenizer(o.model);
    const auto context = std::size_t(model.config.max_position_embeddings);
    if (o.max_tokens > context) {
      if (ranks.leader())
        std::fprintf(stderr, "ttmm train: --max-tokens %zu exceeds the model's context; using %zu\n", o.max_tokens, context);
      o.max_tokens = context;
    }
    corpus = ttmm::load_corpus(o.corpus, o.corpus_options);
    if (ranks.leader() && !corpus.skipped.empty())
      std::fprintf(stderr, "%sttmm train: %zu document(s) skipped, %zu used\n", corpus.skipped_report().c_str(),
                   corpus.skipped.size(), corpus.documents.size());
    tokens = ttmm::tokenize_corpus(corpus, *tok, o.max_tokens);
  } catch (const std::exception& e) {
    if (ranks.leader()) report(e);
    failed = 1;
  }
  if (ranks.sum(failed) > 0) return 1;

  // Rank 0: φ, clusters, the store's index and centroids; the others wait for its clusters.
  std::vector<std::int64_t> assignment;
  std::string error;
  ttmm::Clusters clusters;
  if (ranks.leader()) {
    try {
      clusters = prepare_store(o, model, *tok, tokens);
      assignment = clusters.assignment;
    } catch (const std::exception& e) {
      report(e);
      error = e.what();
    }
  }
  ranks.broadcast(error);
  if (!error.empty()) return 1;
  ranks.broadcast(assignment);
  if (!ranks.leader()) {
    clusters.assignment = assignment;
    clusters.sizes.assign(std::size_t(o.clusters), 0);
    for (auto a : assignment) ++clusters.sizes[std::size_t(a)];
  }

  // Every rank: its experts.
  const auto plan = ttmm::assign_experts_to_ranks(ttmm::cluster_token_costs(clusters, tokens), ranks.size());
  const auto& mine = plan[std::size_t(ranks.rank())];
  std::size_t exit_after = 0, written = 0;
  if (const char* e = std::getenv("TTMM_EXIT_AFTER_EXPERTS")) exit_after = std::size_t(std::strtoull(e, nullptr, 10));
  ttmm::ExpertsReport done;
  try {
    ttmm::ExpertStoreWriter store(o.out);
    done = ttmm::train_store_experts(
        model, store, clusters, tokens, mine, o.expert, o.model,
        [&](std::size_t k) {
          return training::stderr_progress((ranks.size() > 1 ? "rank " + std::to_string(ranks.rank()) + " " : "") +
                                               "expert " + std::to_string(k),
                                           1);
        },
        [&](std::size_t) {
          if (exit_after && ++written == exit_after) {
            std::fprintf(stderr, "%s: TTMM_EXIT_AFTER_EXPERTS=%zu: exiting abruptly\n", who.c_str(), exit_after);
            std::fflush(stderr);
            std::_Exit(3);
          }
        });
  } catch (const std::exception& e) {
    report(e);
    failed = 1;
  }
  const auto trained = ranks.sum(std::int64_t(done.trained.size()));
  const auto skipped = ranks.sum(std::int64_t(done.skipped.size()));
  if (ranks.sum(failed) > 0) return 1;

  // Rank 0: the finished store must open with the reader serving uses.
  if (ranks.leader()) {
    try {
      const auto store = ttmm::ExpertStore::open(o.out, models::linear_shapes(model), base_model_id(o.model));
      std::printf("experts: %zu (trained %lld, already there %lld) on %d rank(s)\nstore: %s\n",
                  std::size_t(store.num_experts()), static_cast<long long>(trained), static_cast<long long>(skipped),
                  ranks.size(), o.out.c_str());
    } catch (const std::exception& e) {
      report(e);
      failed = 1;
    }
  }
  return ranks.sum(failed) > 0 ? 1 : 0;
}

}  // namespace ttmm_example
