#pragma once
// The error of a model configuration file ttmoe cannot use (config.json, adapter_config.json): it
// names the file and the field, so the user sees what to change. Each format derives its own type.

#include <string>
#include <utility>

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

}  // namespace ttmoe::models
