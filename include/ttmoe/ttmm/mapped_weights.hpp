#pragma once
// The base model's checkpoint kept mapped so a dense merge can be undone by reading the original
// weights back (one pass: convert F32/BF16/F16 -> F32 straight into the weight) instead of a second
// GEMM and a patch. The mapping is read-only and shared with the page cache, so the process holds
// no copy of the weights; pages the kernel dropped are read from the file again.
//
// A file that changed on disk after loading must not be trusted. MappedBaseWeights records the
// file's (device, inode, size, mtime) when it is opened and compares them with the path's current
// stat before a merge and before a restore:
//  - same inode, other size or mtime: the file was rewritten in place. A MAP_PRIVATE mapping may
//    then show the new bytes (or SIGBUS if it shrank), so the mapping is no longer the loaded
//    weights. Before a merge the caller falls back to the GEMM + patch restore (exact_merge.hpp);
//    before a restore of a merge that relied on the mapping it REFUSES (ValueError naming the file,
//    weights left merged): there is no other exact source left, and a silent wrong restore is worse.
//  - another inode, or the path gone: the file was replaced by rename or deleted. The mapping keeps
//    the old inode alive, unchanged, so it is still the loaded weights and is used.
// Only single-file checkpoints (model.safetensors) are handled; a sharded one gives no mapping and
// merges use the fallback.

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ttmoe/core/config.hpp"
#include "ttmoe/core/error.hpp"
#include "ttmoe/io/safetensors_file.hpp"

namespace ttmoe::ttmm {

/// Identity of a file as the OS sees it; equal identities mean "not modified" as far as stat can
/// tell (mtime has nanosecond resolution on the file systems used here).
struct FileIdentity {
  std::uint64_t device = 0, inode = 0, size = 0;
  std::int64_t mtime_ns = 0;
  bool exists = false;

  /// stat(path); `exists` is false when the path is gone.
  static FileIdentity of(const std::filesystem::path& path) {
    struct stat st {};
    FileIdentity id;
    if (::stat(path.c_str(), &st) != 0) return id;
    id.exists = true;
    id.device = std::uint64_t(st.st_dev);
    id.inode = std::uint64_t(st.st_ino);
    id.size = std::uint64_t(st.st_size);
    id.mtime_ns = std::int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    return id;
  }
};

/// A base model's single-file safetensors checkpoint, mapped for exact restores after a merge.
class MappedBaseWeights {
 public:
  /// Maps `file` (a model.safetensors) and records its identity. Open it right after loading the
  /// model from the same file, so both see the same bytes.
  explicit MappedBaseWeights(std::filesystem::path file)
      : path_(std::move(file)), identity_(FileIdentity::of(path_)), file_(std::make_shared<const io::SafetensorsFile>(path_)) {}

  /// The checkpoint of an HF model folder (`dir/model.safetensors`), or nullptr when the folder has
  /// none (a sharded checkpoint): merges then use exact_merge's GEMM + patch restore.
  static std::shared_ptr<const MappedBaseWeights> open_model_folder(const std::filesystem::path& dir) {
    const auto single = dir / "model.safetensors";
    if (!std::filesystem::exists(single)) return nullptr;
    return std::make_shared<const MappedBaseWeights>(single);
  }

  /// The mapped file's path.
  const std::filesystem::path& path() const noexcept { return path_; }

  /// True while the mapping still holds the bytes seen when it was opened (see the header comment).
  bool unchanged() const {
    const auto now = FileIdentity::of(path_);
    if (!now.exists || now.device != identity_.device || now.inode != identity_.inode) return true;
    return now.size == identity_.size && now.mtime_ns == identity_.mtime_ns;
  }

  /// True when the checkpoint holds `tensor` with shape [rows, cols] in a float type.
  bool holds(const std::string& tensor, index_t rows, index_t cols) const {
    if (!file_->contains(tensor)) return false;
    const auto& t = file_->info(tensor);
    return io::is_floating_dtype(t.dtype) && t.shape == std::vector<std::int64_t>{std::int64_t(rows), std::int64_t(cols)};
  }

  /// True when the checkpoint stores `tensor` as BF16 (its values are then BF16 values in the model).
  bool stores_bf16(const std::string& tensor) const {
    return file_->contains(tensor) && file_->info(tensor).dtype == io::DType::BF16;
  }

  /// True when the first row of the stored `tensor` ([rows, cols], see holds) equals `row0` bit for
  /// bit. A cheap guard (one row per module) that the model's weights are still the file's: a weight
  /// that already carries a merged adapter or was trained in-process differs in nearly every element,
  /// and restoring such a weight from the file would silently drop that change.
  bool first_row_matches(const std::string& tensor, std::span<const float> row0) const {
    const auto& t = file_->info(tensor);
    std::vector<float> stored(row0.size());
    io::detail::convert_floats<float>(t.dtype, t.bytes.data(), std::span<float>(stored));
    return std::memcmp(stored.data(), row0.data(), row0.size() * sizeof(float)) == 0;
  }

  /// Writes the stored `tensor` into `dst` (converting to F32). Throws ValueError naming the file
  /// when it changed on disk since opening, before anything is written.
  void read_back(const std::string& tensor, std::span<float> dst) const {
    if (!unchanged())
      throw ValueError("MappedBaseWeights: " + path_.string() +
                       " was modified in place since the model was loaded; its mapping no longer holds the "
                       "original weights, so restoring from it is refused (weights left merged; reload the model)");
    file_->read_as(tensor, dst);
  }

 private:
  std::filesystem::path path_;
  FileIdentity identity_;
  std::shared_ptr<const io::SafetensorsFile> file_;
};

}  // namespace ttmoe::ttmm
