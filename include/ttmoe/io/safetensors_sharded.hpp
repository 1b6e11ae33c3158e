#pragma once
// A Hugging Face sharded checkpoint (`model.safetensors.index.json` + the shard files it names) seen
// as one tensor source with SafetensorsFile's lookup interface (contains / info / names / read_as),
// so nn/checkpoint.hpp's load_state reads it unchanged. Every shard is memory-mapped and validated on
// open; an index naming a missing shard, or a tensor its shard does not hold, is a SafetensorsError
// naming the file.

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/io/safetensors_file.hpp"

namespace ttmoe::io {

/// The shards of one checkpoint, indexed by tensor name.
class ShardedSafetensors {
 public:
  /// Opens the index json at `index_path` and every shard it names (relative to its folder).
  explicit ShardedSafetensors(const std::filesystem::path& index_path) : label_(index_path.string()) {
    std::ifstream in(index_path);
    if (!in) throw SafetensorsError(ErrorKind::Io, label_, "cannot open the shard index");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      throw SafetensorsError(ErrorKind::InvalidJson, label_, std::string("shard index: ") + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      throw SafetensorsError(ErrorKind::InvalidHeader, label_, "shard index has no \"weight_map\" object");
    std::map<std::string, std::size_t> shard_of_file;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        throw SafetensorsError(ErrorKind::InvalidHeader, label_, "weight_map entry '" + name + "' is not a file name");
      const std::string f = file.get<std::string>();
      auto it = shard_of_file.find(f);
      if (it == shard_of_file.end()) {
        const auto p = index_path.parent_path() / f;
        if (!std::filesystem::exists(p))
          throw SafetensorsError(ErrorKind::Io, p.string(), "shard named by " + label_ + " does not exist");
        shards_.push_back(std::make_unique<SafetensorsFile>(p));
        it = shard_of_file.emplace(f, shards_.size() - 1).first;
      }
      const SafetensorsFile& s = *shards_[it->second];
      if (!s.contains(name))
        throw SafetensorsError(ErrorKind::MissingTensor, s.path(),
                               "does not hold '" + name + "', which " + label_ + " assigns to it");
      where_.emplace(name, it->second);
    }
  }

  /// The index file (used in error messages).
  [[nodiscard]] const std::string& path() const noexcept { return label_; }
  /// True: every shard is a read-only mapping of its file (SafetensorsFile::is_mapped).
  [[nodiscard]] bool is_mapped() const noexcept { return true; }
  /// SafetensorsFile::advise_huge_pages on every shard.
  void advise_huge_pages() const noexcept {
    for (const auto& s : shards_) s->advise_huge_pages();
  }
  /// Whether the index names tensor `name`.
  [[nodiscard]] bool contains(std::string_view name) const { return where_.find(std::string(name)) != where_.end(); }
  /// Tensor names in index order (sorted).
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, s] : where_) out.push_back(n);
    return out;
  }
  /// The entry for `name` in its shard; SafetensorsError{MissingTensor} if the index lacks it.
  [[nodiscard]] const TensorInfo& info(std::string_view name) const { return shard(name).info(name); }
  /// Copies tensor `name` into dst converting element types (SafetensorsFile::read_as).
  template <detail::ReadableElement T>
  void read_as(std::string_view name, std::span<T> dst) const {
    shard(name).read_as(name, dst);
  }
  /// The number of shard files.
  [[nodiscard]] std::size_t shard_count() const noexcept { return shards_.size(); }

 private:
  const SafetensorsFile& shard(std::string_view name) const {
    const auto it = where_.find(std::string(name));
    if (it == where_.end()) throw SafetensorsError(ErrorKind::MissingTensor, label_, "no tensor '" + std::string(name) + "'");
    return *shards_[it->second];
  }
  std::string label_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, std::size_t, std::less<>> where_;
};

}  // namespace ttmoe::io
