#pragma once
// Build-wide switches and the host/device annotation used by everything an expression evaluates.

#include <cstddef>

#if defined(__CUDACC__)
#define TTMOE_HD __host__ __device__
#else
#define TTMOE_HD
#endif

#if defined(__GNUC__) || defined(__clang__)
#define TTMOE_INLINE inline __attribute__((always_inline))
#else
#define TTMOE_INLINE inline
#endif

namespace ttmoe {
/// Index type for extents and element counts.
using index_t = std::size_t;
}  // namespace ttmoe
