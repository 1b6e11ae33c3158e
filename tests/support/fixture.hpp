#pragma once
// Loads a PyTorch parity fixture (tests/reference/README.md describes the convention) into ttmoe
// tensors. A missing fixture file is a test FAILURE, not a skip: the fixtures are made by the
// `generate_parity_fixtures` CTest setup step, which every parity test requires.

#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/ttmoe.hpp"

namespace ttmoe::test {

/// One fixture file.
class Fixture {
 public:
  explicit Fixture(const std::string& name)
      : path_(std::string(TTMOE_TEST_DATA_DIR) + "/parity/" + name + ".safetensors"),
        file_(open(path_)) {}

  /// The fixture file's path.
  const std::string& path() const { return path_; }
  /// True if the file holds tensor `name`.
  bool has(const std::string& name) const { return file_.contains(name); }
  /// The extents of tensor `name`.
  std::vector<index_t> shape(const std::string& name) const {
    auto s = file_.info(name).shape;
    return {s.begin(), s.end()};
  }
  /// Metadata value (throws if absent).
  std::string meta(const std::string& key) const {
    auto m = file_.metadata();
    auto it = m.find(key);
    if (it == m.end()) throw std::runtime_error(path_ + ": no metadata key '" + key + "'");
    return it->second;
  }
  double meta_double(const std::string& key) const { return std::stod(meta(key)); }
  long meta_int(const std::string& key) const { return std::stol(meta(key)); }

  /// Tensor `name` as Tensor<T, DynShape<R>> (rank must match the file).
  template <std::size_t R, class T = double>
  Tensor<T, DynShape<R>> get(const std::string& name) const {
    auto s = shape(name);
    if (s.size() != R) throw std::runtime_error(path_ + ": tensor '" + name + "' has rank " + std::to_string(s.size()));
    std::array<index_t, R> e{};
    for (std::size_t i = 0; i < R; ++i) e[i] = s[i];
    auto shp = DynShape<R>::from_extents(e);
    Tensor<T, DynShape<R>> t(shp);
    file_.read_as<T>(name, std::span<T>(t.data(), t.numel()));
    return t;
  }

 private:
  static io::SafetensorsFile open(const std::string& path) {
    if (!std::filesystem::exists(path))
      throw std::runtime_error("missing parity fixture " + path +
                               " (run the generate_parity_fixtures CTest step; needs /usr/bin/python3 with torch)");
    return io::SafetensorsFile(std::filesystem::path(path));
  }
  std::string path_;
  io::SafetensorsFile file_;
};

/// Largest |a - b| / max(1, |b|) over all elements; NaN-aware (NaN matches NaN only).
template <class TA, class SA, class TB, class SB>
double max_rel_error(const Tensor<TA, SA>& a, const Tensor<TB, SB>& b) {
  REQUIRE(a.numel() == b.numel());
  const auto va = a.to_vector();
  const auto vb = b.to_vector();
  double worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double x = static_cast<double>(va[i]), y = static_cast<double>(vb[i]);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return INFINITY;
      continue;
    }
    worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(y)));
  }
  return worst;
}

/// REQUIREs that `actual` matches fixture tensor `name` within `tol` (relative to max(1, |ref|)).
template <std::size_t R, class T, class S>
void require_close(const Fixture& f, const std::string& name, const Tensor<T, S>& actual, double tol) {
  auto ref = f.get<R, double>(name);
  INFO(name << ": shapes " << actual.shape().to_string() << " vs " << ref.shape().to_string());
  REQUIRE(actual.extents() == ref.extents());
  const double err = max_rel_error(actual, ref);
  INFO(name << ": max relative error " << err << " (tolerance " << tol << ")");
  REQUIRE(err <= tol);
}

}  // namespace ttmoe::test
