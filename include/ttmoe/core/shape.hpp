#pragma once
// Shapes whose extents are each either fixed at compile time or dynamic (in the spirit of std::extents):
// static extents live in the type and cost no storage; only the dynamic ones are stored.
// A ViT-B/16 activation is Shape<dyn, 197, 768>: the batch is a run-time value, the rest is checked by
// the compiler.

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "ttmoe/core/config.hpp"
#include "ttmoe/core/error.hpp"

namespace ttmoe {

/// Marks an extent whose value is known only at run time.
inline constexpr index_t dyn = static_cast<index_t>(-1);

namespace detail {
template <index_t... Es>
constexpr index_t count_dynamic() {
  return ((Es == dyn ? 1 : 0) + ... + 0);
}
template <index_t... Es>
constexpr std::array<index_t, sizeof...(Es)> dynamic_slots() {
  std::array<index_t, sizeof...(Es)> slot{};
  constexpr std::array<index_t, sizeof...(Es)> ext{Es...};
  index_t k = 0;
  // Rank-0 loops are guarded here and below: nvcc warns (#186) on `i < 0` with an unsigned bound.
  if constexpr (sizeof...(Es) > 0)
    for (std::size_t i = 0; i < sizeof...(Es); ++i) slot[i] = ext[i] == dyn ? k++ : dyn;
  return slot;
}
}  // namespace detail

/// Formats extents as "[2, 197, 768]" for error messages.
template <std::size_t R>
std::string extents_to_string(const std::array<index_t, R>& e) {
  std::string s = "[";
  if constexpr (R > 0)
    for (std::size_t i = 0; i < R; ++i) {
      if (i) s += ", ";
      s += std::to_string(e[i]);
    }
  return s + "]";
}

/// A rank-R shape; each template argument is a static extent or `dyn`.
template <index_t... Es>
class Shape {
 public:
  static constexpr std::size_t rank = sizeof...(Es);
  static constexpr std::array<index_t, rank> static_extents{Es...};
  static constexpr std::size_t rank_dynamic = detail::count_dynamic<Es...>();
  static constexpr bool fully_static = rank_dynamic == 0;

  /// A fully static shape needs no arguments.
  constexpr Shape() requires(rank_dynamic == 0) = default;

  /// Builds the shape from its dynamic extents only, in order: Shape<dyn, 197, 768>(batch).
  template <class... I>
    requires(sizeof...(I) == rank_dynamic && rank_dynamic > 0 && (std::is_integral_v<I> && ...))
  constexpr explicit Shape(I... dynamic_extents) : dyn_{static_cast<index_t>(dynamic_extents)...} {}

  /// Builds the shape from all R extents, checking the static ones; `op` names the caller in errors.
  static Shape from_extents(const std::array<index_t, rank>& e, const char* op = "shape") {
    Shape s = uninitialised();
    if constexpr (rank > 0)
      for (std::size_t i = 0; i < rank; ++i) {
        if (static_extents[i] == dyn) {
          s.dyn_[kSlot[i]] = e[i];
        } else if (static_extents[i] != e[i]) {
          throw ShapeError(std::string(op) + ": extents " + extents_to_string(e) +
                           " do not fit the static shape " + Shape::type_string());
        }
      }
    return s;
  }

  /// Extent of dimension i.
  constexpr index_t extent(std::size_t i) const {
    if constexpr (rank_dynamic == 0) {
      return static_extents[i];
    } else {
      return static_extents[i] == dyn ? dyn_[kSlot[i]] : static_extents[i];
    }
  }
  /// Extent of dimension I, a compile-time constant when that extent is static.
  template <std::size_t I>
  constexpr index_t extent() const {
    static_assert(I < rank, "ttmoe: dimension index beyond the shape's rank");
    if constexpr (static_extents[I] != dyn) {
      return static_extents[I];
    } else {
      return dyn_[kSlot[I]];
    }
  }
  /// All extents as an array.
  constexpr std::array<index_t, rank> extents() const {
    std::array<index_t, rank> e{};
    if constexpr (rank > 0)
      for (std::size_t i = 0; i < rank; ++i) e[i] = extent(i);
    return e;
  }
  /// Number of elements (1 for rank 0).
  constexpr index_t numel() const {
    index_t n = 1;
    if constexpr (rank > 0)
      for (std::size_t i = 0; i < rank; ++i) n *= extent(i);
    return n;
  }
  /// Row-major strides in elements.
  constexpr std::array<index_t, rank> strides() const {
    std::array<index_t, rank> s{};
    index_t acc = 1;
    for (std::size_t i = rank; i-- > 0;) {
      s[i] = acc;
      acc *= extent(i);
    }
    return s;
  }
  /// Runtime extents as "[8, 197, 768]".
  std::string to_string() const { return extents_to_string(extents()); }
  /// The type's extents with `?` for dynamic ones: "[?, 197, 768]".
  static std::string type_string() {
    std::string s = "[";
    if constexpr (rank > 0)
      for (std::size_t i = 0; i < rank; ++i) {
        if (i) s += ", ";
        s += static_extents[i] == dyn ? std::string("?") : std::to_string(static_extents[i]);
      }
    return s + "]";
  }
  friend constexpr bool operator==(const Shape& a, const Shape& b) { return a.extents() == b.extents(); }

 private:
  static constexpr std::array<index_t, rank> kSlot = detail::dynamic_slots<Es...>();
  static constexpr Shape uninitialised() {
    if constexpr (rank_dynamic == 0) {
      return Shape{};
    } else {
      Shape s{UninitTag{}};
      return s;
    }
  }
  struct UninitTag {};
  constexpr explicit Shape(UninitTag) : dyn_{} {}
  [[no_unique_address]] std::array<index_t, rank_dynamic> dyn_{};
};

/// True for any Shape<...>.
template <class S>
struct is_shape : std::false_type {};
template <index_t... Es>
struct is_shape<Shape<Es...>> : std::true_type {};
template <class S>
concept ShapeType = is_shape<S>::value;

namespace detail {
template <std::size_t R, class Seq = std::make_index_sequence<R>>
struct all_dynamic;
template <std::size_t R, std::size_t... I>
struct all_dynamic<R, std::index_sequence<I...>> {
  using type = Shape<((void)I, dyn)...>;
};
template <class Arr, std::size_t... I>
constexpr auto shape_from_array_impl(std::index_sequence<I...>) -> Shape<Arr::value[I]...>;
}  // namespace detail

/// A rank-R shape with every extent dynamic.
template <std::size_t R>
using DynShape = typename detail::all_dynamic<R>::type;

/// Builds a Shape type from a constexpr array holder `Arr::value`.
template <class Arr>
using shape_from_array_t =
    decltype(detail::shape_from_array_impl<Arr>(std::make_index_sequence<Arr::value.size()>{}));

/// Builds any shape type from runtime extents (checks static ones). `op` names the caller in errors.
template <ShapeType S>
S make_shape(const std::array<index_t, S::rank>& e, const char* op = "shape") {
  return S::from_extents(e, op);
}

}  // namespace ttmoe

namespace ttmoe {
namespace detail {
template <class S, std::size_t I, index_t E>
struct shape_set_holder {
  static constexpr auto value = [] {
    auto a = S::static_extents;
    a[I] = E;
    return a;
  }();
};
template <class S, std::size_t I>
struct shape_drop_holder {
  static constexpr auto value = [] {
    std::array<index_t, S::rank - 1> a{};
    for (std::size_t i = 0, k = 0; i < S::rank; ++i)
      if (i != I) a[k++] = S::static_extents[i];
    return a;
  }();
};
template <class S, std::size_t I, std::size_t J>
struct shape_swap_holder {
  static constexpr auto value = [] {
    auto a = S::static_extents;
    const auto t = a[I];
    a[I] = a[J];
    a[J] = t;
    return a;
  }();
};
}  // namespace detail

/// S with extent I replaced by E (E may be dyn).
template <ShapeType S, std::size_t I, index_t E>
using shape_set_t = shape_from_array_t<detail::shape_set_holder<S, I, E>>;
/// S without dimension I.
template <ShapeType S, std::size_t I>
using shape_drop_t = shape_from_array_t<detail::shape_drop_holder<S, I>>;
/// S with dimensions I and J swapped.
template <ShapeType S, std::size_t I, std::size_t J>
using shape_swap_t = shape_from_array_t<detail::shape_swap_holder<S, I, J>>;

/// Runtime extents with dimension I removed.
template <std::size_t I, std::size_t R>
std::array<index_t, R - 1> drop_extent(const std::array<index_t, R>& e) {
  std::array<index_t, R - 1> out{};
  for (std::size_t i = 0, k = 0; i < R; ++i)
    if (i != I) out[k++] = e[i];
  return out;
}

namespace detail {
// A named constexpr function rather than a lambda inside the concept: nvcc's front end rejects the
// lambda form (every widening conversion then fails to match in CUDA translation units).
template <class From, class To>
constexpr bool statically_convertible() {
  if constexpr (From::rank != To::rank) {
    return false;
  } else {
    for (std::size_t i = 0; i < To::rank; ++i)
      if (To::static_extents[i] != dyn && To::static_extents[i] != From::static_extents[i]) return false;
    return true;
  }
}
}  // namespace detail
/// True when every tensor of shape From is also a valid Shape To without a run-time check
/// (same rank; each static extent of To is matched by the same static extent in From).
template <class From, class To>
concept StaticallyConvertible = ShapeType<From> && ShapeType<To> && detail::statically_convertible<From, To>();
}  // namespace ttmoe
