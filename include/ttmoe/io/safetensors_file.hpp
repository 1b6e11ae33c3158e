// SafetensorsFile: a validated, read-only view of one safetensors file.
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ..., "__metadata__": {..}}
// (possibly padded with trailing spaces), then the data section; offsets are relative to it.
//
// The whole header is validated when the file is opened, so every later accessor can trust it:
// a broken checkpoint fails at load time with a typed error naming the file and the tensor,
// never halfway through building a model, and never by reading out of bounds.
#pragma once

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/io/safetensors_bytes.hpp"
#include "ttmoe/io/safetensors_dtype.hpp"
#include "ttmoe/io/safetensors_error.hpp"
#include "ttmoe/io/safetensors_float16.hpp"
#include "ttmoe/io/safetensors_mmap.hpp"
#include "ttmoe/io/safetensors_utf8.hpp"

namespace ttmoe::io {

/// Largest header accepted (same bound as the reference implementation): a corrupt length
/// field must not make us try to parse gigabytes of tensor data as JSON.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

/// Deepest JSON nesting accepted in a header. A real header nests 3 levels; the bound keeps
/// hostile inputs from building pathological documents.
inline constexpr int kMaxHeaderDepth = 64;

/// Formats a shape as "[768, 3]" (scalars as "[]") for error messages.
inline std::string format_shape(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

/// One tensor's header entry, validated. `bytes` points into the file's storage, so it lives
/// exactly as long as the SafetensorsFile it came from (moving the file keeps it valid).
struct TensorInfo {
  std::string name;                  ///< Key in the header.
  DType dtype = DType::F32;          ///< Stored element type.
  std::vector<std::int64_t> shape;   ///< Dimensions, all >= 0; empty for a scalar.
  std::uint64_t begin = 0;           ///< data_offsets[0], relative to the data section.
  std::uint64_t end = 0;             ///< data_offsets[1]; end - begin == numel() * dtype_size.
  std::span<const std::byte> bytes;  ///< The raw little-endian element bytes (maybe unaligned).

  /// Number of elements (1 for a scalar, 0 if any dimension is 0).
  [[nodiscard]] std::size_t numel() const noexcept {
    std::size_t n = 1;
    for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
    return n;
  }
};

namespace detail {

/// Element types read_as converts floating dtypes (F32/F64/F16/BF16) into.
template <class T>
concept FloatElement = std::same_as<T, float> || std::same_as<T, double>;

/// Element types read_as converts integer dtypes (I64/I32/U8/BOOL) into: the standard integer
/// types and bool, but not the character types, whose values are text rather than numbers.
template <class T>
concept IntElement = std::integral<T> && !std::same_as<T, char> && !std::same_as<T, wchar_t> &&
                     !std::same_as<T, char8_t> && !std::same_as<T, char16_t> &&
                     !std::same_as<T, char32_t>;

/// What read_as may write into: non-const float, double, integers or bool.
template <class T>
concept ReadableElement = (FloatElement<T> || IntElement<T>) && !std::is_const_v<T> &&
                          !std::is_volatile_v<T>;

/// Human-readable name of a destination element type, for messages.
template <class T>
std::string element_type_name() {
  if constexpr (std::same_as<T, float>) return "float";
  else if constexpr (std::same_as<T, double>) return "double";
  else if constexpr (std::same_as<T, bool>) return "bool";
  else return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
}

/// Whether integer value v is representable in T (bool: only 0 and 1).
template <class T>
constexpr bool integer_fits(std::int64_t v) noexcept {
  if constexpr (std::same_as<T, bool>) return v == 0 || v == 1;
  else return std::in_range<T>(v);
}

/// Reads element i of an integer-dtype tensor as int64 (every supported integer dtype fits).
/// BOOL bytes other than 0 count as true, like numpy and torch do.
inline std::int64_t load_integer(DType dtype, const std::byte* base, std::size_t i) noexcept {
  switch (dtype) {
    case DType::I64: return static_cast<std::int64_t>(load_le<std::uint64_t>(base + 8 * i));
    case DType::I32:
      return static_cast<std::int32_t>(load_le<std::uint32_t>(base + 4 * i));
    case DType::U8: return std::to_integer<std::uint8_t>(base[i]);
    case DType::BOOL: return base[i] != std::byte{0} ? 1 : 0;
    default: return 0;  // unreachable: callers check the dtype first
  }
}

/// Converts n elements of a floating dtype at `base` into dst (float or double).
template <FloatElement T>
void convert_floats(DType dtype, const std::byte* base, std::span<T> dst) noexcept {
  const std::size_t n = dst.size();
  switch (dtype) {
    case DType::F32:
      if constexpr (std::same_as<T, float> && std::endian::native == std::endian::little) {
        if (n != 0) std::memcpy(dst.data(), base, n * sizeof(float));  // fast path: same layout
      } else {
        for (std::size_t i = 0; i < n; ++i)
          dst[i] = static_cast<T>(std::bit_cast<float>(load_le<std::uint32_t>(base + 4 * i)));
      }
      break;
    case DType::F64:
      if constexpr (std::same_as<T, double> && std::endian::native == std::endian::little) {
        if (n != 0) std::memcpy(dst.data(), base, n * sizeof(double));
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          const double d = std::bit_cast<double>(load_le<std::uint64_t>(base + 8 * i));
          if constexpr (std::same_as<T, float>) dst[i] = double_to_float(d);
          else dst[i] = d;
        }
      }
      break;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = static_cast<T>(f16_to_float(load_le<std::uint16_t>(base + 2 * i)));
      break;
    case DType::BF16:
      for (std::size_t i = 0; i < n; ++i)
        dst[i] = static_cast<T>(bf16_to_float(load_le<std::uint16_t>(base + 2 * i)));
      break;
    default: break;  // unreachable: callers check the dtype first
  }
}

/// Quotes a tensor name for messages.
inline std::string quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

/// "[begin, end)" for messages.
inline std::string format_range(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

}  // namespace detail

/// A safetensors file, opened and fully validated. Movable, not copyable.
///
/// Storage is one of: a read-only mmap of a file (constructor from a path), a private copy of
/// caller bytes (from_bytes), or caller bytes used in place (borrow_bytes, which the caller must
/// keep alive and unchanged for the object's lifetime). All accessors are const and do not
/// mutate, so one file may be read from several threads at once.
class SafetensorsFile {
 public:
  /// Maps and validates the file at `path`. Throws SafetensorsError (kind Io for OS failures,
  /// otherwise the validation failure) whose message starts with the path.
  explicit SafetensorsFile(const std::filesystem::path& path) : label_(path.string()) {
    map_ = detail::MappedFile(path);
    all_ = map_.bytes();
    validate();
  }

  /// Validates a private copy of `bytes`; `label` stands in for the path in error messages.
  static SafetensorsFile from_bytes(std::span<const std::byte> bytes, std::string label = "<memory>") {
    return from_bytes(std::vector<std::byte>(bytes.begin(), bytes.end()), std::move(label));
  }

  /// Validates `bytes`, taking ownership (no copy).
  static SafetensorsFile from_bytes(std::vector<std::byte>&& bytes, std::string label = "<memory>") {
    SafetensorsFile f(LabelOnly{}, std::move(label));
    f.owned_ = std::move(bytes);
    f.all_ = f.owned_;
    f.validate();
    return f;
  }

  /// Validates `bytes` in place without copying. BORROWED: the caller keeps the buffer alive
  /// and unmodified for as long as this object (or any TensorInfo::bytes from it) is used.
  /// Used by the fuzzer so out-of-bounds reads hit the exact end of the input.
  static SafetensorsFile borrow_bytes(std::span<const std::byte> bytes, std::string label = "<memory>") {
    SafetensorsFile f(LabelOnly{}, std::move(label));
    f.all_ = bytes;
    f.validate();
    return f;
  }

  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  // Moves keep every span valid: the mapping's address and a vector's heap buffer travel along.
  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  ~SafetensorsFile() = default;

  /// The path (or in-memory label) used in error messages.
  [[nodiscard]] const std::string& path() const noexcept { return label_; }
  /// True when the bytes are a read-only mapping of the file (the constructor from a path), so
  /// dropping their pages (detail::release_pages) loses nothing; false for caller bytes.
  [[nodiscard]] bool is_mapped() const noexcept { return !map_.bytes().empty(); }
  /// Asks for the whole mapping to be mapped in 2 MiB pages where the page cache allows it
  /// (detail::advise_huge_pages); nothing for caller bytes. Before the first read of the tensors.
  void advise_huge_pages() const noexcept { detail::advise_huge_pages(map_.bytes()); }

  /// Number of tensors in the file.
  [[nodiscard]] std::size_t size() const noexcept { return tensors_.size(); }

  /// Tensor names ordered by data offset (ties by name): the physical layout, which is
  /// deterministic and lets a loader stream through the file front to back.
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    out.reserve(tensors_.size());
    for (const TensorInfo& t : tensors_) out.push_back(t.name);
    return out;
  }

  /// All tensor entries, in the same order as names().
  [[nodiscard]] std::span<const TensorInfo> tensors() const noexcept { return tensors_; }

  /// Whether the file holds a tensor called `name`.
  [[nodiscard]] bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }

  /// The entry for `name`; throws SafetensorsError{MissingTensor} naming it if absent.
  [[nodiscard]] const TensorInfo& info(std::string_view name) const {
    const auto it = index_.find(name);
    if (it == index_.end()) missing(name);
    return tensors_[it->second];
  }

  /// The "__metadata__" string map (empty when the header has none).
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  /// Length of the JSON header in bytes (including padding) as declared by the prefix.
  [[nodiscard]] std::uint64_t header_size() const noexcept { return header_size_; }

  /// Copies tensor `name` into dst, converting element types:
  ///  - float/double destinations accept F32, F64, F16, BF16 (F64 -> float rounds to nearest even);
  ///  - integer/bool destinations accept I64, I32, U8, BOOL; a value that does not fit raises
  ///    OutOfRange (bool accepts only 0 and 1).
  /// dst.size() must equal the element count (else ShapeMismatch); other pairings raise
  /// DTypeMismatch. Reads are bounds-checked by construction and alignment-agnostic.
  template <detail::ReadableElement T>
  void read_as(std::string_view name, std::span<T> dst) const {
    const TensorInfo& t = info(name);
    const std::size_t n = t.numel();
    if (dst.size() != n) {
      fail(ErrorKind::ShapeMismatch,
           "destination holds " + std::to_string(dst.size()) + " elements but tensor " +
               detail::quoted(name) + " has shape " + format_shape(t.shape) + " (" + std::to_string(n) +
               " elements)");
    }
    if constexpr (detail::FloatElement<T>) {
      if (!is_floating_dtype(t.dtype)) {
        fail(ErrorKind::DTypeMismatch, "tensor " + detail::quoted(name) + " is " +
                                           std::string(dtype_name(t.dtype)) + " and cannot be read as " +
                                           detail::element_type_name<T>() +
                                           " (that needs F32, F64, F16 or BF16)");
      }
      detail::convert_floats<T>(t.dtype, t.bytes.data(), dst);
    } else {
      if (is_floating_dtype(t.dtype)) {
        fail(ErrorKind::DTypeMismatch, "tensor " + detail::quoted(name) + " is " +
                                           std::string(dtype_name(t.dtype)) + " and cannot be read as " +
                                           detail::element_type_name<T>() +
                                           " (that needs I64, I32, U8 or BOOL)");
      }
      for (std::size_t i = 0; i < n; ++i) {
        const std::int64_t v = detail::load_integer(t.dtype, t.bytes.data(), i);
        if (!detail::integer_fits<T>(v)) {
          fail(ErrorKind::OutOfRange, "element " + std::to_string(i) + " of tensor " + detail::quoted(name) +
                                          " has value " + std::to_string(v) + ", which does not fit " +
                                          detail::element_type_name<T>());
        }
        dst[i] = static_cast<T>(v);
      }
    }
  }

  /// read_as after checking the tensor's shape equals `expected_shape`; a mismatch raises
  /// ShapeMismatch naming both shapes, an absent tensor MissingTensor naming it. This is the
  /// call model loaders want: a checkpoint for the wrong architecture fails loudly.
  template <detail::ReadableElement T>
  void read_into(std::string_view name, const std::vector<std::int64_t>& expected_shape, std::span<T> dst) const {
    const TensorInfo& t = info(name);
    if (t.shape != expected_shape) {
      fail(ErrorKind::ShapeMismatch, "tensor " + detail::quoted(name) + " has shape " + format_shape(t.shape) +
                                         " but shape " + format_shape(expected_shape) + " was expected");
    }
    read_as<T>(name, dst);
  }

  /// Convenience: the whole tensor converted into a new vector (not for bool, whose
  /// std::vector specialisation has no contiguous storage; use read_as with a bool array).
  template <detail::ReadableElement T>
    requires(!std::same_as<T, bool>)
  [[nodiscard]] std::vector<T> read(std::string_view name) const {
    std::vector<T> out(info(name).numel());
    read_as<T>(name, std::span<T>(out));
    return out;
  }

 private:
  // Tagged so that SafetensorsFile(std::string) still means "open this path".
  struct LabelOnly {};
  SafetensorsFile(LabelOnly, std::string label) : label_(std::move(label)) {}

  [[noreturn]] void fail(ErrorKind kind, const std::string& detail) const {
    throw SafetensorsError(kind, label_, detail);
  }

  [[noreturn]] void missing(std::string_view name) const {
    std::string msg = "no tensor named " + detail::quoted(name) + "; the file holds " +
                      std::to_string(tensors_.size()) + " tensor" + (tensors_.size() == 1 ? "" : "s");
    // List a few names: it usually makes a prefix or naming-convention mismatch obvious.
    constexpr std::size_t kShown = 8;
    for (std::size_t i = 0; i < tensors_.size() && i < kShown; ++i) {
      msg += (i == 0 ? ": " : ", ") + detail::quoted(tensors_[i].name);
    }
    if (tensors_.size() > kShown) msg += ", ...";
    fail(ErrorKind::MissingTensor, msg);
  }

  // Parses the header JSON, turning parser failures into InvalidJson and rejecting duplicate
  // keys (which nlohmann would otherwise silently collapse to the last one) and deep nesting.
  nlohmann::json parse_json(std::string_view header) const {
    std::vector<std::set<std::string, std::less<>>> open_objects;
    const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t event,
                                                     nlohmann::json& parsed) {
      using E = nlohmann::json::parse_event_t;
      switch (event) {
        case E::object_start:
        case E::array_start:
          if (depth >= kMaxHeaderDepth) {
            fail(ErrorKind::InvalidJson,
                 "header JSON nests deeper than " + std::to_string(kMaxHeaderDepth) + " levels");
          }
          if (event == E::object_start) open_objects.emplace_back();
          break;
        case E::object_end:
          if (!open_objects.empty()) open_objects.pop_back();
          break;
        case E::key:
          if (!open_objects.empty() && parsed.is_string()) {
            const auto& key = parsed.get_ref<const std::string&>();
            if (!open_objects.back().insert(key).second) {
              fail(ErrorKind::DuplicateName, "header JSON repeats the key " + detail::quoted(key) +
                                                 (depth == 1 ? " (two tensors with one name)" : ""));
            }
          }
          break;
        default: break;
      }
      return true;
    };
    try {
      return nlohmann::json::parse(header.begin(), header.end(), cb, /*allow_exceptions=*/true,
                                   /*ignore_comments=*/false);
    } catch (const nlohmann::json::exception& e) {
      std::string what = e.what();
      // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest locates the error.
      if (const auto pos = what.find("] "); what.rfind("[json.exception.", 0) == 0 && pos != std::string::npos) {
        what.erase(0, pos + 2);
      }
      fail(ErrorKind::InvalidJson, "header is not valid JSON: " + what);
    }
  }

  // Accepts a JSON non-negative integer (dimension or offset) into `out`; false for anything
  // else (negative, fractional, too large for uint64 -- nlohmann stores those as floats).
  static bool as_count(const nlohmann::json& v, std::uint64_t& out) {
    if (v.is_number_unsigned()) {
      out = v.get<std::uint64_t>();
      return true;
    }
    if (v.is_number_integer() && v.get<std::int64_t>() >= 0) {  // e.g. "-0"
      out = static_cast<std::uint64_t>(v.get<std::int64_t>());
      return true;
    }
    return false;
  }

  static std::string describe(const nlohmann::json& v) {
    if (v.is_number() || v.is_boolean() || v.is_null()) return v.dump();
    if (v.is_string()) {
      const auto& s = v.get_ref<const std::string&>();
      if (s.size() <= 32) return "\"" + s + "\"";
      std::size_t cut = 32;  // back up to a character boundary so the message stays valid UTF-8
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0u) == 0x80u) --cut;
      return "\"" + s.substr(0, cut) + "...\"";
    }
    return std::string("a JSON ") + v.type_name();
  }

  const nlohmann::json& field(const std::string& name, const nlohmann::json& entry, const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) {
      fail(ErrorKind::InvalidHeader, "tensor " + detail::quoted(name) + " has no \"" + key + "\" field");
    }
    return *it;
  }

  TensorInfo parse_entry(const std::string& name, const nlohmann::json& entry) const {
    if (!entry.is_object()) {
      fail(ErrorKind::InvalidHeader, "entry for tensor " + detail::quoted(name) + " is " + describe(entry) +
                                         ", not an object");
    }
    TensorInfo t;
    t.name = name;

    const nlohmann::json& dt = field(name, entry, "dtype");
    if (!dt.is_string()) {
      fail(ErrorKind::UnknownDType, "tensor " + detail::quoted(name) + " has dtype " + describe(dt) +
                                        ", not a dtype string");
    }
    const auto parsed = parse_dtype(dt.get_ref<const std::string&>());
    if (!parsed) {
      fail(ErrorKind::UnknownDType, "tensor " + detail::quoted(name) + " has unsupported dtype " + describe(dt) +
                                        " (supported: F32, F64, F16, BF16, I64, I32, U8, BOOL)");
    }
    t.dtype = *parsed;

    const nlohmann::json& shape = field(name, entry, "shape");
    if (!shape.is_array()) {
      fail(ErrorKind::BadShape, "tensor " + detail::quoted(name) + " has shape " + describe(shape) +
                                    ", not an array of non-negative integers");
    }
    // Element count; overflow is tracked separately so a zero dimension after a huge one is fine.
    std::uint64_t count = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      std::uint64_t d = 0;
      if (!as_count(shape[i], d) || d > static_cast<std::uint64_t>(INT64_MAX)) {
        fail(ErrorKind::BadShape, "tensor " + detail::quoted(name) + " has dimension " + describe(shape[i]) +
                                      " at index " + std::to_string(i) +
                                      "; dimensions must be non-negative integers");
      }
      t.shape.push_back(static_cast<std::int64_t>(d));
      if (d == 0) {
        count = 0;
        overflow = false;
      } else if (count != 0 && (overflow || count > UINT64_MAX / d)) {
        overflow = true;
      } else {
        count *= d;
      }
    }
    const std::uint64_t esize = dtype_size(t.dtype);
    if (overflow || count > UINT64_MAX / esize || count > SIZE_MAX) {
      fail(ErrorKind::BadShape, "tensor " + detail::quoted(name) + " has shape " + format_shape(t.shape) +
                                    " whose byte size does not fit in 64 bits");
    }
    const std::uint64_t nbytes = count * esize;

    const nlohmann::json& offs = field(name, entry, "data_offsets");
    if (!offs.is_array() || offs.size() != 2 || !as_count(offs[0], t.begin) || !as_count(offs[1], t.end)) {
      fail(ErrorKind::BadOffsets, "tensor " + detail::quoted(name) + " has data_offsets " +
                                      (offs.is_array() ? offs.dump() : describe(offs)) +
                                      ", not two non-negative integers");
    }
    if (t.end < t.begin) {
      fail(ErrorKind::BadOffsets, "tensor " + detail::quoted(name) + " has reversed data_offsets [" +
                                      std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                      "] (begin > end)");
    }
    if (t.end - t.begin != nbytes) {
      fail(ErrorKind::SizeMismatch, "tensor " + detail::quoted(name) + " data_offsets " +
                                        detail::format_range(t.begin, t.end) + " do not match shape " +
                                        format_shape(t.shape) + " of " + std::string(dtype_name(t.dtype)) + " (" +
                                        std::to_string(nbytes) + " bytes)");
    }
    if (t.end > data_.size()) {
      fail(ErrorKind::Truncated, "tensor " + detail::quoted(name) + " data_offsets " +
                                     detail::format_range(t.begin, t.end) + " extend past the end of the " +
                                     std::to_string(data_.size()) + "-byte data section (file truncated?)");
    }
    t.bytes = data_.subspan(static_cast<std::size_t>(t.begin), static_cast<std::size_t>(nbytes));
    return t;
  }

  void parse_metadata(const nlohmann::json& meta) {
    if (!meta.is_object()) {
      fail(ErrorKind::InvalidHeader, "__metadata__ is " + describe(meta) + ", not an object of strings");
    }
    for (const auto& [key, value] : meta.items()) {
      if (!value.is_string()) {
        fail(ErrorKind::InvalidHeader, "__metadata__ value for key " + detail::quoted(key) + " is " +
                                           describe(value) + ", not a string");
      }
      metadata_.emplace(key, value.get<std::string>());
    }
  }

  void validate() {
    const std::size_t total = all_.size();
    if (total < 8) {
      fail(ErrorKind::Truncated, "file is " + std::to_string(total) +
                                     " bytes, shorter than the 8-byte header length prefix");
    }
    header_size_ = detail::load_le<std::uint64_t>(all_.data());
    if (header_size_ > kMaxHeaderBytes) {
      fail(ErrorKind::HeaderTooLarge, "header length " + std::to_string(header_size_) + " exceeds the limit of " +
                                          std::to_string(kMaxHeaderBytes) + " bytes");
    }
    if (header_size_ > total - 8) {
      fail(ErrorKind::HeaderTooLarge, "header length " + std::to_string(header_size_) + " exceeds the " +
                                          std::to_string(total - 8) + " bytes after the length prefix");
    }
    if (header_size_ < 2) {
      fail(ErrorKind::HeaderTooSmall,
           "header length " + std::to_string(header_size_) + " is too small to hold a JSON object");
    }
    const auto hlen = static_cast<std::size_t>(header_size_);
    const std::string_view header(reinterpret_cast<const char*>(all_.data() + 8), hlen);
    if (const auto bad = detail::first_invalid_utf8(header)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(header[*bad])));
      fail(ErrorKind::InvalidUtf8, "header is not valid UTF-8: byte " + std::string(hex) + " at header offset " +
                                       std::to_string(*bad));
    }
    // nlohmann treats a NUL byte as end of input and would ignore whatever follows; valid JSON
    // never contains a raw NUL, so reject it here rather than accept "{}\0<garbage>".
    if (const auto nul = header.find('\0'); nul != std::string_view::npos) {
      fail(ErrorKind::InvalidJson, "header is not valid JSON: NUL byte at header offset " + std::to_string(nul));
    }
    data_ = all_.subspan(8 + hlen);

    const nlohmann::json root = parse_json(header);
    if (!root.is_object()) {
      fail(ErrorKind::InvalidHeader, "header JSON is " + describe(root) + ", not an object");
    }
    tensors_.reserve(root.size());
    for (const auto& [key, value] : root.items()) {
      if (key == "__metadata__") {
        parse_metadata(value);
      } else {
        tensors_.push_back(parse_entry(key, value));
      }
    }

    std::sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
      if (a.begin != b.begin) return a.begin < b.begin;
      if (a.end != b.end) return a.end < b.end;
      return a.name < b.name;
    });
    // Sorted by begin, a tensor overlaps an earlier one iff it starts before the furthest end
    // seen so far. Empty tensors occupy no bytes and may sit anywhere. Holes are allowed.
    const TensorInfo* furthest = nullptr;
    for (const TensorInfo& t : tensors_) {
      if (t.begin == t.end) continue;
      if (furthest != nullptr && t.begin < furthest->end) {
        fail(ErrorKind::OverlappingOffsets, "tensors " + detail::quoted(furthest->name) + " " +
                                                detail::format_range(furthest->begin, furthest->end) + " and " +
                                                detail::quoted(t.name) + " " + detail::format_range(t.begin, t.end) +
                                                " overlap");
      }
      if (furthest == nullptr || t.end > furthest->end) furthest = &t;
    }
    for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  }

  std::string label_;
  detail::MappedFile map_;                 // storage when opened from a path
  std::vector<std::byte> owned_;           // storage for from_bytes
  std::span<const std::byte> all_;         // the whole file, whichever storage holds it
  std::span<const std::byte> data_;        // the data section (after the header)
  std::uint64_t header_size_ = 0;
  std::vector<TensorInfo> tensors_;        // sorted by data offset
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace ttmoe::io
