#pragma once
// Readable printing of tensors through fmt (host code only: fmt stays out of device translation
// units). fmt::print("{}", t) shows dtype, device, shape and up to 6 values per row / 6 rows.

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "ttmoe/core/tensor.hpp"

namespace ttmoe {
namespace detail {
template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else return "?";
}
}  // namespace detail

/// The tensor as text: "tensor(float32, cpu, [2, 3]) [[1, 2, 3], [4, 5, 6]]" (long axes elided).
template <class T, ShapeType S, class D>
std::string to_string(const Tensor<T, S, D>& t, std::size_t edge = 3) {
  std::string s = fmt::format("tensor({}, {}, {})", detail::dtype_name<T>(), D::name, t.shape().to_string());
  if (!t.defined()) return s + " <null>";
  const auto v = t.to_vector();
  const auto ext = t.extents();
  std::string body;
  // Recursive printer over dimensions with elision of the middle of long axes.
  auto rec = [&](auto& self, std::size_t dim, std::size_t offset) -> void {
    if constexpr (S::rank == 0) {
      body += fmt::format("{:.6g}", static_cast<double>(v[0]));
    } else {
      const index_t n = ext[dim];
      index_t stride = 1;
      for (std::size_t d = dim + 1; d < S::rank; ++d) stride *= ext[d];
      body += "[";
      for (index_t i = 0; i < n; ++i) {
        if (n > 2 * edge && i == edge) {
          body += "..., ";
          i = n - edge - 1;
          continue;
        }
        if (dim + 1 == S::rank) {
          body += fmt::format("{:.6g}", static_cast<double>(v[offset + i]));
        } else {
          self(self, dim + 1, offset + i * stride);
        }
        if (i + 1 < n) body += ", ";
      }
      body += "]";
    }
  };
  rec(rec, 0, 0);
  return s + " " + body;
}

}  // namespace ttmoe

/// fmt support: fmt::print("{}", tensor).
template <class T, ttmoe::ShapeType S, class D>
struct fmt::formatter<ttmoe::Tensor<T, S, D>> : fmt::formatter<std::string> {
  template <class Ctx>
  auto format(const ttmoe::Tensor<T, S, D>& t, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(ttmoe::to_string(t), ctx);
  }
};
