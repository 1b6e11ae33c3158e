// Typed errors for safetensors reading and writing.
//
// Every failure carries a machine-readable kind (so callers and tests can branch on the cause
// without parsing text) and the file it concerns (so a message in a log of many checkpoints
// says which one is broken).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ttmoe::io {

/// What went wrong; one value per distinct cause so tests can assert the exact failure.
enum class ErrorKind {
  Truncated,           ///< File shorter than the 8-byte prefix, or tensor data past the end of the file.
  HeaderTooLarge,      ///< Declared header length exceeds the file or the sanity limit.
  HeaderTooSmall,      ///< Declared header length is below 2 (no JSON object fits).
  InvalidUtf8,         ///< Header bytes (or a name written by the writer) are not valid UTF-8.
  InvalidJson,         ///< Header is not parseable JSON (or nests absurdly deep).
  InvalidHeader,       ///< JSON is valid but not the safetensors layout (not an object, missing fields, ...).
  DuplicateName,       ///< The same tensor name (or JSON key) appears twice.
  UnknownDType,        ///< A dtype string this library does not know.
  BadShape,            ///< A shape that is not an array of non-negative integers (or overflows).
  BadOffsets,          ///< data_offsets not two non-negative integers with begin <= end.
  SizeMismatch,        ///< data_offsets span a different byte count than shape * dtype size.
  OverlappingOffsets,  ///< Two tensors share bytes of the data section.
  MissingTensor,       ///< Lookup of a name the file does not hold.
  ShapeMismatch,       ///< Tensor shape (or destination size) differs from what the caller expects.
  DTypeMismatch,       ///< Tensor dtype cannot be converted to the requested element type.
  OutOfRange,          ///< An integer value does not fit the destination / target type.
  Io,                  ///< Operating-system failure: open, mmap, write, rename.
};

/// Stable spelling of a kind, for messages and test output.
constexpr std::string_view error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::Truncated: return "Truncated";
    case ErrorKind::HeaderTooLarge: return "HeaderTooLarge";
    case ErrorKind::HeaderTooSmall: return "HeaderTooSmall";
    case ErrorKind::InvalidUtf8: return "InvalidUtf8";
    case ErrorKind::InvalidJson: return "InvalidJson";
    case ErrorKind::InvalidHeader: return "InvalidHeader";
    case ErrorKind::DuplicateName: return "DuplicateName";
    case ErrorKind::UnknownDType: return "UnknownDType";
    case ErrorKind::BadShape: return "BadShape";
    case ErrorKind::BadOffsets: return "BadOffsets";
    case ErrorKind::SizeMismatch: return "SizeMismatch";
    case ErrorKind::OverlappingOffsets: return "OverlappingOffsets";
    case ErrorKind::MissingTensor: return "MissingTensor";
    case ErrorKind::ShapeMismatch: return "ShapeMismatch";
    case ErrorKind::DTypeMismatch: return "DTypeMismatch";
    case ErrorKind::OutOfRange: return "OutOfRange";
    case ErrorKind::Io: return "Io";
  }
  return "Unknown";
}

/// The one exception type of ttmoe::io safetensors code. what() reads "<path>: <detail>";
/// when no file is involved yet (writer.add) the prefix is "safetensors".
class SafetensorsError : public std::runtime_error {
 public:
  /// `path` is the file concerned (may be empty), `detail` says what is wrong with it.
  SafetensorsError(ErrorKind kind, std::string path, const std::string& detail)
      : std::runtime_error((path.empty() ? std::string("safetensors") : path) + ": " + detail),
        kind_(kind),
        path_(std::move(path)) {}

  /// The cause, for branching without parsing the message.
  [[nodiscard]] ErrorKind kind() const noexcept { return kind_; }
  /// The file (or in-memory label) the error concerns; empty for writer.add errors.
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  ErrorKind kind_;
  std::string path_;
};

}  // namespace ttmoe::io
