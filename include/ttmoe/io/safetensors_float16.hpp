// Exact decoding and round-to-nearest-even encoding of the 16-bit float formats safetensors
// stores (IEEE binary16 "F16" and bfloat16 "BF16"), plus a well-defined double -> float narrowing.
//
// Written by hand rather than relying on _Float16 / __bf16 because compiler support for those
// differs between g++ 12 and clang 14 and across targets, and checkpoints must decode
// identically everywhere.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace ttmoe::io {

/// Decodes IEEE binary16 bits into float. Exact: every half (subnormals, +-0, +-inf, NaN with
/// its payload's top bits) is representable in float.
constexpr float f16_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits = 0;
  if (exp == 0x1Fu) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf, or NaN (mant != 0 stays != 0)
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mant * 2^-24. Float has the range to normalise it, so shift the leading one
    // into the hidden-bit position and lower the exponent accordingly.
    int e = -14;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<std::uint32_t>(e + 127) << 23) | ((mant & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

/// Decodes bfloat16 bits into float. Exact: bfloat16 is the top half of a binary32.
constexpr float bf16_to_float(std::uint16_t h) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

namespace detail {

/// Rounds a double to a narrow binary format with ExpBits exponent and MantBits stored mantissa
/// bits, round-to-nearest-even, overflow to infinity, gradual underflow to subnormals.
/// Works from the double directly because rounding double -> float -> half can round twice and
/// land on the wrong neighbour (e.g. 1 + 2^-11 + 2^-40 must become 1 + 2^-10, not 1).
template <int ExpBits, int MantBits>
constexpr std::uint16_t round_to_narrow(double x) noexcept {
  constexpr int bias = (1 << (ExpBits - 1)) - 1;
  constexpr int emin = 1 - bias;
  constexpr std::uint32_t exp_all = (1u << ExpBits) - 1u;
  constexpr std::uint32_t inf_bits = exp_all << MantBits;
  const std::uint64_t b = std::bit_cast<std::uint64_t>(x);
  const std::uint32_t sign = static_cast<std::uint32_t>(b >> 63) << (ExpBits + MantBits);
  const int dexp = static_cast<int>((b >> 52) & 0x7FFu);
  const std::uint64_t dmant = b & ((std::uint64_t{1} << 52) - 1);
  if (dexp == 0x7FF) {
    if (dmant == 0) return static_cast<std::uint16_t>(sign | inf_bits);
    // NaN: keep the payload's top bits and force the quiet bit so it can never become inf.
    const auto payload = static_cast<std::uint32_t>(dmant >> (52 - MantBits));
    return static_cast<std::uint16_t>(sign | inf_bits | (1u << (MantBits - 1)) | payload);
  }
  if (dexp == 0) return static_cast<std::uint16_t>(sign);  // zero, or far below any target subnormal
  const int e = dexp - 1023;
  if (e + bias >= static_cast<int>(exp_all)) return static_cast<std::uint16_t>(sign | inf_bits);
  const std::uint64_t m = dmant | (std::uint64_t{1} << 52);  // 53-bit significand, value m * 2^(e-52)
  // Number of low significand bits that fall below the target's quantum at this magnitude;
  // below emin the quantum is fixed, which is what makes the result subnormal.
  const int shift = 52 - MantBits + (e < emin ? emin - e : 0);
  if (shift > 54) return static_cast<std::uint16_t>(sign);  // under a quarter quantum: rounds to 0
  std::uint64_t q = m >> shift;
  const std::uint64_t rem = m & ((std::uint64_t{1} << shift) - 1);
  const std::uint64_t half = std::uint64_t{1} << (shift - 1);
  if (rem > half || (rem == half && (q & 1u) != 0)) ++q;
  // Normal: q carries the hidden bit, so adding it to (biased exponent - 1) sets the exponent
  // field; a rounding carry out of the mantissa bumps the exponent (up to inf) by itself.
  const std::uint64_t bits =
      e < emin ? q : (static_cast<std::uint64_t>(e + bias - 1) << MantBits) + q;
  return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(bits));
}

}  // namespace detail

/// Encodes a double as IEEE binary16 bits, round-to-nearest-even (overflow -> inf, NaN stays NaN).
constexpr std::uint16_t double_to_f16(double x) noexcept { return detail::round_to_narrow<5, 10>(x); }
/// Encodes a float as IEEE binary16 bits, round-to-nearest-even.
constexpr std::uint16_t float_to_f16(float x) noexcept { return double_to_f16(static_cast<double>(x)); }
/// Encodes a double as bfloat16 bits, round-to-nearest-even (not truncation, which biases weights).
constexpr std::uint16_t double_to_bf16(double x) noexcept { return detail::round_to_narrow<8, 7>(x); }
/// Encodes a float as bfloat16 bits, round-to-nearest-even.
constexpr std::uint16_t float_to_bf16(float x) noexcept { return double_to_bf16(static_cast<double>(x)); }
/// x rounded to the nearest bfloat16 value (ties to even, NaN kept), as a float: what a BF16
/// activation or factor holds once stored.
constexpr float round_to_bf16(float x) noexcept { return bf16_to_float(float_to_bf16(x)); }

/// Narrows double to float with round-to-nearest-even and overflow to +-inf. Spelled out because
/// a finite double beyond float's range converted by static_cast is undefined behaviour in C++.
constexpr float double_to_float(double x) noexcept {
  constexpr double fmax = static_cast<double>(std::numeric_limits<float>::max());
  // Midpoint between FLT_MAX and 2^128: from here on (ties go to the even 2^128) the result is inf.
  constexpr double inf_threshold = fmax + 0x1p103;
  if (x != x) {
    // Keep sign and the payload's top bits, quiet bit forced (so the payload can never read as inf).
    const std::uint64_t b = std::bit_cast<std::uint64_t>(x);
    const auto sign = static_cast<std::uint32_t>(b >> 63) << 31;
    const auto payload = static_cast<std::uint32_t>((b >> 29) & 0x7FFFFFu);
    return std::bit_cast<float>(sign | 0x7FC00000u | payload);
  }
  if (x > fmax) return x >= inf_threshold ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::max();
  if (x < -fmax) return x <= -inf_threshold ? -std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::max();
  return static_cast<float>(x);
}

}  // namespace ttmoe::io
