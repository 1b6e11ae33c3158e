#pragma once
// Model configuration files (config.json, adapter_config.json): reading one as JSON, and the error
// of a file ttmoe cannot use, naming the file and the field so the user sees what to change. Each
// format derives its own error type.

#include <filesystem>
#include <fstream>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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

namespace detail {
/// Typed access to config.json fields, each failure an `E` (a ConfigFieldError) naming the file and
/// the field; every model config (Llama, BERT, MPNet) reads its file through one of these.
template <class E>
struct ConfigFieldReader {
  const nlohmann::json& j;
  std::string label, prefix;

  bool has(const char* k) const { return j.contains(k) && !j.at(k).is_null(); }
  std::string name(const char* k) const { return prefix + k; }
  [[noreturn]] void fail(const char* k, const std::string& what) const { throw E(label, name(k), what); }
  std::int64_t integer(const char* k) const {
    if (!has(k)) fail(k, "is required");
    const auto& v = j.at(k);
    if (!v.is_number_integer()) fail(k, "expected an integer, got " + v.dump());
    return v.get<std::int64_t>();
  }
  std::int64_t integer(const char* k, std::int64_t def) const { return has(k) ? integer(k) : def; }
  double number(const char* k) const {
    if (!has(k)) fail(k, "is required");
    const auto& v = j.at(k);
    if (!v.is_number()) fail(k, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  double number(const char* k, double def) const { return has(k) ? number(k) : def; }
  bool boolean(const char* k, bool def) const {
    if (!has(k)) return def;
    const auto& v = j.at(k);
    if (!v.is_boolean()) fail(k, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  std::string string(const char* k, const std::string& def) const {
    if (!has(k)) return def;
    const auto& v = j.at(k);
    if (!v.is_string()) fail(k, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  /// An int or a list of ints (bos/eos_token_id); empty when absent or null.
  std::vector<std::int64_t> ids(const char* k) const {
    if (!has(k)) return {};
    const auto& v = j.at(k);
    if (v.is_number_integer()) return {v.get<std::int64_t>()};
    std::vector<std::int64_t> out;
    if (v.is_array())
      for (const auto& e : v) {
        if (!e.is_number_integer()) fail(k, "expected an integer or a list of integers, got " + v.dump());
        out.push_back(e.get<std::int64_t>());
      }
    else
      fail(k, "expected an integer or a list of integers, got " + v.dump());
    return out;
  }
};
}  // namespace detail

}  // namespace ttmoe::models
