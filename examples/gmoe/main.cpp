// gmoe: GMoE (a ViT whose blocks 8 and 10 route tokens to 6 cosine-routed experts) against the same
// ViT without MoE, trained leave-one-domain-out by DomainBed's protocol (ttmoe/training/domainbed.hpp)
// and compared by both of DomainBed's model-selection rules.
//
//   gmoe                      embedded default: small models trained from scratch on the four-domain
//                             digit set (built on this machine, cached), every domain held out in turn,
//                             3 trials; prints the tables and writes the expert-routing figure
//   gmoe --dataset PACS --data-dir DIR --init deit_small_patch16_224.safetensors [--test-env all]
//        [--model gmoe-s16|vit-s16|both] [--trials 3]
//                             the paper's Table-1 rows on a DomainBed dataset
//
// Every run keeps its checkpoint and results.jsonl in a folder of its own (under the cache for the
// default), so an interrupted invocation resumes where it stopped and a finished run is not trained again.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <ttmoe/ttmoe.hpp>  // the CPU backend first

#include <ttmoe/data/digit_domains.hpp>
#include <ttmoe/data/domainbed.hpp>
#include <ttmoe/data/domainbed_split.hpp>
#include <ttmoe/models/gmoe.hpp>
#include <ttmoe/models/gmoe_checkpoint.hpp>
#include <ttmoe/training/domainbed.hpp>
#include <ttmoe/training/model_selection.hpp>

#include "../common/cache_dir.hpp"
#include "../common/domainbed_table.hpp"
#include "routing.hpp"

namespace gmoe_example {

using namespace ttmoe;
using Model = models::GMoEVisionTransformer<float>;

/// The command line.
struct Options {
  std::optional<std::string> dataset, data_dir, init, cache, out, figure;
  std::string test_env = "all";
  std::string model = "both";
  std::size_t trials = 3;
  std::optional<std::size_t> steps, checkpoint_every, per_domain, digits_per_class;
  std::optional<double> lr, weight_decay;
  bool retrain = false;
};

/// The embedded default's settings (see README "GMoE"): sized so the 24 runs finish in minutes on two cores.
struct Embedded {
  static constexpr std::size_t steps = 200, checkpoint_every = 50, per_domain = 32, digits_per_class = 40;
  static constexpr double lr = 2e-3, weight_decay = 0;
};

/// One model of the comparison: its command-line key, its table name and its architecture.
struct ModelSpec {
  std::string key, name;
  models::GMoEConfig config;
};

/// The embedded models: a 6-block, 48-wide ViT on 28x28 gray digits (patch 7: 16 patches + the class
/// token; patch 4 made a step 3x dearer), MoE in blocks 2 and 4 (GMoE's pattern of 8 and 10 of 12: every other block from two thirds of
/// the depth, a dense block last), 6 experts; the ViT baseline is the same network without MoE.
inline std::vector<ModelSpec> embedded_models() {
  auto gmoe = models::gmoe_test_tiny(28, 7, 48, 6, 10);
  gmoe.vit.in_chans = 1;
  gmoe.vit.num_heads = 4;
  gmoe.vit.mlp_hidden = 96;
  gmoe.router_dim = 32;
  auto vit = gmoe;
  vit.moe_blocks.clear();
  return {{"vit", "ViT-tiny", vit}, {"gmoe", "GMoE-tiny", gmoe}};
}

/// The full-scale models for `classes` classes: ViT-S/16 (DeiT-S) and GMoE-S/16.
inline std::vector<ModelSpec> full_models(index_t classes) {
  auto gmoe = models::gmoe_small_patch16(classes, 224);
  auto vit = gmoe;
  vit.moe_blocks.clear();
  return {{"vit-s16", "ViT-S/16", vit}, {"gmoe-s16", "GMoE-S/16", gmoe}};
}

/// A short stable digest of a recipe string (names the run folders, so another recipe trains anew).
inline std::string digest(const std::string& recipe) {
  const auto d = data::md5_digest(recipe);
  return fmt::format("{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", d[0], d[1], d[2], d[3], d[4], d[5]);
}

/// Everything about a model and a protocol that changes the trained weights, as one line.
inline std::string run_recipe(const ModelSpec& m, const training::DomainBedTrainOptions& o, const std::string& data,
                              const std::string& init) {
  const auto& v = m.config.vit;
  std::string blocks;
  for (auto b : m.config.moe_blocks) blocks += std::to_string(b) + ",";
  return fmt::format(
      "gmoe-example v1 data={} init={} vit={}x{}/{} c{} d{} L{} h{} mlp{} cls{} moe=[{}] E{} r{} k{} cf{} noise{} edrop{} "
      "dpath{} aux{} lr{} wd{} steps{} every{} per_domain{} holdout{} aug={},{},{},{},{},{} eval={}",
      data, init, v.img_size, v.img_size, v.patch_size, v.in_chans, v.embed_dim, v.depth, v.num_heads, v.mlp_hidden,
      v.num_classes, blocks, m.config.num_experts, m.config.router_dim, m.config.top_k, m.config.capacity_factor,
      m.config.gate_noise, m.config.expert_dropout, m.config.drop_path, m.config.aux_weight, o.hparams.lr,
      o.hparams.weight_decay, o.hparams.steps, o.checkpoint_every, o.per_domain, o.holdout_fraction, o.augment.size,
      o.augment.scale_min, o.augment.flip_p, o.augment.brightness, o.augment.grayscale_p, o.augment.norm.name,
      o.eval.size);
}

/// The held-out environments `spec` ("all" or one index) names, checked against the dataset.
inline std::vector<std::int64_t> test_envs(const std::string& spec, std::size_t environments) {
  std::vector<std::int64_t> out;
  if (spec == "all") {
    for (std::size_t e = 0; e < environments; ++e) out.push_back(std::int64_t(e));
    return out;
  }
  std::size_t pos = 0;
  std::int64_t v = -1;
  try {
    v = std::stoll(spec, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != spec.size())
    throw std::invalid_argument("--test-env '" + spec + "' is neither 'all' nor an environment index");
  data::check_test_env(v, environments);
  return {v};
}

/// What one invocation compares: the dataset, the models, and how each run is set up.
struct Experiment {
  data::DomainBedDataset ds;
  std::vector<ModelSpec> models;
  training::DomainBedTrainOptions protocol;  ///< test_env / trial / run_dir filled per run
  std::filesystem::path runs_dir;            ///< <runs_dir>/<digest>/<model>/env<t>_trial<k>
  std::string data_recipe, init;             ///< for the run recipe
  std::vector<std::int64_t> envs;
  std::size_t trials = 3;
  bool retrain = false;
  std::size_t routing_images = 200;          ///< per domain, for the figure
};

/// A model of `spec`, from the --init checkpoint (ViT weights, head left fresh) or random.
inline Model make_model(const ModelSpec& spec, const std::string& init, std::uint64_t seed) {
  if (init.empty()) return Model(spec.config, seed);
  nn::LoadOptions lo;
  lo.skip = {"head.*"};
  lo.ignore_keys = {"head.*"};
  return models::gmoe_from_vit_checkpoint<float>(init, spec.config, seed, lo);
}

/// Trains (or resumes, or reads back) every run and prints the tables; writes the routing figure of
/// the GMoE runs of trial 0 to `figure`.
inline void run_experiment(const Experiment& x, const std::filesystem::path& figure) {
  const auto domains = x.ds.domain_names();
  using training::SelectionRule;
  std::map<std::string, std::vector<std::vector<double>>> by_rule[2];  // rule -> model -> per_domain trials
  std::vector<std::pair<std::string, std::vector<std::vector<double>>>> routing;
  std::vector<std::size_t> moe_blocks;
  std::size_t runs_total = x.models.size() * x.envs.size() * x.trials, runs_done = 0;
  for (const auto& spec : x.models) {
    for (int r = 0; r < 2; ++r) by_rule[r][spec.key].assign(domains.size(), {});
    const auto recipe = run_recipe(spec, x.protocol, x.data_recipe, x.init);
    const auto model_dir = x.runs_dir / digest(recipe) / spec.key;
    std::filesystem::create_directories(model_dir);
    std::ofstream(model_dir / "RECIPE.txt") << recipe << "\n";
    for (auto env : x.envs)
      for (std::size_t trial = 0; trial < x.trials; ++trial) {
        ++runs_done;
        auto o = x.protocol;
        o.test_env = env, o.trial_seed = std::int64_t(trial), o.seed = trial;
        o.run_dir = model_dir / fmt::format("env{}_trial{}", env, trial);
        o.resume = !x.retrain;
        const auto label = fmt::format("[{}/{}] {} held out {} trial {}", runs_done, runs_total, spec.name,
                                       domains[std::size_t(env)], trial);
        o.progress = training::stderr_progress(label, 10);
        Model model = make_model(spec, x.init, 1000 + trial);
        const auto run = training::train_domainbed(model, x.ds, o);
        if (run.first_step >= o.hparams.steps) fmt::print(stderr, "  {}: cached ({})\n", label, o.run_dir.string());
        for (int r = 0; r < 2; ++r) {
          const auto sel = training::select_checkpoint(run.records, r ? SelectionRule::Oracle : SelectionRule::TrainingDomainValidation);
          by_rule[r][spec.key][std::size_t(env)].push_back(sel.test_accuracy);
          if (r == 0)
            fmt::print(stderr, "  {}: held-out accuracy {:.1f}% (training-domain validation picks step {})\n", label,
                       100 * sel.test_accuracy, sel.step);
        }
        if (trial == 0 && !spec.config.moe_blocks.empty()) {
          // Routing of the final weights over each domain's `out` split (held-out images for all domains).
          const auto splits = data::split_environments(x.ds, 0, x.protocol.holdout_fraction);
          std::vector<std::vector<std::size_t>> idx;
          for (const auto& s : splits)
            idx.emplace_back(s.out.begin(), s.out.begin() + std::ptrdiff_t(std::min(s.out.size(), x.routing_images)));
          routing.emplace_back("held out " + domains[std::size_t(env)],
                               expert_usage(model, x.ds, idx, x.protocol.eval, x.protocol.channels));
          moe_blocks.assign(spec.config.moe_blocks.begin(), spec.config.moe_blocks.end());
        }
      }
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<domainbed_common::TableRow> rows;
    for (const auto& spec : x.models) rows.push_back({spec.name, by_rule[r][spec.key]});
    const auto rule = r ? SelectionRule::Oracle : SelectionRule::TrainingDomainValidation;
    fmt::print("\n{}", domainbed_common::domainbed_table(
                           fmt::format("Dataset: {}, model selection method: {}", x.ds.name, training::selection_rule_name(rule)),
                           domains, rows));
  }
  if (!routing.empty()) {
    const std::size_t E = std::size_t(x.models.back().config.num_experts);
    save_routing_figure(routing, moe_blocks, domains, E, "share of each domain's tokens per expert", figure);
    fmt::print("\nExpert routing (fraction of each domain's tokens per expert, trial 0): {}\n", figure.string());
  }
}

}  // namespace gmoe_example

int main(int argc, char** argv) {
  using namespace gmoe_example;
  Options o;
  CLI::App app{"GMoE vs ViT, trained leave-one-domain-out by DomainBed's protocol. Without --dataset: small\n"
               "models from scratch on the built-in four-domain digit set (cached), every domain held out, 3 trials."};
  app.add_option("--dataset", o.dataset, "DomainBed dataset (PACS, VLCS, OfficeHome, TerraIncognita, DomainNet or a folder)");
  app.add_option("--data-dir", o.data_dir, "DomainBed data root holding <dataset>/<domain>/<class>/<image>")->type_name("DIR");
  app.add_option("--test-env", o.test_env, "held-out environment index, or all")->capture_default_str();
  app.add_option("--init", o.init, "timm / DeiT ViT checkpoint (safetensors), e.g. deit_small_patch16_224")->type_name("FILE");
  app.add_option("--model", o.model, "gmoe-s16, vit-s16 or both (embedded: gmoe, vit or both)")->capture_default_str();
  app.add_option("--trials", o.trials, "trials (trial seeds 0..n-1: split and training seed)")->capture_default_str();
  app.add_option("--steps", o.steps, "training steps (default: the dataset's; embedded 200)");
  app.add_option("--checkpoint-every", o.checkpoint_every, "steps between evaluations and checkpoints (default 300; embedded 50)");
  app.add_option("--per-domain", o.per_domain, "images per training domain per step (default 32)");
  app.add_option("--lr", o.lr, "Adam learning rate (default: the GMoE authors' for the dataset; embedded 2e-3)");
  app.add_option("--weight-decay", o.weight_decay, "Adam weight decay (default: the authors' for the dataset)");
  app.add_option("--digits-per-class", o.digits_per_class, "embedded: digit images per class and domain (default 40)");
  app.add_option("--cache", o.cache, "cache folder (default $TTMOE_CACHE_DIR or ~/.cache/ttmoe)")->type_name("DIR");
  app.add_option("--out", o.out, "run folders (default <cache>/gmoe/runs)")->type_name("DIR");
  app.add_option("--figure", o.figure, "routing figure (default gmoe_routing.png)")->type_name("FILE");
  app.add_flag("--retrain", o.retrain, "train again even where a run folder holds a finished run");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto cache = examples_common::cache_dir(o.cache);
    Experiment x;
    x.trials = o.trials;
    x.retrain = o.retrain;
    x.runs_dir = o.out ? std::filesystem::path(*o.out) : cache / "gmoe" / "runs";
    auto& p = x.protocol;
    if (!o.dataset) {
      if (o.data_dir || o.init) throw std::invalid_argument("--data-dir and --init need --dataset");
      data::DigitSetOptions digits;
      digits.per_class = o.digits_per_class.value_or(Embedded::digits_per_class);
      const auto root = data::ensure_digit_dataset(cache / "gmoe" / fmt::format("digits-{}", digits.per_class), digits);
      x.ds = data::scan_domainbed(root, data::digit_dataset_folder);
      x.data_recipe = digits.recipe();
      x.models = embedded_models();
      p.hparams = {Embedded::lr, Embedded::weight_decay, Embedded::steps};
      p.checkpoint_every = Embedded::checkpoint_every;
      p.per_domain = Embedded::per_domain;
      p.channels = 1;
      p.augment.size = 28;
      p.augment.flip_p = 0;  // a mirrored digit is another glyph (or none): no flips on digits
      p.augment.norm = data::half_normalization();
      p.eval.size = 28;
      p.eval.norm = data::half_normalization();
      p.eval_batch = 256;
    } else {
      if (!o.data_dir) throw std::invalid_argument("--dataset needs --data-dir");
      x.ds = data::scan_domainbed(*o.data_dir, *o.dataset);
      x.data_recipe = x.ds.root.string();
      x.init = o.init.value_or("");
      if (x.init.empty()) fmt::print(stderr, "warning: no --init: the models start from random weights, not DeiT-S\n");
      x.models = full_models(index_t(x.ds.classes.size()));
      p.hparams = training::gmoe_domainbed_hparams(*o.dataset);
    }
    if (o.steps) p.hparams.steps = *o.steps;
    if (o.lr) p.hparams.lr = *o.lr;
    if (o.weight_decay) p.hparams.weight_decay = *o.weight_decay;
    if (o.checkpoint_every) p.checkpoint_every = *o.checkpoint_every;
    if (o.per_domain) p.per_domain = *o.per_domain;
    if (o.model != "both") {
      std::vector<ModelSpec> keep;
      for (auto& m : x.models)
        if (m.key == o.model || (m.key == "gmoe" && o.model == "gmoe-s16") || (m.key == "vit" && o.model == "vit-s16"))
          keep.push_back(m);
      if (keep.empty()) throw std::invalid_argument("--model '" + o.model + "': choose gmoe-s16, vit-s16 or both");
      x.models = keep;
    }
    x.envs = test_envs(o.test_env, x.ds.environments.size());
    fmt::print("{}: {} domains ({} images), {} classes; Adam lr {} weight decay {}, {} steps, {} images per domain per step\n",
               x.ds.name, x.ds.environments.size(), [&] {
                 std::size_t n = 0;
                 for (const auto& e : x.ds.environments) n += e.files.size();
                 return n;
               }(),
               x.ds.classes.size(), p.hparams.lr, p.hparams.weight_decay, p.hparams.steps, p.per_domain);
    run_experiment(x, o.figure.value_or("gmoe_routing.png"));
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
