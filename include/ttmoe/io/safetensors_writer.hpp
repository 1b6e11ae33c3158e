// SafetensorsWriter: collects tensors and writes a safetensors file atomically.
//
// Layout choices, and why:
//  - The data section is contiguous (no holes): the reference reader rejects files with gaps,
//    so gaps would make our checkpoints unreadable by PyTorch tooling.
//  - Tensors are laid out by element size, largest first (stable within a size): with the header
//    padded so the data section starts at a multiple of 8, every tensor then starts at a multiple
//    of its own element size, i.e. is naturally aligned in a mapped file, without holes.
//  - The header JSON is padded with spaces to a multiple of 8 bytes (allowed by the format).
//  - write() goes through "<path>.tmp" + fsync + rename, so a crash leaves either the old file
//    or the complete new one, never a torn checkpoint.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/io/safetensors_bytes.hpp"
#include "ttmoe/io/safetensors_dtype.hpp"
#include "ttmoe/io/safetensors_error.hpp"
#include "ttmoe/io/safetensors_file.hpp"
#include "ttmoe/io/safetensors_float16.hpp"
#include "ttmoe/io/safetensors_utf8.hpp"

namespace ttmoe::io {

/// Builds a safetensors file in memory, then writes it. add() copies (and converts) the data
/// right away, so callers may free or reuse their buffers after each call.
class SafetensorsWriter {
 public:
  /// Adds a tensor from raw little-endian bytes already in `dtype`'s encoding; reads exactly
  /// product(shape) * dtype_size(dtype) bytes from `bytes` (which may be null if that is 0).
  void add(std::string name, DType dtype, std::vector<std::int64_t> shape, const void* bytes) {
    Entry& e = begin_entry(std::move(name), dtype, std::move(shape));
    if (!e.bytes.empty()) {
      if (bytes == nullptr) {
        abort_entry(ErrorKind::SizeMismatch, "tensor " + detail::quoted(e.name) + " needs " +
                                                 std::to_string(e.bytes.size()) + " bytes but the data pointer is null");
      }
      std::memcpy(e.bytes.data(), bytes, e.bytes.size());
    }
  }

  /// Adds float values stored as `dtype` (F32 default; F64 widens exactly; F16 and BF16 round to
  /// nearest even). values.size() must equal product(shape).
  void add(std::string name, std::span<const float> values, std::vector<std::int64_t> shape,
           DType dtype = DType::F32) {
    add_floats(std::move(name), values, std::move(shape), dtype);
  }

  /// Adds double values stored as `dtype` (F64 default; F32, F16, BF16 round to nearest even,
  /// directly from the double so no double rounding occurs).
  void add(std::string name, std::span<const double> values, std::vector<std::int64_t> shape,
           DType dtype = DType::F64) {
    add_floats(std::move(name), values, std::move(shape), dtype);
  }

  /// Adds int64 values stored as `dtype` (I64 default; I32, U8, BOOL range-checked: OutOfRange).
  void add(std::string name, std::span<const std::int64_t> values, std::vector<std::int64_t> shape,
           DType dtype = DType::I64) {
    add_integers(std::move(name), values, std::move(shape), dtype);
  }

  /// Adds int32 values stored as `dtype` (I32 default; others range-checked).
  void add(std::string name, std::span<const std::int32_t> values, std::vector<std::int64_t> shape,
           DType dtype = DType::I32) {
    add_integers(std::move(name), values, std::move(shape), dtype);
  }

  /// Adds uint8 values stored as `dtype` (U8 default; others range-checked).
  void add(std::string name, std::span<const std::uint8_t> values, std::vector<std::int64_t> shape,
           DType dtype = DType::U8) {
    add_integers(std::move(name), values, std::move(shape), dtype);
  }

  /// Adds bool values stored as `dtype` (BOOL default: one byte, 0 or 1). Takes a bool array,
  /// since std::vector<bool> has no contiguous storage.
  void add(std::string name, std::span<const bool> values, std::vector<std::int64_t> shape,
           DType dtype = DType::BOOL) {
    add_integers(std::move(name), values, std::move(shape), dtype);
  }

  /// Sets a "__metadata__" entry (a later call with the same key replaces the value).
  void set_metadata(std::string key, std::string value) {
    check_utf8(key, "metadata key");
    check_utf8(value, "metadata value for key " + detail::quoted(key));
    metadata_[std::move(key)] = std::move(value);
  }

  /// Number of tensors added so far.
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

  /// Whether a tensor called `name` was added.
  [[nodiscard]] bool contains(std::string_view name) const { return names_.find(name) != names_.end(); }

  /// The complete file as bytes (what write() puts on disk); handy for tests and in-memory use.
  [[nodiscard]] std::vector<std::byte> to_bytes() const {
    const Layout lay = layout();
    std::vector<std::byte> out(8 + lay.header.size() + lay.data_size);
    detail::store_le<std::uint64_t>(out.data(), lay.header.size());
    std::memcpy(out.data() + 8, lay.header.data(), lay.header.size());
    std::byte* data = out.data() + 8 + lay.header.size();
    for (std::size_t k = 0; k < lay.order.size(); ++k) {
      const Entry& e = entries_[lay.order[k]];
      if (!e.bytes.empty()) std::memcpy(data + lay.offsets[k], e.bytes.data(), e.bytes.size());
    }
    return out;
  }

  /// Writes the file to `path` atomically: data goes to "<path>.tmp", is fsync'ed, then renamed
  /// over `path`. Any failure removes the temporary and raises SafetensorsError{Io} naming `path`.
  /// Two writers targeting the same path concurrently would share the temporary; don't.
  void write(const std::filesystem::path& path) const {
    const Layout lay = layout();
    const std::string target = path.string();
    const std::string tmp = target + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) io_fail(target, "cannot create temporary file " + tmp);

    std::byte prefix[8];
    detail::store_le<std::uint64_t>(prefix, lay.header.size());
    bool ok = write_all(fd, prefix, sizeof prefix) &&
              write_all(fd, lay.header.data(), lay.header.size());
    for (std::size_t k = 0; ok && k < lay.order.size(); ++k) {
      ok = write_all(fd, entries_[lay.order[k]].bytes.data(), entries_[lay.order[k]].bytes.size());
    }
    if (ok) ok = ::fsync(fd) == 0;  // data must be durable before the rename makes it visible
    const int saved = errno;
    if (::close(fd) != 0 && ok) ok = false;
    else errno = saved;
    if (!ok) {
      const int err = errno;
      ::unlink(tmp.c_str());
      errno = err;
      io_fail(target, "cannot write temporary file " + tmp);
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp.c_str());
      errno = err;
      io_fail(target, "cannot rename " + tmp + " into place");
    }
    sync_parent_directory(path);
  }

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<std::int64_t> shape;
    std::vector<std::byte> bytes;  // encoded little-endian data
  };

  struct Layout {
    std::string header;                 // padded JSON
    std::vector<std::size_t> order;     // entries_ indices in data-section order
    std::vector<std::uint64_t> offsets; // begin offset of order[k]
    std::uint64_t data_size = 0;
  };

  [[noreturn]] static void fail(ErrorKind kind, const std::string& detail) {
    throw SafetensorsError(kind, std::string(), "writer: " + detail);
  }

  [[noreturn]] static void io_fail(const std::string& path, const std::string& what) {
    throw SafetensorsError(ErrorKind::Io, path, what + ": " + std::strerror(errno));
  }

  static bool write_all(int fd, const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ::ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }

  // Makes the rename itself durable; best effort, since some filesystems refuse fsync on dirs.
  static void sync_parent_directory(const std::filesystem::path& path) {
    std::filesystem::path dir = path.parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      (void)::fsync(dfd);
      ::close(dfd);
    }
  }

  static void check_utf8(std::string_view s, const std::string& what) {
    if (const auto bad = detail::first_invalid_utf8(s)) {
      fail(ErrorKind::InvalidUtf8, what + " is not valid UTF-8 (bad byte at offset " + std::to_string(*bad) + ")");
    }
  }

  // Validates name, shape and (for typed adds) the value count, then appends the entry with a
  // zeroed byte buffer of the right size. Callers that fail afterwards call abort_entry to undo it,
  // so a failed add() leaves the writer as it was.
  Entry& begin_entry(std::string name, DType dtype, std::vector<std::int64_t> shape,
                     std::optional<std::size_t> value_count = std::nullopt) {
    check_utf8(name, "tensor name");
    if (name == "__metadata__") fail(ErrorKind::InvalidHeader, "the tensor name '__metadata__' is reserved");
    if (contains(name)) fail(ErrorKind::DuplicateName, "a tensor named " + detail::quoted(name) + " was already added");
    std::uint64_t count = 1;
    bool zero = false;
    bool overflow = false;
    for (std::int64_t d : shape) {
      if (d < 0) {
        fail(ErrorKind::BadShape, "tensor " + detail::quoted(name) + " has negative dimension in shape " +
                                      format_shape(shape));
      }
      const auto u = static_cast<std::uint64_t>(d);
      if (u == 0) zero = true;
      else if (count > UINT64_MAX / u) overflow = true;
      else count *= u;
    }
    if (zero) count = 0;
    if (!zero && (overflow || count > SIZE_MAX / dtype_size(dtype))) {
      fail(ErrorKind::BadShape, "tensor " + detail::quoted(name) + " shape " + format_shape(shape) +
                                    " is too large to hold in memory");
    }
    if (value_count && *value_count != count) {
      fail(ErrorKind::ShapeMismatch, "tensor " + detail::quoted(name) + " has " + std::to_string(*value_count) +
                                         " values but shape " + format_shape(shape) + " needs " +
                                         std::to_string(count));
    }
    Entry e{std::move(name), dtype, std::move(shape),
            std::vector<std::byte>(static_cast<std::size_t>(count) * dtype_size(dtype))};
    entries_.push_back(std::move(e));
    try {
      names_.insert(entries_.back().name);
    } catch (...) {
      entries_.pop_back();  // keep entries_ and names_ in step even on bad_alloc
      throw;
    }
    return entries_.back();
  }

  [[noreturn]] void abort_entry(ErrorKind kind, const std::string& detail) {
    names_.erase(entries_.back().name);
    entries_.pop_back();
    fail(kind, detail);
  }

  template <class T>
  void add_floats(std::string name, std::span<const T> values, std::vector<std::int64_t> shape, DType dtype) {
    if (!is_floating_dtype(dtype)) {
      fail(ErrorKind::DTypeMismatch, "tensor " + detail::quoted(name) + ": floating-point values cannot be stored as " +
                                         std::string(dtype_name(dtype)));
    }
    Entry& e = begin_entry(std::move(name), dtype, std::move(shape), values.size());
    std::byte* out = e.bytes.data();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double v = static_cast<double>(values[i]);
      switch (dtype) {
        case DType::F32: detail::store_le(out + 4 * i, std::bit_cast<std::uint32_t>(double_to_float(v))); break;
        case DType::F64: detail::store_le(out + 8 * i, std::bit_cast<std::uint64_t>(v)); break;
        case DType::F16: detail::store_le(out + 2 * i, double_to_f16(v)); break;
        case DType::BF16: detail::store_le(out + 2 * i, double_to_bf16(v)); break;
        default: break;
      }
    }
  }

  template <class T>
  void add_integers(std::string name, std::span<const T> values, std::vector<std::int64_t> shape, DType dtype) {
    if (is_floating_dtype(dtype)) {
      fail(ErrorKind::DTypeMismatch, "tensor " + detail::quoted(name) + ": integer values cannot be stored as " +
                                         std::string(dtype_name(dtype)) + " (convert to float first)");
    }
    Entry& e = begin_entry(std::move(name), dtype, std::move(shape), values.size());
    std::byte* out = e.bytes.data();
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto v = static_cast<std::int64_t>(values[i]);
      bool fits = true;
      switch (dtype) {
        case DType::I64: detail::store_le(out + 8 * i, static_cast<std::uint64_t>(v)); break;
        case DType::I32:
          fits = std::in_range<std::int32_t>(v);
          detail::store_le(out + 4 * i, static_cast<std::uint32_t>(static_cast<std::int32_t>(fits ? v : 0)));
          break;
        case DType::U8:
          fits = std::in_range<std::uint8_t>(v);
          out[i] = static_cast<std::byte>(fits ? v : 0);
          break;
        case DType::BOOL:
          fits = v == 0 || v == 1;
          out[i] = static_cast<std::byte>(v == 1 ? 1 : 0);
          break;
        default: break;
      }
      if (!fits) {
        abort_entry(ErrorKind::OutOfRange, "element " + std::to_string(i) + " of tensor " +
                                               detail::quoted(entries_.back().name) + " has value " +
                                               std::to_string(v) + ", which does not fit " +
                                               std::string(dtype_name(dtype)));
      }
    }
  }

  Layout layout() const {
    Layout lay;
    lay.order.resize(entries_.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) lay.order[i] = i;
    std::stable_sort(lay.order.begin(), lay.order.end(), [&](std::size_t a, std::size_t b) {
      return dtype_size(entries_[a].dtype) > dtype_size(entries_[b].dtype);
    });
    lay.offsets.resize(entries_.size());
    std::vector<std::uint64_t> begin_of(entries_.size());
    for (std::size_t k = 0; k < lay.order.size(); ++k) {
      lay.offsets[k] = lay.data_size;
      begin_of[lay.order[k]] = lay.data_size;
      lay.data_size += entries_[lay.order[k]].bytes.size();
    }
    // Header keys: metadata first, then tensors in the order they were added (readable diffs).
    nlohmann::ordered_json root = nlohmann::ordered_json::object();
    if (!metadata_.empty()) {
      nlohmann::ordered_json meta = nlohmann::ordered_json::object();
      for (const auto& [k, v] : metadata_) meta[k] = v;
      root["__metadata__"] = std::move(meta);
    }
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      nlohmann::ordered_json t = nlohmann::ordered_json::object();
      t["dtype"] = std::string(dtype_name(e.dtype));
      t["shape"] = e.shape;
      t["data_offsets"] = {begin_of[i], begin_of[i] + e.bytes.size()};
      root[e.name] = std::move(t);
    }
    lay.header = root.dump();
    lay.header.append((8 - lay.header.size() % 8) % 8, ' ');
    return lay;
  }

  std::vector<Entry> entries_;                    // insertion order
  std::set<std::string, std::less<>> names_;      // for duplicate detection
  std::map<std::string, std::string> metadata_;
};

}  // namespace ttmoe::io
