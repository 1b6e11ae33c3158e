#pragma once
// Typed access to the fields of a tokenizer file: a missing field or a field of the wrong type is a
// TokenizerError naming the file and the field's JSON path ("model.vocab"), never a bare
// nlohmann::json exception.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ttmoe/text/error.hpp"

namespace ttmoe::text::detail {

using json = nlohmann::json;

/// Where a JSON value sits: the file and the path inside it, for messages.
struct JsonAt {
  const std::string& file;  ///< The tokenizer file.
  std::string path;         ///< JSON path of the object being read ("" for the root).

  /// The path of member `key`.
  std::string member(std::string_view key) const { return path.empty() ? std::string(key) : path + "." + std::string(key); }
  /// The path of element `i`.
  std::string element(std::size_t i) const { return path + "[" + std::to_string(i) + "]"; }
  /// A JsonAt for member `key`.
  JsonAt at(std::string_view key) const { return {file, member(key)}; }
  /// A JsonAt for element `i`.
  JsonAt at(std::size_t i) const { return {file, element(i)}; }

  /// Throws BadField about this value.
  [[noreturn]] void bad(const std::string& detail) const {
    throw TokenizerError(TokenizerErrorKind::BadField, file, path, detail);
  }
};

/// `obj` must be an object.
inline const json& object(const json& obj, const JsonAt& at) {
  if (!obj.is_object()) at.bad("expected a JSON object, found " + std::string(obj.type_name()));
  return obj;
}

/// Member `key` of `obj`, which must exist and not be null.
inline const json& require(const json& obj, std::string_view key, const JsonAt& at) {
  object(obj, at);
  const auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) {
    throw TokenizerError(TokenizerErrorKind::MissingField, at.file, at.member(key), "required field is missing");
  }
  return *it;
}

/// Member `key` of `obj` or nullptr when absent or null.
inline const json* optional_member(const json& obj, std::string_view key, const JsonAt& at) {
  object(obj, at);
  const auto it = obj.find(std::string(key));
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

/// A required string member.
inline std::string get_string(const json& obj, std::string_view key, const JsonAt& at) {
  const json& v = require(obj, key, at);
  if (!v.is_string()) at.at(key).bad("expected a string, found " + std::string(v.type_name()));
  return v.get<std::string>();
}

/// An optional string member (absent or null: nullopt).
inline std::optional<std::string> opt_string(const json& obj, std::string_view key, const JsonAt& at) {
  const json* v = optional_member(obj, key, at);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) at.at(key).bad("expected a string, found " + std::string(v->type_name()));
  return v->get<std::string>();
}

/// An optional boolean member with a default.
inline bool get_bool(const json& obj, std::string_view key, bool fallback, const JsonAt& at) {
  const json* v = optional_member(obj, key, at);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) at.at(key).bad("expected true or false, found " + std::string(v->type_name()));
  return v->get<bool>();
}

/// An optional non-negative integer member with a default.
inline std::int64_t get_uint(const json& obj, std::string_view key, std::int64_t fallback, const JsonAt& at) {
  const json* v = optional_member(obj, key, at);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer() || v->get<std::int64_t>() < 0) {
    at.at(key).bad("expected a non-negative integer, found " + v->dump());
  }
  return v->get<std::int64_t>();
}

/// A token id: a non-negative integer that fits int32.
inline std::int32_t get_id(const json& v, const JsonAt& at) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX) {
    at.bad("expected a token id (non-negative 32-bit integer), found " + v.dump());
  }
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

/// A required array member.
inline const json& get_array(const json& obj, std::string_view key, const JsonAt& at) {
  const json& v = require(obj, key, at);
  if (!v.is_array()) at.at(key).bad("expected an array, found " + std::string(v.type_name()));
  return v;
}

/// The "type" of a component object.
inline std::string component_type(const json& obj, const JsonAt& at) { return get_string(obj, "type", at); }

/// Throws Unsupported naming a component type that this library does not implement.
[[noreturn]] inline void unsupported(const JsonAt& at, const std::string& what, const std::string& type) {
  throw TokenizerError(TokenizerErrorKind::Unsupported, at.file, at.member("type"),
                       what + " type \"" + type + "\" is not supported by ttmoe");
}

}  // namespace ttmoe::text::detail
