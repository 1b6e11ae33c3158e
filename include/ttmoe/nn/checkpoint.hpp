#pragma once
// Loading a module's parameters from a safetensors checkpoint, and saving them. The loader checks
// EVERYTHING before touching the module (missing keys, keys the module does not have, shapes,
// dtypes) and throws one CheckpointError listing every problem, so a wrong checkpoint is diagnosed
// in one run and never leaves a half-loaded model. Floating dtypes (F32/F64/F16/BF16) convert to T.

#include <fnmatch.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ttmoe/core/recording.hpp"
#include "ttmoe/io/checkpoint_names.hpp"
#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/io/safetensors_sharded.hpp"
#include "ttmoe/nn/module.hpp"

namespace ttmoe::nn {

/// A checkpoint that does not fit the module; what() names the file and lists every problem.
class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(std::string path, std::vector<std::string> problems)
      : std::runtime_error(format(path, problems)), path_(std::move(path)), problems_(std::move(problems)) {}
  /// The checkpoint file (or in-memory label).
  const std::string& path() const noexcept { return path_; }
  /// One line per problem ("missing key ...", "unexpected key ...", "shape mismatch ...").
  const std::vector<std::string>& problems() const noexcept { return problems_; }

 private:
  static std::string format(const std::string& path, const std::vector<std::string>& p) {
    std::string s = path + ": checkpoint does not match the module (" + std::to_string(p.size()) + " problem" +
                    (p.size() == 1 ? "" : "s") + "):";
    for (const auto& l : p) s += "\n  " + l;
    return s;
  }
  std::string path_;
  std::vector<std::string> problems_;
};

/// What load_state tolerates.
struct LoadOptions {
  bool allow_missing = false;      ///< module parameters absent from the file keep their values
  bool ignore_unexpected = false;  ///< file keys (under the map's prefix) no parameter uses are fine
  /// Module parameter globs (fnmatch) not loaded at all, e.g. {"head.*"} to keep a fresh head.
  std::vector<std::string> skip;
  /// File key globs (fnmatch) that are never "unexpected", e.g. a tied model's lm_head.weight.
  std::vector<std::string> ignore_keys;
};

/// What load_state did.
struct LoadReport {
  std::vector<std::string> loaded;      ///< module parameter names read from the file
  std::vector<std::string> missing;     ///< tolerated missing parameters (allow_missing)
  std::vector<std::string> unexpected;  ///< tolerated unused file keys (ignore_unexpected)
};

namespace detail {
inline bool is_float_dtype(io::DType d) {
  return d == io::DType::F32 || d == io::DType::F64 || d == io::DType::F16 || d == io::DType::BF16;
}
inline std::string shape_str(const std::vector<std::int64_t>& s) {
  return io::format_shape(std::span<const std::int64_t>(s));
}
inline bool matches_any(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return fnmatch(g.c_str(), name.c_str(), 0) == 0; });
}
}  // namespace detail

/// Something tensors load from: an io::SafetensorsFile, or a ShardedSafetensors (the same lookups).
template <class F>
concept TensorSource = requires(const F& f, std::string_view k) {
  { f.path() } -> std::convertible_to<std::string>;
  { f.contains(k) } -> std::convertible_to<bool>;
  { f.info(k) } -> std::convertible_to<const io::TensorInfo&>;
  { f.names() } -> std::convertible_to<std::vector<std::string>>;
};

/// Every problem loading `file` into `module` would meet (missing keys, unexpected keys, shapes,
/// dtypes), one line each, empty when it loads; touches neither. Fills `report`'s tolerated
/// missing / unexpected lists. load_state runs it first; a loader that checks more than the
/// module's parameters (e.g. BF16 matrices kept outside them) adds its own lines to the same list,
/// so that one CheckpointError names every problem.
template <class M, TensorSource F>
std::vector<std::string> check_state(M& module, const F& file, const io::NameMap& names, const LoadOptions& opt,
                                     LoadReport& report) {
  std::vector<std::string> problems;
  std::set<std::string> used;
  nn::for_each_parameter(module, [&](const std::string& name, auto& t) {
    using Tn = std::remove_cvref_t<decltype(t)>;
    using T = typename Tn::value_type;
    const std::string key = names.key_for(name);
    if (detail::matches_any(opt.skip, name)) {
      used.insert(key);  // a skipped parameter's key is not "unexpected" either
      return;
    }
    if (!file.contains(key)) {
      if (opt.allow_missing) report.missing.push_back(name);
      else problems.push_back("missing key '" + key + "' (parameter " + name + ")");
      return;
    }
    used.insert(key);
    const io::TensorInfo& info = file.info(key);
    const auto e = t.extents();
    const std::vector<std::int64_t> want(e.begin(), e.end());
    if (info.shape != want)
      problems.push_back("shape mismatch for '" + key + "': file " + detail::shape_str(info.shape) + ", parameter " +
                         name + " " + detail::shape_str(want));
    const bool float_dst = std::is_floating_point_v<T>;
    if (float_dst != detail::is_float_dtype(info.dtype))
      problems.push_back("dtype " + std::string(io::dtype_name(info.dtype)) + " of '" + key +
                         "' does not convert to the parameter's element type");
  });
  for (const auto& key : file.names()) {
    if (!names.owns(key) || used.count(key) || detail::matches_any(opt.ignore_keys, key)) continue;
    if (opt.ignore_unexpected) report.unexpected.push_back(key);
    else problems.push_back("unexpected key '" + key + "' (no module parameter maps to it)");
  }
  return problems;
}

/// Loads every parameter of `module` (nn::for_each_parameter order) from `file`, key names through
/// `names`. Throws CheckpointError listing all problems (check_state); on error the module is
/// unchanged. Writes into the existing parameter storage, so requires_grad flags and views stay valid.
template <class M, TensorSource F>
LoadReport load_state(M& module, const F& file, const io::NameMap& names = io::timm_names(),
                      const LoadOptions& opt = {}) {
  LoadReport report;
  // Pass 1: check everything.
  if (auto problems = check_state(module, file, names, opt, report); !problems.empty())
    throw CheckpointError(file.path(), std::move(problems));
  // Pass 2: read (no recording: loading is not part of any graph).
  autograd::NoGrad ng;
  nn::for_each_parameter(module, [&](const std::string& name, auto& t) {
    using T = typename std::remove_cvref_t<decltype(t)>::value_type;
    const std::string key = names.key_for(name);
    if (detail::matches_any(opt.skip, name) || !file.contains(key)) return;
    file.template read_as<T>(key, std::span<T>(t.data(), std::size_t(t.numel())));
    report.loaded.push_back(name);
  });
  return report;
}

/// Opens `path` and loads it into `module` (see the overload taking an io::SafetensorsFile).
template <class M>
LoadReport load_state(M& module, const std::filesystem::path& path, const io::NameMap& names = io::timm_names(),
                      const LoadOptions& opt = {}) {
  io::SafetensorsFile f(path);
  return load_state(module, f, names, opt);
}

/// Writes every parameter of `module` to a safetensors file under `names` (timm names by default),
/// stored as `dtype` (F32 default), with `metadata` entries (plus format=pt like torch's save).
template <class M>
void save_state(M& module, const std::filesystem::path& path, const io::NameMap& names = io::timm_names(),
                io::DType dtype = io::DType::F32,
                const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
  io::SafetensorsWriter w;
  nn::for_each_parameter(module, [&](const std::string& name, auto& t) {
    using T = typename std::remove_cvref_t<decltype(t)>::value_type;
    const auto e = t.extents();
    w.add(names.key_for(name), std::span<const T>(t.data(), std::size_t(t.numel())),
          std::vector<std::int64_t>(e.begin(), e.end()), dtype);
  });
  w.set_metadata("format", "pt");
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  w.write(path);
}

}  // namespace ttmoe::nn
