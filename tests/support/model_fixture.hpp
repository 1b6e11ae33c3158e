#pragma once
// Opens a model fixture written by tests/reference/vit_models.py. A missing file is a failure (the
// generate_model_fixtures CTest setup step makes them), never a skip.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "ttmoe/io/safetensors.hpp"
#include "ttmoe/ttmoe.hpp"

namespace ttmoe::test {

/// The fixture file `<test-data>/models/<name>.safetensors`.
inline io::SafetensorsFile open_model_fixture(const std::string& name) {
  const std::string path = std::string(TTMOE_TEST_DATA_DIR) + "/models/" + name + ".safetensors";
  if (!std::filesystem::exists(path))
    throw std::runtime_error("missing model fixture " + path +
                             " (run the generate_model_fixtures CTest step; needs /usr/bin/python3 with torch)");
  return io::SafetensorsFile(std::filesystem::path(path));
}

/// Tensor `key` of `f` as Tensor<T, DynShape<R>>.
template <std::size_t R, class T>
Tensor<T, DynShape<R>> read_tensor(const io::SafetensorsFile& f, const std::string& key) {
  const auto& s = f.info(key).shape;
  REQUIRE(s.size() == R);
  std::array<index_t, R> e{};
  for (std::size_t i = 0; i < R; ++i) e[i] = s[i];
  Tensor<T, DynShape<R>> t(DynShape<R>::from_extents(e));
  f.read_as<T>(key, std::span<T>(t.data(), std::size_t(t.numel())));
  return t;
}

/// Normwise relative error max_i |a_i - b_i| / max_i |b_i| (b is the reference).
template <class TA, class SA, class TB, class SB>
double normwise_rel_error(const Tensor<TA, SA>& a, const Tensor<TB, SB>& b) {
  REQUIRE(a.numel() == b.numel());
  const auto va = a.to_vector();
  const auto vb = b.to_vector();
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    diff = std::max(diff, std::abs(double(va[i]) - double(vb[i])));
    scale = std::max(scale, std::abs(double(vb[i])));
  }
  return std::isnan(diff) ? INFINITY : diff / std::max(scale, 1e-30);
}

}  // namespace ttmoe::test
