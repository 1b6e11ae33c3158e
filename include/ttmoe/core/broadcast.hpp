#pragma once
// Broadcasting (numpy rules: align right, an extent of 1 stretches) computed on shape TYPES at compile
// time and checked on extents at run time. A clash between two static extents is a compile error whose
// instantiation names the op and both shapes; a clash involving a dynamic extent throws ShapeError.

#include <algorithm>
#include <array>
#include <string>

#include "ttmoe/core/shape.hpp"

namespace ttmoe {

/// Compile-time diagnostic: instantiating this names the op and the two offending shape types in
/// the compiler's error message ("required from ... static_shape_mismatch<op::add, Shape<2,3>, Shape<4>>").
template <class Op, class ShapeA, class ShapeB>
struct static_shape_mismatch {
  template <class>
  static constexpr bool always_false = false;
  static_assert(always_false<Op>,
                "ttmoe: static shapes do not fit this op; see Op, ShapeA and ShapeB in this instantiation");
  using type = ShapeA;
};

namespace detail {

// Combines two aligned static-or-dynamic extents; returns 0 on a static clash.
constexpr index_t broadcast_extent(index_t a, index_t b) {
  if (a == dyn && b == dyn) return dyn;
  if (a == dyn) return b == 1 ? dyn : b;
  if (b == dyn) return a == 1 ? dyn : a;
  if (a == b) return a;
  if (a == 1) return b;
  if (b == 1) return a;
  return 0;
}

template <class A, class B>
struct broadcast_extents {
  static constexpr std::size_t rank = std::max(A::rank, B::rank);
  static constexpr std::array<index_t, rank> compute(bool& ok) {
    std::array<index_t, rank> out{};
    ok = true;
    // Rank-0 loops are guarded here and below: nvcc warns (#186) on `i < 0` with an unsigned bound.
    if constexpr (rank > 0)
      for (std::size_t i = 0; i < rank; ++i) {
        const std::size_t ia = i + A::rank, ib = i + B::rank;  // right-aligned positions (+rank)
        const index_t ea = ia >= rank ? A::static_extents[ia - rank] : 1;
        const index_t eb = ib >= rank ? B::static_extents[ib - rank] : 1;
        out[i] = broadcast_extent(ea, eb);
        if (out[i] == 0) ok = false;
      }
    return out;
  }
  static constexpr bool ok() {
    bool k = true;
    compute(k);
    return k;
  }
  struct holder {
    static constexpr std::array<index_t, rank> value = [] {
      bool k = true;
      return compute(k);
    }();
  };
};

template <class Op, class A, class B, bool Ok = broadcast_extents<A, B>::ok()>
struct broadcast2 {
  using type = shape_from_array_t<typename broadcast_extents<A, B>::holder>;
};
template <class Op, class A, class B>
struct broadcast2<Op, A, B, false> {
  using type = typename static_shape_mismatch<Op, A, B>::type;
};

template <class Op, class... S>
struct broadcast_all;
template <class Op, class S>
struct broadcast_all<Op, S> {
  using type = S;
};
template <class Op, class A, class B, class... Rest>
struct broadcast_all<Op, A, B, Rest...> {
  using type = typename broadcast_all<Op, typename broadcast2<Op, A, B>::type, Rest...>::type;
};

}  // namespace detail

/// The broadcast shape type of several operand shape types, for the op named by tag type `Op`.
template <class Op, class... S>
using broadcast_shape_t = typename detail::broadcast_all<Op, S...>::type;

/// `Ok ? Good : static_shape_mismatch<Op, A, B>::type`, instantiating the diagnostic only on failure.
template <bool Ok, class Good, class Op, class A, class B>
struct checked_shape {
  using type = Good;
};
template <class Good, class Op, class A, class B>
struct checked_shape<false, Good, Op, A, B> {
  using type = typename static_shape_mismatch<Op, A, B>::type;
};

/// Runtime broadcast of extents into a target rank; throws ShapeError naming `op` and both shapes.
template <std::size_t R, std::size_t RA, std::size_t RB>
std::array<index_t, R> broadcast_runtime(const std::array<index_t, RA>& a, const std::array<index_t, RB>& b,
                                         const char* op) {
  std::array<index_t, R> out{};
  if constexpr (R > 0)
    for (std::size_t i = 0; i < R; ++i) {
      const index_t ea = i + RA >= R ? a[i + RA - R] : 1;
      const index_t eb = i + RB >= R ? b[i + RB - R] : 1;
      if (ea == eb || eb == 1) {
        out[i] = ea;
      } else if (ea == 1) {
        out[i] = eb;
      } else {
        throw ShapeError(std::string(op) + ": shapes " + extents_to_string(a) + " and " + extents_to_string(b) +
                         " cannot be broadcast together (dimension " + std::to_string(i) + ": " +
                         std::to_string(ea) + " vs " + std::to_string(eb) + ")");
      }
    }
  return out;
}

/// Strides (in elements) with which an operand of extents `e` (rank RS, contiguous row-major) is read
/// when broadcast to an output of rank R: 0 along stretched or missing dimensions.
template <std::size_t R, std::size_t RS>
std::array<index_t, R> broadcast_strides(const std::array<index_t, RS>& e, const std::array<index_t, R>& out) {
  std::array<index_t, R> s{};
  index_t acc = 1;
  if constexpr (R > 0)
    for (std::size_t i = R; i-- > 0;) {
      if (i + RS < R) {
        s[i] = 0;
        continue;
      }
      const index_t ext = e[i + RS - R];
      s[i] = (ext == 1 && out[i] != 1) ? 0 : acc;
      acc *= ext;
    }
  return s;
}

}  // namespace ttmoe
