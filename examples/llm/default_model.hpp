#pragma once
// The model `llm generate` / `llm perplexity` use when no --model is given: the small Llama that
// `llm train` makes (its default size, 600 steps) on Debian's /usr/share/common-licenses (about 237 KB
// of English licence text from base-files, which every Debian system has). It is trained on first use
// and cached as a Hugging Face folder under the examples' cache folder (--cache, $TTMOE_CACHE_DIR or
// ~/.cache/ttmoe). Training writes into a folder of its own that is renamed into place when complete,
// so an interrupted run never leaves a half-written model where the next run would load it.

#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <system_error>

#include "../common/cache_dir.hpp"
#include "train.hpp"

namespace llm_example {

/// The default model's training corpus (Debian base-files).
inline constexpr const char* kDefaultCorpus = "/usr/share/common-licenses";

/// The default model's recipe: `llm train`'s defaults on kDefaultCorpus, with 600 steps instead of
/// 300: validation loss 4.83 at 300 steps, 4.45 at 600, 4.42 at 800 (where the training loss, 1.3,
/// shows it memorising the 69k tokens). 600 steps took 84 s on a shared 2-core AMD EPYC (AVX2).
inline TrainOptions default_model_recipe() {
  TrainOptions o;
  o.corpus = kDefaultCorpus;
  o.steps = 600;
  return o;
}

/// The cached folder's name. Everything that changes the weights is in it, so changing the recipe
/// trains a new model instead of loading a stale one.
inline std::string default_model_folder(const TrainOptions& o = default_model_recipe()) {
  return "llm-default-licenses-v" + std::to_string(o.vocab_size) + "-h" + std::to_string(o.hidden) + "-l" +
         std::to_string(o.layers) + "-a" + std::to_string(o.heads) + "x" + std::to_string(o.kv_heads) + "-i" +
         std::to_string(o.intermediate) + "-t" + std::to_string(o.context) + "-s" + std::to_string(o.steps) + "x" +
         std::to_string(o.batch) + "-seed" + std::to_string(o.seed);
}

/// The default model's folder under the cache (`cache` is --cache if given), trained first when it is
/// not there yet. Says on stderr where it is; its training progress goes to stderr too.
inline std::filesystem::path ensure_default_model(const std::optional<std::string>& cache) {
  namespace fs = std::filesystem;
  TrainOptions o = default_model_recipe();
  const fs::path target = examples_common::cache_dir(cache) / default_model_folder(o);
  if (fs::exists(target)) {
    std::fprintf(stderr, "llm: default model: %s\n", target.c_str());
    return target;
  }
  if (!fs::is_directory(o.corpus))
    throw ttmoe::ValueError(o.corpus + ": the default model's training corpus is missing (Debian package base-files); "
                            "give a model with --model DIR");
  const fs::path tmp = target.string() + ".partial-" + std::to_string(std::random_device{}());
  std::fprintf(stderr, "llm: no default model in %s yet: training it on %s (a minute or two)\n", target.c_str(),
               o.corpus.c_str());
  o.out = tmp.string();
  try {
    run_train(o, stderr);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {  // another llm finished the same model first: use that one
    fs::remove_all(tmp, ec);
    if (!fs::exists(target)) throw ttmoe::ValueError(target.string() + ": cannot move the trained default model into place");
  }
  std::fprintf(stderr, "llm: default model cached in %s\n", target.c_str());
  return target;
}

}  // namespace llm_example
