// Little-endian loads and stores at arbitrary (possibly unaligned) addresses.
//
// safetensors data is little-endian and tensors need not be aligned to their element size
// (the header length is arbitrary), so every element access goes through memcpy: defined
// behaviour on any alignment, and compiled to a plain load on x86/ARM.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ttmoe::io::detail {

/// Reverses the bytes of an unsigned integer (std::byteswap is C++23).
template <class U>
constexpr U byteswap_unsigned(U v) noexcept {
  static_assert(std::is_unsigned_v<U>);
  U r = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    r = static_cast<U>((r << 8) | (v & 0xFFu));
    v = static_cast<U>(v >> 8);
  }
  return r;
}

/// Reads an unsigned little-endian integer from p (no alignment requirement).
template <class U>
U load_le(const std::byte* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof(U));
  if constexpr (std::endian::native == std::endian::big) v = byteswap_unsigned(v);
  return v;
}

/// Writes an unsigned integer to p in little-endian order (no alignment requirement).
template <class U>
void store_le(std::byte* p, U v) noexcept {
  if constexpr (std::endian::native == std::endian::big) v = byteswap_unsigned(v);
  std::memcpy(p, &v, sizeof(U));
}

}  // namespace ttmoe::io::detail
