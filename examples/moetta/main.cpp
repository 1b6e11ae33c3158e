// moetta: test-time adaptation of a ViT under mixed distribution shifts, MoETTA against No-adapt,
// Tent, EATA and SAR (see args.hpp for the options; no arguments runs the embedded Fashion-MNIST
// demonstration end to end).

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>

#include "args.hpp"
#include "experiment.hpp"
#include "fashion.hpp"
#include "imagenet.hpp"

namespace moetta_example {

/// The embedded default: train/load the small ViT, then every method over the mixed stream for
/// every seed; tables on stdout, progress on stderr, two PNG figures in --out.
inline int run_fashion(const Options& o) {
  FashionSetup f;
  f.epochs = o.epochs;
  const std::size_t per_domain = o.limit ? o.limit : 250;
  fmt::print("Loading Fashion-MNIST from {}\n", io::default_fashion_mnist_dir().string());
  const auto train = io::load_fashion_mnist("train");
  const auto test = io::load_fashion_mnist("t10k");
  const auto ckpt = ensure_fashion_model(f, cache_dir(o.cache), o.retrain, train, test);
  const auto methods = selected_methods(o);
  const auto fisher = fashion_fisher_batches(train, f, 2000, o.batch_size);
  const auto names = fashion_domain_names();
  fmt::print("\nStream: {} domains x {} test images ({} corruptions at severity {}, sketch, inverted), shuffled per seed; "
             "batch {}\n",
             names.size(), per_domain, all_corruptions.size(), o.severity, o.batch_size);
  Results res;
  std::filesystem::create_directories(o.out_dir);
  const auto sim_png = std::filesystem::path(o.out_dir) / "moetta_expert_similarity.png";
  const auto acc_png = std::filesystem::path(o.out_dir) / "moetta_cumulative_accuracy.png";
  bool sim_written = false;
  std::vector<tta::Report> first_seed;
  const Geometry geo{1, f.vit.img_size, f.vit.img_size};
  for (std::size_t si = 0; si < o.seeds.size(); ++si) {
    const auto seed = o.seeds[si];
    const auto t0 = std::chrono::steady_clock::now();
    const auto fs = make_fashion_stream(test, f, per_domain, o.severity, seed);
    fmt::print(stderr, "seed {}: stream of {} images built in {:.1f} s\n", seed, fs.stream.items.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const std::size_t nb = (fs.stream.items.size() + std::size_t(o.batch_size) - 1) / std::size_t(o.batch_size);
    auto fill = [&fs, &geo](const io::StreamItem& it, float* out) {
      std::copy_n(fs.pixels.data() + it.ref * geo.floats(), geo.floats(), out);
    };
    for (const auto& m : methods) {
      Model model = load_fashion_checkpoint(ckpt);
      auto src = loader_source(fs.stream, o.batch_size, geo, fill);
      auto r = run_method(m, model, src, nb, fisher, seed, display_name(m) + " seed " + std::to_string(seed));
      if (si == 0) first_seed.push_back(r);
      if (m == "moetta" && si == 0) {
        save_expert_similarity(model, sim_png,
                               fmt::format("MoETTA expert cosine similarity per MoE-LayerNorm (seed {})", seed));
        sim_written = true;
      }
      res[m].push_back(std::move(r));
    }
  }
  save_cumulative_accuracy(methods, first_seed, o.batch_size, acc_png,
                           fmt::format("Cumulative accuracy on the mixed Fashion-MNIST stream (seed {})", o.seeds[0]));
  fmt::print("\nPer-domain accuracy (%, mean over {} seeds)\n{}\n", o.seeds.size(), domain_table(methods, res, names));
  fmt::print("Mixed Fashion-MNIST stream, {} images per seed, seeds", res.begin()->second.front().images);
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
