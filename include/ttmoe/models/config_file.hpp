#pragma once
// Model configuration files (config.json, adapter_config.json): reading one as JSON, and the error
// of a file ttmoe cannot use, naming the file and the field so the user sees what to change. Each
// format derives its own error type.

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "ttmoe/core/error.hpp"

namespace ttmoe::models {

/// A configuration file ttmoe cannot use; what() reads "<file>: field '<field>': <problem>".
/// LlamaConfigError and PeftConfigError derive from it so callers can tell the formats apart.
class ConfigFieldError : public Error {
 public:
  ConfigFieldError(std::string file, std::string field, const std::string& problem)
      : Error(file + ": field '" + field + "': " + problem), file_(std::move(file)), field_(std::move(field)) {}
  /// The config file (or label).
  const std::string& file() const noexcept { return file_; }
  /// The offending field (dotted for nested ones, e.g. "rope_scaling.rope_type").
  const std::string& field() const noexcept { return field_; }

 private:
  std::string file_, field_;
};

/// Parses the JSON file `path` (a `what` such as "adapter config"); a file that cannot be opened or
/// is not JSON is an `E` (a ConfigFieldError) naming the file.
template <class E, class Json = nlohmann::json>
Json read_config_json(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) throw E(path.string(), "", "cannot open the " + what);
  try {
    return Json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    throw E(path.string(), "", std::string("invalid JSON: ") + e.what());
  }
}

}  // namespace ttmoe::models
