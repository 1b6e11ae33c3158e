#pragma once
// `ttmm` with no argument: the TTMM paper's comparison end to end on two real corpora from Debian
// packages, no download, minutes on 2 cores, every stage cached under the examples' cache folder
// (--cache, $TTMOE_CACHE_DIR or ~/.cache/ttmoe):
//   corpora   Python code: the standard library's sources (/usr/lib/python3.11/*.py, python3.11-minimal);
//             prose: the reST sources of the Python documentation (python3.11-doc,
//             /usr/share/doc/python3.11/html/_sources/**/*.txt). Each corpus is shuffled (seed 0)
//             and split into train / validation / test documents, written as files (ids ending in
//             .py are code: prompt 200 tokens; the rest prose: 50);
//   base      the small Llama of `ttmm base-model` (`llm train`'s recipe) trained on the training
//             documents only;
//   experts   `ttmm train` on the training documents (φ = the base model's mean-pooled states);
//   choices   the experts' learning rate, β and τ (for ttmm-3) and TTT's learning rate are chosen on
//             the validation documents, never on the test documents;
//   test      `ttmm eval`'s methods on the test documents: the table, and a PNG in the manner of the
//             paper's Figure 1 (normalised perplexity against test-time cost per prompt).

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ttmoe/plot/lines.hpp"
#include "../common/cache_dir.hpp"
#include "../llm/train.hpp"
#include "eval.hpp"
#include "ranks.hpp"
#include "train.hpp"

namespace ttmm_example {

/// The default run's budgets (command-line options of `ttmm` with no subcommand).
struct DefaultOptions {
  std::optional<std::string> cache;
  std::string figure;  ///< empty: <work folder>/figure1.png
  std::string code_dir = "/usr/lib/python3.11", prose_dir = "/usr/share/doc/python3.11/html/_sources";
  std::size_t train = 96, val = 8, test = 16;  ///< documents per corpus
  ttmoe::index_t base_steps = 300, context = 256;
  ttmoe::index_t clusters = 8, rank = 8;
  std::vector<double> expert_lrs = {2e-4, 1e-3};
  std::vector<double> betas = {0.05, 0.1, 0.2, 0.4}, taus = {0.01, 0.1};
  std::vector<double> ttt_lrs = {5e-4, 2e-3};
  std::size_t neighbours = 100, cost_prompts = 3;
};

/// The work folder's name: everything that changes a result is in it.
inline std::string default_folder(const DefaultOptions& o) {
  return "ttmm-default-v2-n" + std::to_string(o.train) + "-" + std::to_string(o.val) + "-" + std::to_string(o.test) +
         "-s" + std::to_string(o.base_steps) + "-t" + std::to_string(o.context) + "-k" + std::to_string(o.clusters) +
         "-r" + std::to_string(o.rank);
}

/// The files of one corpus: regular files (not links) under `dir` (recursively when `recursive`) ending in
/// `ext`, of at least 200 bytes, sorted by path. Throws ValueError naming the package when none.
inline std::vector<std::filesystem::path> corpus_files(const std::string& dir, const std::string& ext, bool recursive,
                                                       const std::string& package) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw ttmoe::ValueError(dir + " does not exist: install the Debian package " + package +
                            " (scripts/install-deps.sh lists it)");
  std::vector<fs::path> out;
  auto take = [&](const fs::directory_entry& e) {
    // Links are left out: a link and its target would be one text under two names, which could put
    // a test document's text into the training set (python3.11 links _sysconfigdata__*.py).
    if (!e.is_symlink() && e.is_regular_file() && e.path().extension() == ext && e.file_size() >= 200)
      out.push_back(e.path());
  };
  if (recursive)
    for (const auto& e : fs::recursive_directory_iterator(dir)) take(e);
  else
    for (const auto& e : fs::directory_iterator(dir)) take(e);
  std::sort(out.begin(), out.end());
  if (out.empty()) throw ttmoe::ValueError(dir + ": no " + ext + " file (package " + package + ")");
  return out;
}

/// Writes the train / val / test folders of both corpora under `root` (once: a finished split has
/// root/done).
inline void write_split(const DefaultOptions& o, const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  if (fs::exists(root / "done")) return;
  fs::remove_all(root);
  struct Source {
    std::vector<fs::path> files;
    std::string prefix, root;
  };
  const std::vector<Source> sources = {{corpus_files(o.code_dir, ".py", false, "python3.11-minimal"), "code_", o.code_dir},
                                       {corpus_files(o.prose_dir, ".txt", true, "python3.11-doc"), "prose_", o.prose_dir}};
  for (const auto& s : sources) {
    auto files = s.files;
    std::mt19937_64 rng(0);
    std::shuffle(files.begin(), files.end(), rng);
    const std::size_t want = o.train + o.val + o.test;
    if (files.size() < want)
      throw ttmoe::ValueError(s.root + ": " + std::to_string(files.size()) + " documents, fewer than the " +
                              std::to_string(want) + " the split needs");
    for (std::size_t i = 0; i < want; ++i) {
      const char* part = i < o.train ? "train" : i < o.train + o.val ? "val" : "test";
      fs::create_directories(root / part);
      std::string name = files[i].lexically_relative(s.root).string();  // not relative(): it resolves links
      std::replace(name.begin(), name.end(), '/', '_');
      fs::copy_file(files[i], root / part / (s.prefix + name), fs::copy_options::overwrite_existing);
    }
  }
  std::ofstream(root / "done") << "ok\n";
}

/// The base model under `dir`, trained on the training documents when not there yet.
inline void ensure_base_model(const DefaultOptions& o, const std::filesystem::path& corpus, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(dir / "config.json")) return;
  llm_example::TrainOptions b;
  b.corpus = corpus.string();
  b.out = (dir.string() + ".partial");
  b.steps = o.base_steps;
  b.context = o.context;
  std::fprintf(stderr, "ttmm: training the base model (%lld steps, context %lld) on %s\n",
               static_cast<long long>(o.base_steps), static_cast<long long>(o.context), b.corpus.c_str());
  fs::remove_all(b.out);
  if (llm_example::run_train(b) != 0) throw ttmoe::ValueError("training the base model failed");
  fs::rename(b.out, dir);  // atomic: a killed run never leaves a half-written model here
}

/// The expert store for learning rate `lr` under `dir`, trained when not complete.
inline void ensure_store(const Ranks& ranks, const DefaultOptions& o, const std::string& model,
                         const std::filesystem::path& train, const std::filesystem::path& dir, double lr) {
  using namespace ttmoe;
  try {
    auto m = models::load_llama<float>(model);
    (void)ttmm::ExpertStore::open(dir, models::linear_shapes(m), base_model_id(model));
    return;  // complete
  } catch (const ttmm::StoreError&) {
  }
  TrainOptions t;
  t.model = model;
  t.corpus = train.string();
  t.out = dir.string();
  t.clusters = o.clusters;
  t.max_tokens = std::size_t(o.context);
  t.expert.rank = o.rank;
  t.expert.adam.lr = lr;
  std::fprintf(stderr, "ttmm: training %lld experts (rank %lld, lr %g)\n", static_cast<long long>(o.clusters),
               static_cast<long long>(o.rank), lr);
  if (run_train(ranks, t) != 0) throw ValueError("training the experts failed");
}

/// The eval options shared by the validation and test runs.
inline EvalOptions default_eval_options(const DefaultOptions& o, const std::string& model, const std::string& store,
                                        const std::filesystem::path& eval, const std::filesystem::path& train) {
  EvalOptions e;
  e.model = model;
  e.experts = store;
  e.eval = eval.string();
  e.train = train.string();
  e.cost_prompts = o.cost_prompts;
  e.ttt.neighbours = o.neighbours;
  e.ttt.lora.rank = o.rank;
  e.finetune.rank = o.rank;
  return e;
}

/// The Figure 1 PNG: one marker per method at (log10 ms per prompt, normalised perplexity), TTMM's
/// rows joined by a line as M grows.
inline void write_figure(const std::vector<ttmoe::ttmm::MethodResult>& rows, const std::filesystem::path& png) {
  using namespace ttmoe;
  double base = 0, ttt = 0;
  for (const auto& r : rows) {
    if (r.method == "base") base = r.perplexity();
    if (r.method == "ttt") ttt = r.perplexity();
  }
  plot::LinePlot p;
  p.title = "TTMM default run: normalised perplexity vs test-time cost";
  p.xlabel = "log10 test-time cost per prompt (ms)";
  p.ylabel = "normalised perplexity (base 0, TTT 1)";
  plot::Series ttmm_line{"ttmm (M = 1, 3, 10)", {}, {}, {}};
  for (const auto& r : rows) {
    const double x = std::log10(std::max(1e-3, 1e3 * r.seconds_per_prompt));
    const double y = ttmm::normalised_perplexity(r.perplexity(), base, ttt);
    if (r.method.rfind("ttmm-", 0) == 0) {
      ttmm_line.x.push_back(x);
      ttmm_line.y.push_back(y);
    } else {
      p.series.push_back({r.method, {y}, {x}, {}});
    }
  }
  if (!ttmm_line.y.empty()) p.series.push_back(ttmm_line);
  plot::save(p, png);
}

/// Runs the default; returns the exit status.
inline int run_default(const Ranks& ranks, const DefaultOptions& o) {
  namespace fs = std::filesystem;
  using namespace ttmoe;
  try {
    if (!ranks.leader()) return 0;
    const fs::path work = examples_common::cache_dir(o.cache) / default_folder(o);
    fs::create_directories(work);
    write_split(o, work / "corpus");
    const fs::path train = work / "corpus" / "train", val = work / "corpus" / "val", test = work / "corpus" / "test";
    const std::string model = (work / "base").string();
    ensure_base_model(o, train, model);

    // The experts' learning rate: the lower ttmm-3 validation perplexity (at the default β, τ).
    double best_lr = o.expert_lrs.at(0), best_ppl = INFINITY;
    std::vector<ttmm::MethodResult> val_rows;
    for (const double lr : o.expert_lrs) {
      char name[64];
      std::snprintf(name, sizeof name, "store-lr%g", lr);
      ensure_store(ranks, o, model, train, work / name, lr);
      auto e = default_eval_options(o, model, (work / name).string(), val, train);
      e.active = {3};
      e.cost_prompts = 0;
      e.quiet = true;
      auto s = load_eval_setup(e, {"ttmm"});
      const double ppl = run_methods(s, e, {"ttmm"}).at(0).perplexity();
      std::printf("validation: expert lr %g -> ttmm-3 perplexity %.3f\n", lr, ppl);
      if (ppl < best_ppl) best_ppl = ppl, best_lr = lr;
    }
    char store_name[64];
    std::snprintf(store_name, sizeof store_name, "store-lr%g", best_lr);
    const std::string store = (work / store_name).string();

    // β and τ on validation (ttmm-3), then TTT's learning rate on validation.
    auto e = default_eval_options(o, model, store, val, train);
    e.finetune.adam.lr = best_lr;
    e.cost_prompts = 0;
    e.quiet = true;
    e.active = {3};
    auto vs = load_eval_setup(e, {"ttmm", "ttt"});
    best_ppl = INFINITY;
    moe::SparseSoftmaxConfig chosen;
    for (const double beta : o.betas)
      for (const double tau : o.taus) {
        e.selection.beta = beta;
        e.selection.tau = tau;
        const double ppl = run_methods(vs, e, {"ttmm"}).at(0).perplexity();
        std::printf("validation: beta %g tau %g -> ttmm-3 perplexity %.3f\n", beta, tau, ppl);
        if (ppl < best_ppl) best_ppl = ppl, chosen = e.selection;
      }
    double ttt_lr = o.ttt_lrs.at(0);
    best_ppl = INFINITY;
    for (const double lr : o.ttt_lrs) {
      e.ttt.lora.adam.lr = lr;
      const double ppl = run_methods(vs, e, {"ttt"}).at(0).perplexity();
      std::printf("validation: TTT lr %g -> perplexity %.3f\n", lr, ppl);
      if (ppl < best_ppl) best_ppl = ppl, ttt_lr = lr;
    }
    std::printf("chosen on validation: expert lr %g, beta %g, tau %g, TTT lr %g\n", best_lr, chosen.beta, chosen.tau, ttt_lr);

    // The test documents, every method.
    auto t = default_eval_options(o, model, store, test, train);
    t.selection = chosen;
    t.ttt.lora.adam.lr = ttt_lr;
    t.finetune.adam.lr = best_lr;
    t.finetuned = (work / ("finetune-lr" + std::string(store_name + 8))).string();
    const auto methods = parse_methods(t.methods);
    auto ts = load_eval_setup(t, methods);
    std::printf("test: %zu documents, %lld experts\n", ts.documents.size(), static_cast<long long>(ts.store->num_experts()));
    std::fflush(stdout);
    const auto rows = run_methods(ts, t, methods);
    std::fputs(ttmm::format_comparison(rows).c_str(), stdout);
    const fs::path png = o.figure.empty() ? work / "figure1.png" : fs::path(o.figure);
    write_figure(rows, png);
    std::printf("figure: %s\n", png.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ttmm: error: %s\n", e.what());
    return 1;
  }
}

}  // namespace ttmm_example
