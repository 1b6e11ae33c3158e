// The element types a safetensors file may declare, and how they are spelled in its header.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace ttmoe::io {

/// Element types supported by ttmoe's safetensors reader and writer. Other dtypes the format
/// knows (I8, I16, U16, F8_*, ...) are rejected with ErrorKind::UnknownDType rather than being
/// half-supported, because a silently misread checkpoint is worse than a clear refusal.
enum class DType { F32, F64, F16, BF16, I64, I32, U8, BOOL };

/// All supported dtypes, for iteration in tests and tools.
inline constexpr DType kAllDTypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16,
                                       DType::I64, DType::I32, DType::U8,  DType::BOOL};

/// Bytes per element as stored in the file (BOOL is one byte, as in the format).
constexpr std::size_t dtype_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::F64:
    case DType::I64: return 8;
    case DType::F32:
    case DType::I32: return 4;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::U8:
    case DType::BOOL: return 1;
  }
  return 0;
}

/// The header spelling ("F32", "BF16", ...), exactly as written by the reference implementation.
constexpr std::string_view dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I64: return "I64";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
    case DType::BOOL: return "BOOL";
  }
  return "?";
}

/// Parses a header dtype string; case-sensitive like the format. Returns nullopt for anything
/// unknown so the caller can report it with file context.
constexpr std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (DType d : kAllDTypes) {
    if (dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

/// True for the dtypes read_as<float/double> accepts.
constexpr bool is_floating_dtype(DType dtype) noexcept {
  return dtype == DType::F32 || dtype == DType::F64 || dtype == DType::F16 || dtype == DType::BF16;
}

}  // namespace ttmoe::io
