#pragma once
// Command-line options of the moetta example. A small hand-written parser (CLI11 is not among the
// installed packages): `--name value` or `--name=value`, flags without a value, unknown options and
// missing values are errors that name the option, `--help` prints the usage.

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace moetta_example {

/// Everything the example can be told.
struct Options {
  std::optional<std::string> checkpoint;  ///< full scale: ViT-B/16 safetensors (timm or torchvision names)
  std::optional<std::string> imagenet_c, imagenet_r, imagenet_sketch, imagenet_a, imagenet_val, imagenet_classes;
  std::string setting = "classical";
  std::string method = "all";
  std::string normalize = "auto";   ///< full scale: auto (from the checkpoint layout) | imagenet | half
  std::vector<std::uint64_t> seeds{42, 4242, 424242};
  int batch_size = 64;
  std::size_t limit = 0;            ///< images per domain (0 = all)
  int severity = 5;
  std::optional<std::string> cache;  ///< embedded model cache folder
  std::string out_dir = ".";          ///< where the PNG figures go
  int epochs = 4;                     ///< embedded model training epochs
  bool retrain = false;               ///< ignore the cached embedded model
  std::string hyper = "tuned";        ///< embedded: tuned (validation search, cached) | paper
  bool tune = false;                  ///< embedded: rerun the validation search even if cached
  bool validate = false;              ///< embedded: also print the validation-stream tables for every seed
  bool help = false;
};

/// The usage text.
inline std::string usage() {
  return R"(usage: moetta [options]

Without --checkpoint: trains (once, cached) a small ViT on Fashion-MNIST with its last 5000 training
images held out, chooses each method's hyper-parameters on a validation stream (ImageNet-C's four
extra corruptions on the held-out images; once, cached beside the model), then compares No-adapt,
Tent, EATA, SAR and MoETTA on a mixed stream of all 10000 corrupted / sketch / inverted
Fashion-MNIST test images.

  --checkpoint FILE        ViT-B/16 safetensors (timm or torchvision names, auto-detected): full scale
  --imagenet-c DIR         ImageNet-C root (DIR/<corruption>/<severity>/<wnid>/*.JPEG)
  --imagenet-r DIR         ImageNet-R class folders (potpourri, potpourri+; optional, warned if absent)
  --imagenet-sketch DIR    ImageNet-Sketch class folders (potpourri, potpourri+; optional, warned if absent)
  --imagenet-a DIR         ImageNet-A class folders (potpourri, potpourri+; optional, warned if absent)
                           (potpourri needs at least one of -r / -sketch / -a)
  --imagenet-val DIR       ImageNet validation class folders (required by potpourri+; with any
                           setting, EATA's Fisher comes from 2000 of its images)
  --imagenet-classes FILE  the 1000 wnids in index order, one per line (else taken from -val / -c)
  --normalize N            auto | imagenet | half: input mean/std of the checkpoint (default auto:
                           half = 0.5/0.5 for timm key names (augreg ViT-B/16), imagenet =
                           mean (0.485, 0.456, 0.406) / std (0.229, 0.224, 0.225) for torchvision's)
  --setting S              classical | potpourri | potpourri+        (default classical)
  --method M               all | noadapt | tent | eata | sar | moetta (default all)
  --seeds LIST             comma-separated stream seeds               (default 42,4242,424242)
  --batch-size N           (default 64)
  --limit N                at most N images per domain (default: all)
  --severity N             ImageNet-C / embedded corruption severity  (default 5)
  --cache DIR              embedded model cache (default $TTMOE_CACHE_DIR or ~/.cache/ttmoe)
  --out DIR                where the PNG figures are written          (default .)
  --epochs N               embedded model training epochs             (default 4)
  --retrain                retrain the embedded model even if cached
  --hyper H                embedded: tuned | paper: the validation-chosen hyper-parameters (default)
                           or the papers' ImageNet settings
  --tune                   embedded: rerun the validation search even if its result is cached
  --validate               embedded: also run every method over the validation stream for every seed
  --help
)";
}

/// Parses argv; throws std::invalid_argument with a message naming the offending option.
inline Options parse_args(int argc, char** argv) {
  Options o;
  std::map<std::string, std::optional<std::string>*> paths{
      {"--checkpoint", &o.checkpoint},     {"--imagenet-c", &o.imagenet_c},   {"--imagenet-r", &o.imagenet_r},
      {"--imagenet-sketch", &o.imagenet_sketch}, {"--imagenet-a", &o.imagenet_a}, {"--imagenet-val", &o.imagenet_val},
      {"--imagenet-classes", &o.imagenet_classes}, {"--cache", &o.cache}};
  auto to_int = [](const std::string& opt, const std::string& v) {
    std::size_t pos = 0;
    long long x = 0;
    try {
      x = std::stoll(v, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != v.size() || x < 0) throw std::invalid_argument(opt + ": expected a non-negative integer, got '" + v + "'");
    return x;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], value;
    bool has_value = false;
    if (auto eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1), a = a.substr(0, eq), has_value = true;
    }
    auto need = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw std::invalid_argument(a + ": missing value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") o.help = true;
    else if (a == "--retrain") o.retrain = true;
    else if (a == "--tune") o.tune = true;
    else if (a == "--validate") o.validate = true;
    else if (a == "--hyper") o.hyper = need();
    else if (auto it = paths.find(a); it != paths.end()) *it->second = need();
    else if (a == "--setting") o.setting = need();
    else if (a == "--method") o.method = need();
    else if (a == "--normalize") o.normalize = need();
    else if (a == "--out") o.out_dir = need();
    else if (a == "--batch-size") o.batch_size = int(to_int(a, need()));
    else if (a == "--limit") o.limit = std::size_t(to_int(a, need()));
    else if (a == "--severity") o.severity = int(to_int(a, need()));
    else if (a == "--epochs") o.epochs = int(to_int(a, need()));
    else if (a == "--seeds") {
      o.seeds.clear();
      std::stringstream ss(need());
      std::string tok;
      while (std::getline(ss, tok, ',')) o.seeds.push_back(std::uint64_t(to_int("--seeds", tok)));
      if (o.seeds.empty()) throw std::invalid_argument("--seeds: empty list");
    } else throw std::invalid_argument("unknown option '" + a + "' (see --help)");
  }
  if (o.batch_size <= 0) throw std::invalid_argument("--batch-size must be positive");
  if (o.severity < 1 || o.severity > 5) throw std::invalid_argument("--severity must be 1..5");
  if (o.hyper != "tuned" && o.hyper != "paper")
    throw std::invalid_argument("--hyper: unknown value '" + o.hyper + "' (tuned, paper)");
  if (o.normalize != "auto" && o.normalize != "imagenet" && o.normalize != "half")
    throw std::invalid_argument("--normalize: unknown value '" + o.normalize + "' (auto, imagenet, half)");
  if (o.method != "all" && o.method != "noadapt" && o.method != "tent" && o.method != "eata" && o.method != "sar" &&
      o.method != "moetta")
    throw std::invalid_argument("--method: unknown method '" + o.method + "' (all, noadapt, tent, eata, sar, moetta)");
  return o;
}

/// The methods selected by --method, in table order (No-adapt always first: it is the reference row).
inline std::vector<std::string> selected_methods(const Options& o) {
  if (o.method == "all") return {"noadapt", "tent", "eata", "sar", "moetta"};
  if (o.method == "noadapt") return {"noadapt"};
  return {"noadapt", o.method};
}

}  // namespace moetta_example
