#pragma once
// Command-line options of the moetta example, parsed by CLI11 (Debian libcli11-dev): `--name value`
// or `--name=value`, flags without a value; an unknown option, a missing value or a value outside
// its set / range is an error that names the option; `--help` prints the usage.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ttmoe/tta/registry.hpp>

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
  std::string val_table = "imagenet"; ///< embedded: ImageNet-C or CIFAR-10-C parameters of the validation corruptions
  bool help = false;
};

/// The command line's description: what a run without --checkpoint does.
inline constexpr const char* kDescription =
    "Without --checkpoint: trains (once, cached) a small ViT on Fashion-MNIST with its last 5000 training\n"
    "images held out, chooses each method's hyper-parameters on a validation stream (ImageNet-C's four\n"
    "extra corruptions on the held-out images; once, cached beside the model), then compares No-adapt,\n"
    "Tent, EATA, SAR and MoETTA on a mixed stream of all 10000 corrupted / sketch / inverted\n"
    "Fashion-MNIST test images.";

/// A CLI11 check that the value is an integer >= `min` (CLI11's own number checks accept "1.5" as far
/// as the check goes and print their range with 300 digits).
inline CLI::Validator integer_at_least(long long min) {
  return CLI::Validator(
      [min](std::string& s) -> std::string {
        std::size_t pos = 0;
        long long v = 0;
        try {
          v = std::stoll(s, &pos);
        } catch (const std::exception&) {
          pos = 0;
        }
        if (s.empty() || pos != s.size() || v < min)
          return "expected an integer >= " + std::to_string(min) + ", got '" + s + "'";
        return {};
      },
      ">=" + std::to_string(min));
}

/// A CLI11 application whose options write into `o` (which must outlive it). Defaults are o's
/// current values, shown in the help.
inline std::unique_ptr<CLI::App> make_app(Options& o) {
  auto app = std::make_unique<CLI::App>(kDescription, "moetta");
  app->get_formatter()->column_width(30);
  app->option_defaults()->always_capture_default();
  app->add_option("--checkpoint", o.checkpoint, "ViT-B/16 safetensors (timm or torchvision names, auto-detected): full scale")
      ->type_name("FILE");
  app->add_option("--imagenet-c", o.imagenet_c, "ImageNet-C root (DIR/<corruption>/<severity>/<wnid>/*.JPEG)")->type_name("DIR");
  app->add_option("--imagenet-r", o.imagenet_r,
                  "ImageNet-R class folders (potpourri, potpourri+; optional, warned if absent)")
      ->type_name("DIR");
  app->add_option("--imagenet-sketch", o.imagenet_sketch,
                  "ImageNet-Sketch class folders (potpourri, potpourri+; optional, warned if absent)")
      ->type_name("DIR");
  app->add_option("--imagenet-a", o.imagenet_a,
                  "ImageNet-A class folders (potpourri, potpourri+; optional, warned if absent)\n"
                  "(potpourri needs at least one of -r / -sketch / -a)")
      ->type_name("DIR");
  app->add_option("--imagenet-val", o.imagenet_val,
                  "ImageNet validation class folders (required by potpourri+; with any\n"
                  "setting, EATA's Fisher comes from 2000 of its images)")
      ->type_name("DIR");
  app->add_option("--imagenet-classes", o.imagenet_classes,
                  "the 1000 wnids in index order, one per line (else taken from -val / -c)")
      ->type_name("FILE");
  app->add_option("--normalize", o.normalize,
                  "auto | imagenet | half: input mean/std of the checkpoint (default auto:\n"
                  "half = 0.5/0.5 for timm key names (augreg ViT-B/16), imagenet =\n"
                  "mean (0.485, 0.456, 0.406) / std (0.229, 0.224, 0.225) for torchvision's)")
      ->type_name("N")
      ->check(CLI::IsMember({"auto", "imagenet", "half"}));
  // data::parse_setting checks the value (one list of settings, in the library).
  app->add_option("--setting", o.setting, "classical | potpourri | potpourri+")->type_name("S");
  std::vector<std::string> method_choices{"all"};
  for (const auto& k : ttmoe::tta::method_keys()) method_choices.push_back(k);
  std::string method_help = "all";
  for (std::size_t i = 1; i < method_choices.size(); ++i) method_help += " | " + method_choices[i];
  app->add_option("--method", o.method, method_help)->type_name("M")->check(CLI::IsMember(method_choices));
  app->add_option("--seeds", o.seeds, "comma-separated stream seeds")
      ->type_name("LIST")
      ->delimiter(',')
      ->check(integer_at_least(0));
  app->add_option("--batch-size", o.batch_size, "images per adaptation batch")->type_name("N")->check(integer_at_least(1));
  app->add_option("--limit", o.limit, "at most N images per domain (0: all)")->type_name("N")->check(integer_at_least(0));
  app->add_option("--severity", o.severity, "ImageNet-C / embedded corruption severity")
      ->type_name("N")
      ->check(CLI::Range(1, 5));
  app->add_option("--cache", o.cache, "embedded model cache (default $TTMOE_CACHE_DIR or ~/.cache/ttmoe)")->type_name("DIR");
  app->add_option("--out", o.out_dir, "where the PNG figures are written")->type_name("DIR");
  app->add_option("--epochs", o.epochs, "embedded model training epochs")->type_name("N")->check(integer_at_least(1));
  app->add_flag("--retrain", o.retrain, "retrain the embedded model even if cached");
  app->add_option("--hyper", o.hyper,
                  "embedded: tuned | paper: the validation-chosen hyper-parameters (default)\n"
                  "or the papers' ImageNet settings")
      ->type_name("H")
      ->check(CLI::IsMember({"tuned", "paper"}));
  app->add_flag("--tune", o.tune, "embedded: rerun the validation search even if its result is cached");
  app->add_flag("--validate", o.validate, "embedded: also run every method over the validation stream for every seed");
  app->add_option("--val-table", o.val_table,
                  "embedded: imagenet | cifar: the validation corruptions' parameter table\n"
                  "(ImageNet-C's or CIFAR-10-C's; the test stream keeps the 64-px rule)")
      ->type_name("T")
      ->check(CLI::IsMember({"imagenet", "cifar"}));
  return app;
}

/// The usage text (CLI11's help of make_app, with the defaults).
inline std::string usage() {
  Options o;
  return make_app(o)->help();
}

/// Parses argv; throws std::invalid_argument with CLI11's message, which names the offending option.
/// `--help` / `-h` sets Options::help instead of parsing the rest.
inline Options parse_args(int argc, char** argv) {
  Options o;
  auto app = make_app(o);
  try {
    app->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    o.help = true;
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(std::string(e.what()) + " (see --help)");
  }
  return o;
}

/// The methods selected by --method, in table order (the registry's reference method, No-adapt,
/// always first: it is the reference row).
inline std::vector<std::string> selected_methods(const Options& o) {
  if (o.method == "all") return ttmoe::tta::method_keys();
  const std::string& reference = ttmoe::tta::reference_method().key;
  if (o.method == reference) return {reference};
  return {reference, o.method};
}

}  // namespace moetta_example
