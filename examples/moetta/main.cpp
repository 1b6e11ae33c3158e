// moetta: test-time adaptation of a ViT under mixed distribution shifts, MoETTA against No-adapt,
// Tent, EATA and SAR (see args.hpp for the options; no arguments runs the embedded Fashion-MNIST
// demonstration end to end).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "args.hpp"
#include "experiment.hpp"
#include "fashion.hpp"
#include "imagenet.hpp"

namespace moetta_example {

/// Seed of the validation stream's order and corruption noise (fixed: the search sees one stream).
inline constexpr std::uint64_t kValidationSeed = 7;
/// Validation images per domain, 0 = all: the 5000 held-out images dealt into the four domains
/// (1250 each). A shorter stream left too few updates for any method to move (2000 images are 32
/// batches at batch 64) and a one-image difference was 0.05 point, the size of every effect.
inline constexpr std::size_t kValidationPerDomain = 0;

/// Runs `methods` x `seeds` over the stream `make(seed)` (batches through the background loader)
/// with hyper-parameters `hyper`; `on_run(method, seed index, model, report)` sees every run.
template <class MakeStream, class OnRun>
Results run_all(const std::vector<std::string>& methods, const std::vector<std::uint64_t>& seeds, const HyperSet& hyper,
                const std::filesystem::path& ckpt, const std::vector<Images>& fisher, const Options& o,
                const Geometry& geo, MakeStream make, OnRun on_run) {
  Results res;
  for (std::size_t si = 0; si < seeds.size(); ++si) {
    const auto seed = seeds[si];
    const auto t0 = std::chrono::steady_clock::now();
    const FashionStream fs = make(seed);
    fmt::print(stderr, "seed {}: stream of {} images built in {:.1f} s\n", seed, fs.stream.items.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const std::size_t nb = (fs.stream.items.size() + std::size_t(o.batch_size) - 1) / std::size_t(o.batch_size);
    auto fill = [&fs, &geo](const data::StreamItem& it, float* out) {
      std::copy_n(fs.pixels.data() + it.ref * geo.floats(), geo.floats(), out);
    };
    for (const auto& m : methods) {
      Model model = load_fashion_checkpoint(ckpt);
      auto src = loader_source(fs.stream, o.batch_size, geo, fill);
      auto r = run_method(m, hyper.at(m), model, src, nb, fisher, seed, display_name(m) + " seed " + std::to_string(seed));
      on_run(m, si, model, r);
      res[m].push_back(std::move(r));
    }
  }
  return res;
}

/// Prints the chosen hyper-parameters, one line per method.
inline void print_hyper(const HyperSet& h, const std::vector<std::string>& methods) {
  for (const auto& m : methods) {
    const auto& x = h.at(m);
    const auto& info = tta::method_info(m);
    if (!info.adapts) continue;
    fmt::print("  {:<8} lr {:.2e} (at batch 64)", info.display_name, x.lr);
    if (info.has.margin) fmt::print(", margin {:.2f} ln C", x.margin);
    if (info.has.d_margin) fmt::print(", redundancy margin {:.2f}", x.d_margin);
    if (info.has.lambda) fmt::print(", lambda {:.2f}", x.lambda);
    if (info.has.experts) fmt::print(", {} experts", x.experts);
    fmt::print("\n");
  }
}

/// The embedded default: train/load the small ViT (the last FashionSetup::holdout training images
/// held out), choose every method's hyper-parameters on the validation stream (ImageNet-C's four
/// extra corruptions on the held-out images; cached beside the model), then every method over the
/// mixed test stream for every seed; tables on stdout, progress on stderr, two PNG figures in --out.
inline int run_fashion(const Options& o) {
  FashionSetup f;
  f.epochs = o.epochs;
  fmt::print("Loading Fashion-MNIST from {}\n", io::default_fashion_mnist_dir().string());
  const auto train = io::load_fashion_mnist("train");
  const auto test = io::load_fashion_mnist("t10k");
  const auto ckpt = ensure_fashion_model(f, cache_dir(o.cache), o.retrain, train, test);
  const auto methods = selected_methods(o);
  const std::vector<std::string> all_methods = tta::method_keys();
  const auto fisher = fashion_fisher_batches(train, f, 2000, o.batch_size);
  const Geometry geo{1, f.vit.img_size, f.vit.img_size};
  const auto val_table =
      o.val_table == "cifar" ? data::corruptions::ParameterTable::cifar : data::corruptions::ParameterTable::imagenet;
  const auto val_domains = fashion_validation_domains(o.severity, val_table);
  const std::size_t val_first = f.train_count(train);
  auto make_val = [&](std::uint64_t seed) {
    return make_fashion_stream(train, val_first, f.holdout, val_domains, f, kValidationPerDomain, seed);
  };

  // Hyper-parameters: the papers' (--hyper paper), or chosen on the validation stream (cached).
  HyperSet hyper;
  // The name carries everything the search depends on (v5: the validation table joined the key).
  const std::filesystem::path hyper_path =
      ckpt.string() + fmt::format(".tta_hyper_b{}_s{}_{}_v5.json", o.batch_size, o.severity, o.val_table);
  if (o.hyper == "paper") {
    hyper = tta_common::paper_defaults();
    fmt::print("\nHyper-parameters: the papers' settings (--hyper paper)\n");
  } else if (!o.tune && std::filesystem::exists(hyper_path)) {
    hyper = tta_common::load(hyper_path);
    fmt::print("\nHyper-parameters chosen on the validation stream, loaded from {}\n", hyper_path.string());
  } else {
    const FashionStream vs = make_val(kValidationSeed);
    fmt::print("\nChoosing hyper-parameters on the validation stream: ImageNet-C's extra corruptions ({}) at severity {} "
               "({} parameter table) on {} of the {} held-out training images (seed {}); the test set is not used\n",
               fmt::join(domain_names(val_domains), ", "), o.severity, o.val_table, vs.stream.items.size(), f.holdout,
               kValidationSeed);
    const std::size_t nb = (vs.stream.items.size() + std::size_t(o.batch_size) - 1) / std::size_t(o.batch_size);
    auto fill = [&vs, &geo](const data::StreamItem& it, float* out) {
      std::copy_n(vs.pixels.data() + it.ref * geo.floats(), geo.floats(), out);
    };
    std::vector<tta_common::Trial> trials;
    Results reference_run;  // No-adapt's run, for its per-domain accuracy
    const auto t0 = std::chrono::steady_clock::now();
    hyper = tta_common::search(
        all_methods, tta_common::SearchGrid{},
        [&](const std::string& m, const Hyper& h) {
          Model model = load_fashion_checkpoint(ckpt);
          auto src = loader_source(vs.stream, o.batch_size, geo, fill);
          auto r = run_method(m, h, model, src, nb, fisher, kValidationSeed, "val " + display_name(m));
          if (m == tta::reference_method().key) reference_run[m].push_back(r);
          return r.accuracy;
        },
        trials);
    fmt::print("No-adapt on the validation stream, per domain (%):\n{}\n",
               domain_table({tta::reference_method().key}, reference_run, domain_names(val_domains)));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("Validation search ({} runs, {:.0f} s; ties keep the paper's value):\n{}\n", trials.size(), secs,
               tta_common::trials_table(trials));
    tta_common::save_json(tta_common::to_json(hyper, trials,
                                              fmt::format("chosen on the validation stream (ImageNet-C extra corruptions, {} "
                                                          "parameter table, on the held-out Fashion-MNIST training "
                                                          "images); the test set was not used",
                                                          o.val_table)),
                          hyper_path);
    fmt::print("saved {}\n", hyper_path.string());
  }
  print_hyper(hyper, all_methods);

  auto nothing = [](const std::string&, std::size_t, const Model&, const tta::Report&) {};
  if (o.validate) {
    const auto vres = run_all(methods, o.seeds, hyper, ckpt, fisher, o, geo, make_val, nothing);
    fmt::print("\nValidation stream per-domain accuracy (%, mean over {} seeds)\n{}\n", o.seeds.size(),
               domain_table(methods, vres, domain_names(val_domains)));
    fmt::print("Validation stream, {} images per seed (accuracy: mean +- population std over seeds)\n{}\n",
               vres.begin()->second.front().images, summary_table(methods, vres, o.seeds.size()));
  }

  const auto test_domains = fashion_test_domains(o.severity);
  fmt::print("\nTest stream: the {} Fashion-MNIST test images dealt into {} domains ({} corruptions at severity {}, "
             "sketch, inverted){}, shuffled per seed; batch {}\n",
             test.count, test_domains.size(), data::corruptions::all_corruptions.size(), o.severity,
             o.limit ? fmt::format(", at most {} per domain", o.limit) : std::string(), o.batch_size);
  std::filesystem::create_directories(o.out_dir);
  const auto sim_png = std::filesystem::path(o.out_dir) / "moetta_expert_similarity.png";
  const auto acc_png = std::filesystem::path(o.out_dir) / "moetta_cumulative_accuracy.png";
  bool sim_written = false;
  std::vector<tta::Report> first_seed;
  auto make_test = [&](std::uint64_t seed) {
    return make_fashion_stream(test, 0, test.count, test_domains, f, o.limit, seed);
  };
  const Results res = run_all(methods, o.seeds, hyper, ckpt, fisher, o, geo, make_test,
                              [&](const std::string&, std::size_t si, const Model& model, const tta::Report& r) {
                                if (si != 0) return;
                                first_seed.push_back(r);
                                if (!model.moe_layers().empty()) {  // the figure of a MoE method
                                  save_expert_similarity(model, sim_png,
                                                         fmt::format("MoETTA expert cosine similarity per MoE-LayerNorm "
                                                                     "(seed {})",
                                                                     o.seeds[0]));
                                  sim_written = true;
                                }
                              });
  save_cumulative_accuracy(methods, first_seed, o.batch_size, acc_png,
                           fmt::format("Cumulative accuracy on the mixed Fashion-MNIST stream (seed {})", o.seeds[0]));
  fmt::print("\nTest stream per-domain accuracy (%, mean over {} seeds)\n{}\n", o.seeds.size(),
             domain_table(methods, res, domain_names(test_domains)));
  fmt::print("Test stream (mixed Fashion-MNIST), {} images per seed, seeds", res.begin()->second.front().images);
  for (auto s : o.seeds) fmt::print(" {}", s);
  fmt::print(" (accuracy: mean +- population std over seeds)\n{}\n", summary_table(methods, res, o.seeds.size()));
  if (sim_written) fmt::print("wrote {}\n", sim_png.string());
  fmt::print("wrote {}\n", acc_png.string());
  return 0;
}

}  // namespace moetta_example

int main(int argc, char** argv) {
  using namespace moetta_example;
  try {
    const Options o = parse_args(argc, argv);
    if (o.help) {
      fmt::print("{}", usage());
      return 0;
    }
    if (o.checkpoint) return run_imagenet(o);
    if (o.imagenet_c || o.imagenet_r || o.imagenet_a || o.imagenet_sketch || o.imagenet_val)
      throw std::runtime_error("ImageNet folders given without --checkpoint (the ViT-B/16 safetensors file)");
    if (o.normalize != "auto")
      throw std::runtime_error("--normalize applies to --checkpoint runs (the embedded model has its own statistics)");
    return run_fashion(o);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "moetta: error: {}\n", e.what());
    return 1;
  }
}
