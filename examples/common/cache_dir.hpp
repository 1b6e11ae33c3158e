#pragma once
// The examples' cache folder (trained default models, generated data sets): one convention for all
// of them, so `--cache DIR` and $TTMOE_CACHE_DIR mean the same thing in every example.

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

namespace examples_common {

/// The cache folder: `opt` (the example's --cache), else $TTMOE_CACHE_DIR, else ~/.cache/ttmoe, else
/// ./.ttmoe-cache when there is no HOME; created if missing.
inline std::filesystem::path cache_dir(const std::optional<std::string>& opt) {
  std::filesystem::path d;
  if (opt) d = *opt;
  else if (const char* e = std::getenv("TTMOE_CACHE_DIR"); e && *e) d = e;
  else if (const char* h = std::getenv("HOME"); h && *h) d = std::filesystem::path(h) / ".cache" / "ttmoe";
  else d = ".ttmoe-cache";
  std::filesystem::create_directories(d);
  return d;
}

}  // namespace examples_common
