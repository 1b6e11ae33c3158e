#pragma once
// THE loader of the reference files the Python scripts write (tests/reference/README.md describes the
// convention): every parity suite reads its safetensors fixtures through this header. A missing file
// is a test FAILURE, not a skip: the CTest setup steps (generate_parity_fixtures,
// generate_model_fixtures, ...) make the files, and every parity suite requires its step.
//
// Comparisons with a fixture, the fixture loss and the data-driven module parity live beside it, in
// parity.hpp.

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/ttmoe.hpp"

namespace ttmoe::test {

/// Tensor `key` of an open safetensors file as Tensor<T, DynShape<R>>, converted to T; a rank that
/// differs from R throws naming the key and both ranks.
template <std::size_t R, class T = double>
Tensor<T, DynShape<R>> read_tensor(const io::SafetensorsFile& file, const std::string& key) {
  const auto& s = file.info(key).shape;
  if (s.size() != R)
    throw std::runtime_error("fixture tensor '" + key + "' has rank " + std::to_string(s.size()) + ", the test reads rank " +
                             std::to_string(R));
  std::array<index_t, R> e{};
  for (std::size_t i = 0; i < R; ++i) e[i] = s[i];
  Tensor<T, DynShape<R>> t(DynShape<R>::from_extents(e));
  file.read_as<T>(key, std::span<T>(t.data(), std::size_t(t.numel())));
  return t;
}

/// Splits a comma-separated metadata list (e.g. `loss_outputs`), dropping empty items.
inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

/// One fixture file, `<test-data>/<folder>/<name>.safetensors`: "parity" for the component fixtures of
/// tests/reference/generate_all.py, "models" for the model fixtures.
class Fixture {
 public:
  /// Opens the fixture; throws (failing the test) with the CTest step to run when the file is missing.
  explicit Fixture(const std::string& name, const std::string& folder = "parity")
      : name_(name),
        path_(std::string(TTMOE_TEST_DATA_DIR) + "/" + folder + "/" + name + ".safetensors"),
        file_(open(path_)) {}

  /// The fixture's name (the file's stem).
  const std::string& name() const { return name_; }
  /// The fixture file's path.
  const std::string& path() const { return path_; }
  /// The open file (for readers that take an io::SafetensorsFile).
  const io::SafetensorsFile& file() const { return file_; }
  /// True if the file holds tensor `key`.
  bool has(const std::string& key) const { return file_.contains(key); }
  /// The extents of tensor `key`.
  std::vector<index_t> shape(const std::string& key) const {
    const auto& s = file_.info(key).shape;
    return {s.begin(), s.end()};
  }
  /// Metadata value (throws naming the file and key if absent).
  std::string meta(const std::string& key) const {
    const auto m = file_.metadata();
    const auto it = m.find(key);
    if (it == m.end()) throw std::runtime_error(path_ + ": no metadata key '" + key + "'");
    return it->second;
  }
  /// Metadata value as a double.
  double meta_double(const std::string& key) const { return std::stod(meta(key)); }
  /// Metadata value as an integer.
  long meta_int(const std::string& key) const { return std::stol(meta(key)); }
  /// The outputs whose upstream gradients make up the fixture loss (metadata `loss_outputs`).
  std::vector<std::string> loss_outputs() const { return split_list(meta("loss_outputs")); }

  /// Tensor `key` as Tensor<T, DynShape<R>> (the rank must match the file).
  template <std::size_t R, class T = double>
  Tensor<T, DynShape<R>> get(const std::string& key) const {
    try {
      return read_tensor<R, T>(file_, key);
    } catch (const std::exception& e) {
      throw std::runtime_error(path_ + ": " + e.what());
    }
  }

  /// The one value of tensor `key` (a scalar or a one-element tensor: a count, a threshold), as T.
  template <class T>
  T scalar(const std::string& key) const {
    const auto v = flat<T>(key);
    if (v.size() != 1)
      throw std::runtime_error(path_ + ": tensor '" + key + "' holds " + std::to_string(v.size()) +
                               " values, the test reads one");
    return v.front();
  }

  /// Tensor `key` of any rank (up to 6) as a flat vector of T.
  template <class T>
  std::vector<T> flat(const std::string& key) const {
    switch (shape(key).size()) {
      case 0: return get<0, T>(key).to_vector();
      case 1: return get<1, T>(key).to_vector();
      case 2: return get<2, T>(key).to_vector();
      case 3: return get<3, T>(key).to_vector();
      case 4: return get<4, T>(key).to_vector();
      case 5: return get<5, T>(key).to_vector();
      case 6: return get<6, T>(key).to_vector();
    }
    throw std::runtime_error(path_ + ": tensor '" + key + "' has a rank above 6");
  }

 private:
  static io::SafetensorsFile open(const std::string& path) {
    if (!std::filesystem::exists(path))
      throw std::runtime_error("missing reference fixture " + path +
                               " (the parity suites' CTest setup steps write it: run them through `ctest -L parity`,"
                               " or tests/reference/generate_all.py --out <build>/test-data/parity)");
    return io::SafetensorsFile(std::filesystem::path(path));
  }
  std::string name_;
  std::string path_;
  io::SafetensorsFile file_;
};

/// Fixture tensor `key` as a leaf of type T that requires grad when `trainable` (inputs, parameters).
template <std::size_t R, class T = double>
Tensor<T, DynShape<R>> leaf(const Fixture& f, const std::string& key, bool trainable = true) {
  auto t = f.get<R, T>(key);
  if (trainable) t.set_requires_grad();
  return t;
}

/// The fixture loss term sum(out * upstream.<name>) as a rank-0 tensor (recorded on an active tape).
/// The upstream tensor is read in out's shape; its element count must match.
template <class T, class S>
Tensor<T, Shape<>> upstream_term(const Fixture& f, const std::string& name, const Tensor<T, S>& out) {
  const std::string key = "upstream." + name;
  INFO(f.name() << ": " << key);
  REQUIRE(f.has(key));
  const auto up = f.flat<T>(key);
  REQUIRE(index_t(up.size()) == out.numel());
  return sum_all(out * Tensor<T, S>::from_host(out.shape(), std::span<const T>(up)));
}

}  // namespace ttmoe::test
