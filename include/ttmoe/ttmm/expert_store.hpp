#pragma once
// The TTMM expert store: the contract between training (which writes it, possibly from several MPI
// ranks at once) and serving (which reads it). Layout of a store folder STORE:
//   STORE/index.json                 format version, K, rank, alpha, target modules, the embedder φ
//                                    (id and dimension), the base model (name_or_path and a
//                                    fingerprint of its config), cluster sizes, expert folders
//   STORE/centroids.safetensors      key "centroids", [K, d] F32, one L2-normalised row per expert
//   STORE/experts/<i>/               expert i as a PEFT adapter folder (adapter_config.json +
//                                    adapter_model.safetensors, models/peft_adapter.hpp)
// Writes are atomic so a killed process never leaves something that looks usable: an expert is
// written into experts/.partial-<i>-<pid>-<n>/ and renamed to experts/<i>/ only once both files are
// on disk (fsync'ed), the index and the centroids go through temporary files and rename. Hence an
// experts/<i> folder is complete by construction, and a restarted training run skips it.
// Reading (ExpertStore::open) validates everything that can be checked without reading the factors
// and throws StoreError naming the file and the problem.

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ttmoe/io/safetensors_file.hpp"
#include "ttmoe/io/safetensors_writer.hpp"
#include "ttmoe/models/peft_adapter.hpp"
#include "ttmoe/ttmm/store_error.hpp"

namespace ttmoe::ttmm {

/// The version of the layout above that this code writes and reads.
inline constexpr int store_format_version = 1;

/// Which base model a store was trained on: its name or path (informational) and a fingerprint of
/// its config (compared: experts trained on another architecture or checkpoint config do not fit).
struct BaseModelId {
  std::string name_or_path;
  std::string config_fingerprint;  ///< "fnv1a64:<16 hex digits>" of the config, see config_fingerprint()
};

/// A stable fingerprint of a model config: FNV-1a (64 bit) over its JSON text with keys sorted
/// (nlohmann::json sorts them), so field order and whitespace in config.json do not matter.
inline std::string config_fingerprint(const nlohmann::json& config) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : config.dump()) h = (h ^ c) * 0x100000001b3ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return std::string("fnv1a64:") + buf;
}

/// The contents of index.json.
struct StoreIndex {
  index_t num_experts = 0;                   ///< K
  index_t rank = 64;                         ///< LoRA rank r of every expert
  double lora_alpha = 16;                    ///< LoRA alpha of every expert (scale alpha / r)
  std::vector<std::string> target_modules;   ///< PEFT target_modules of every expert
  std::string embedder_id;                   ///< the sentence embedder φ (name or path)
  index_t embedding_dim = 0;                 ///< d, the width of φ and of the centroids
  BaseModelId base_model;
  std::vector<std::int64_t> cluster_sizes;   ///< training documents per expert, K entries
  std::vector<std::string> expert_folders;   ///< relative to the store, K entries ("experts/<i>")

  /// The folder name the writer gives expert i.
  static std::string expert_folder(index_t i) { return "experts/" + std::to_string(i); }

  /// The JSON written to index.json.
  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json j;
    j["format"] = "ttmoe-ttmm-expert-store";
    j["format_version"] = store_format_version;
    j["num_experts"] = num_experts;
    j["rank"] = rank;
    j["lora_alpha"] = lora_alpha;
    j["target_modules"] = target_modules;
    j["embedder"] = {{"id", embedder_id}, {"dim", embedding_dim}};
    j["base_model"] = {{"name_or_path", base_model.name_or_path}, {"config_fingerprint", base_model.config_fingerprint}};
    j["cluster_sizes"] = cluster_sizes;
    j["experts"] = expert_folders;
    return j;
  }

  /// Parses and checks index.json's JSON; `file` names it in errors.
  static StoreIndex from_json(const nlohmann::json& j, const std::string& file) {
    auto fail = [&](const std::string& field, const std::string& why) -> void {
      throw StoreError(file, "field '" + field + "': " + why);
    };
    if (!j.is_object()) throw StoreError(file, "not a JSON object");
    auto get = [&](const nlohmann::json& obj, const char* key, const std::string& path) -> const nlohmann::json& {
      if (!obj.contains(key)) fail(path, "missing");
      return obj[key];
    };
    auto integer = [&](const nlohmann::json& v, const std::string& path, std::int64_t min) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < min)
        fail(path, v.dump() + " is not an integer >= " + std::to_string(min));
      return v.get<std::int64_t>();
    };
    auto string = [&](const nlohmann::json& v, const std::string& path) {
      if (!v.is_string()) fail(path, v.dump() + " is not a string");
      return v.get<std::string>();
    };
    if (j.value("format", std::string()) != "ttmoe-ttmm-expert-store")
      fail("format", "not a ttmoe TTMM expert store index (expected \"ttmoe-ttmm-expert-store\")");
    const auto version = integer(get(j, "format_version", "format_version"), "format_version", 1);
    if (version != store_format_version)
      fail("format_version", std::to_string(version) + " is not supported (this build reads version " +
                                 std::to_string(store_format_version) + ")");
    StoreIndex x;
    x.num_experts = index_t(integer(get(j, "num_experts", "num_experts"), "num_experts", 1));
    x.rank = index_t(integer(get(j, "rank", "rank"), "rank", 1));
    const auto& alpha = get(j, "lora_alpha", "lora_alpha");
    if (!alpha.is_number()) fail("lora_alpha", alpha.dump() + " is not a number");
    x.lora_alpha = alpha.get<double>();
    const auto& targets = get(j, "target_modules", "target_modules");
    if (!targets.is_array() || targets.empty()) fail("target_modules", targets.dump() + " is not a non-empty list");
    for (const auto& t : targets) x.target_modules.push_back(string(t, "target_modules"));
    const auto& emb = get(j, "embedder", "embedder");
    if (!emb.is_object()) fail("embedder", emb.dump() + " is not an object");
    x.embedder_id = string(get(emb, "id", "embedder.id"), "embedder.id");
    x.embedding_dim = index_t(integer(get(emb, "dim", "embedder.dim"), "embedder.dim", 1));
    const auto& base = get(j, "base_model", "base_model");
    if (!base.is_object()) fail("base_model", base.dump() + " is not an object");
    x.base_model.name_or_path = string(get(base, "name_or_path", "base_model.name_or_path"), "base_model.name_or_path");
    x.base_model.config_fingerprint =
        string(get(base, "config_fingerprint", "base_model.config_fingerprint"), "base_model.config_fingerprint");
    const auto& sizes = get(j, "cluster_sizes", "cluster_sizes");
    if (!sizes.is_array()) fail("cluster_sizes", sizes.dump() + " is not a list");
    for (const auto& s : sizes) x.cluster_sizes.push_back(integer(s, "cluster_sizes", 0));
    const auto& experts = get(j, "experts", "experts");
    if (!experts.is_array()) fail("experts", experts.dump() + " is not a list");
    for (const auto& e : experts) {
      auto f = string(e, "experts");
      // Folders stay inside the store: no absolute paths, no "..".
      const std::filesystem::path p(f);
      bool escapes = p.is_absolute();
      for (const auto& part : p) escapes = escapes || part == "..";
      if (escapes || f.empty()) fail("experts", "'" + f + "' is not a folder inside the store");
      x.expert_folders.push_back(std::move(f));
    }
    if (index_t(x.cluster_sizes.size()) != x.num_experts)
      fail("cluster_sizes", std::to_string(x.cluster_sizes.size()) + " entries for num_experts = " +
                                std::to_string(x.num_experts));
    if (index_t(x.expert_folders.size()) != x.num_experts)
      fail("experts", std::to_string(x.expert_folders.size()) + " entries for num_experts = " + std::to_string(x.num_experts));
    return x;
  }
};

namespace detail {

/// Flushes `path` (a file or a folder) to disk; best effort for folders, which some filesystems
/// refuse to fsync. Throws StoreError for a file that cannot be synced.
inline void fsync_path(const std::filesystem::path& path, bool is_folder) {
  const int fd = ::open(path.c_str(), (is_folder ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (is_folder) return;
    throw StoreError(path.string(), std::string("cannot open to sync: ") + std::strerror(errno));
  }
  const bool ok = ::fsync(fd) == 0 || is_folder;
  const int err = errno;
  ::close(fd);
  if (!ok) throw StoreError(path.string(), std::string("cannot sync: ") + std::strerror(err));
}

/// Writes `text` to `path` atomically (temporary file in the same folder, fsync, rename).
inline void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = std::filesystem::path(path.string() + ".tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw StoreError(path.string(), "cannot write " + tmp.string());
    }
  }
  fsync_path(tmp, false);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    throw StoreError(path.string(), "cannot rename " + tmp.string() + " into place: " + ec.message());
  }
  fsync_path(path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path(), true);
}

/// Runs `f`, turning the file-level errors of models/peft_adapter.hpp and io into a StoreError that
/// keeps their message (which already names the file) and adds `what` (e.g. "expert 3").
template <class F>
decltype(auto) as_store_error(const std::string& file, const std::string& what, F&& f) {
  try {
    return f();
  } catch (const StoreError&) {
    throw;
  } catch (const models::ConfigFieldError& e) {
    throw StoreError(file, what + ": " + e.what());
  } catch (const nn::CheckpointError& e) {
    throw StoreError(file, what + ": " + e.what());
  } catch (const io::SafetensorsError& e) {
    throw StoreError(file, what + ": " + e.what());
  }
}

}  // namespace detail

/// Writes an expert store, one expert at a time. Several processes may write experts into the same
/// store concurrently (each expert is renamed into place whole); the index and the centroids are
/// written by one of them (training's rank 0).
class ExpertStoreWriter {
 public:
  /// Opens (creating if needed) the store folder `dir`.
  explicit ExpertStoreWriter(std::filesystem::path dir) : dir_(std::move(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_ / "experts", ec);
    if (ec) throw StoreError((dir_ / "experts").string(), "cannot create the folder: " + ec.message());
  }

  /// The store folder.
  const std::filesystem::path& dir() const noexcept { return dir_; }

  /// Whether expert `i` is already in the store. The folder only ever appears by an atomic rename
  /// of a finished one, so its presence means complete; the files are still checked to exist and
  /// the weights' header to parse, which catches a folder someone edited by hand.
  bool has_expert(index_t i) const {
    const auto folder = dir_ / StoreIndex::expert_folder(i);
    if (!std::filesystem::is_directory(folder)) return false;
    if (!std::filesystem::exists(folder / "adapter_config.json")) return false;
    try {
      io::SafetensorsFile check(folder / "adapter_model.safetensors");
    } catch (const io::SafetensorsError&) {
      return false;
    }
    return true;
  }

  /// Writes expert `i` (a PEFT adapter) atomically in `dtype` (F32, BF16 or F16). Returns false,
  /// writing nothing, when the expert is already there (written by an earlier run or by another
  /// process in the meantime), true when this call put it in place.
  template <class T, class D>
  bool add_expert(index_t i, models::PeftAdapter<T, D>& adapter, io::DType dtype = io::DType::F32) {
    if (has_expert(i)) return false;
    static std::atomic<std::uint64_t> counter{0};
    const auto final_dir = dir_ / StoreIndex::expert_folder(i);
    const auto tmp = dir_ / "experts" /
                     (".partial-" + std::to_string(i) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    try {
      models::save_peft_adapter(adapter, tmp, dtype);
      detail::fsync_path(tmp / "adapter_config.json", false);
      detail::fsync_path(tmp / "adapter_model.safetensors", false);
      detail::fsync_path(tmp, true);
    } catch (...) {
      std::filesystem::remove_all(tmp, ec);
      throw;
    }
    // rename(2) onto an existing non-empty folder fails: then another process finished it first.
    std::filesystem::rename(tmp, final_dir, ec);
    if (ec) {
      std::error_code ignore;
      std::filesystem::remove_all(tmp, ignore);
      if (has_expert(i)) return false;
      throw StoreError(final_dir.string(), "cannot rename " + tmp.string() + " into place: " + ec.message());
    }
    detail::fsync_path(dir_ / "experts", true);
    return true;
  }

  /// Removes leftovers of killed writers (experts/.partial-*). Call it from one process while no
  /// other one writes experts (e.g. rank 0 before the ranks start); readers never look at them.
  std::size_t remove_partial_experts() {
    std::size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "experts"))
      if (e.path().filename().string().starts_with(".partial-")) {
        std::filesystem::remove_all(e.path());
        ++n;
      }
    return n;
  }

  /// Writes centroids.safetensors ([K, d] F32, key "centroids") atomically.
  void write_centroids(const Tensor<float, DynShape<2>>& centroids) {
    io::SafetensorsWriter w;
    const auto values = centroids.to_vector();
    w.add("centroids", std::span<const float>(values),
          {std::int64_t(centroids.extent(0)), std::int64_t(centroids.extent(1))});
    detail::as_store_error((dir_ / "centroids.safetensors").string(), "writing the centroids",
                           [&] { w.write(dir_ / "centroids.safetensors"); });
  }

  /// Writes index.json atomically; empty expert_folders are filled with "experts/<i>". Throws
  /// ValueError for an index that contradicts itself (K vs cluster sizes or folders).
  void write_index(StoreIndex index) {
    if (index.expert_folders.empty())
      for (index_t i = 0; i < index.num_experts; ++i) index.expert_folders.push_back(StoreIndex::expert_folder(i));
    // Round-trip through the reader's checks so the writer never produces an index it refuses.
    try {
      StoreIndex::from_json(nlohmann::json::parse(index.to_json().dump()), "index.json");
    } catch (const StoreError& e) {
      throw ValueError("ExpertStoreWriter::write_index: " + std::string(e.what()));
    }
    detail::write_text_atomically(dir_ / "index.json", index.to_json().dump(2) + "\n");
  }

 private:
  std::filesystem::path dir_;
};

/// A validated expert store, opened for reading. Opening checks, naming the file at fault:
/// index.json (format, version, fields), centroids.safetensors ([K, d] F32 with K and d from the
/// index), every expert folder (present; its config's r, alpha and target_modules equal the
/// index's; its factors' shapes fit the base model's Linear shapes), and, when asked, the base
/// model's config fingerprint. Factors are only read by load_expert (through the file's mmap).
class ExpertStore {
 public:
  /// Opens the store `dir` for a base model whose adaptable Linear modules are `base` (e.g.
  /// models::linear_shapes(model)); with `expected_base`, its config fingerprint must match too.
  static ExpertStore open(const std::filesystem::path& dir, const models::LinearShapes& base,
                          const std::optional<BaseModelId>& expected_base = std::nullopt) {
    ExpertStore s;
    s.dir_ = dir;
    s.base_ = base;
    if (!std::filesystem::is_directory(dir)) throw StoreError(dir.string(), "the expert store folder does not exist");
    const auto index_file = (dir / "index.json").string();
    {
      std::ifstream in(dir / "index.json");
      if (!in) throw StoreError(index_file, "missing or unreadable (not an expert store, or training has not started)");
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(in);
      } catch (const nlohmann::json::parse_error& e) {
        throw StoreError(index_file, std::string("invalid JSON: ") + e.what());
      }
      s.index_ = StoreIndex::from_json(j, index_file);
    }
    if (expected_base && !expected_base->config_fingerprint.empty() &&
        expected_base->config_fingerprint != s.index_.base_model.config_fingerprint)
      throw StoreError(index_file, "the experts were trained on base model '" + s.index_.base_model.name_or_path +
                                       "' (config " + s.index_.base_model.config_fingerprint + ") but the model given is '" +
                                       expected_base->name_or_path + "' (config " + expected_base->config_fingerprint + ")");
    s.read_centroids();
    for (index_t i = 0; i < s.index_.num_experts; ++i) s.check_expert(i);
    return s;
  }

  /// The store folder.
  const std::filesystem::path& dir() const noexcept { return dir_; }
  /// index.json's contents.
  const StoreIndex& index() const noexcept { return index_; }
  /// K, the number of experts.
  index_t num_experts() const noexcept { return index_.num_experts; }
  /// The centroids [K, d].
  const Tensor<float, DynShape<2>>& centroids() const noexcept { return centroids_; }
  /// Expert i's PEFT adapter folder.
  std::filesystem::path expert_dir(index_t i) const {
    check_range(i);
    return dir_ / index_.expert_folders[std::size_t(i)];
  }
  /// Reads expert i's factors (mapped, converted to T); errors as open's, naming the expert.
  template <class T = float, class D = cpu>
  models::PeftAdapter<T, D> load_expert(index_t i) const {
    const auto folder = expert_dir(i);
    return detail::as_store_error(folder.string(), "expert " + std::to_string(i),
                                  [&] { return models::load_peft_adapter<T, D>(folder, base_); });
  }

 private:
  void check_range(index_t i) const {
    if (i >= index_.num_experts)
      throw ValueError("ExpertStore: expert " + std::to_string(i) + " out of range [0, " +
                       std::to_string(index_.num_experts) + ")");
  }

  void read_centroids() {
    const auto path = dir_ / "centroids.safetensors";
    const auto file = path.string();
    if (!std::filesystem::exists(path)) throw StoreError(file, "missing");
    detail::as_store_error(file, "centroids", [&] {
      io::SafetensorsFile f(path);
      if (!f.contains("centroids")) throw StoreError(file, "no tensor 'centroids'");
      const auto& info = f.info("centroids");
      if (info.dtype != io::DType::F32) throw StoreError(file, "'centroids' is " + std::string(io::dtype_name(info.dtype)) + ", not F32");
      if (info.shape.size() != 2) throw StoreError(file, "'centroids' has shape " + io::format_shape(info.shape) + ", not [K, d]");
      if (index_t(info.shape[0]) != index_.num_experts || index_t(info.shape[1]) != index_.embedding_dim)
        throw StoreError(file, "'centroids' has shape " + io::format_shape(info.shape) + " but index.json gives K = " +
                                   std::to_string(index_.num_experts) + ", d = " + std::to_string(index_.embedding_dim));
      std::vector<float> v(std::size_t(info.shape[0] * info.shape[1]));
      f.read_as<float>("centroids", std::span<float>(v));
      centroids_ = Tensor<float, DynShape<2>>::from_host(DynShape<2>(info.shape[0], info.shape[1]), std::span<const float>(v));
    });
  }

  void check_expert(index_t i) const {
    const auto folder = dir_ / index_.expert_folders[std::size_t(i)];
    const std::string what = "expert " + std::to_string(i);
    if (!std::filesystem::is_directory(folder))
      throw StoreError(folder.string(), what + " is missing (index.json lists " + std::to_string(index_.num_experts) +
                                            " experts; was training interrupted? rerun it to finish the store)");
    detail::as_store_error(folder.string(), what, [&] {
      const auto layout = models::inspect_peft_adapter(folder, base_);
      const auto& c = layout.config;
      const auto cfg = (folder / "adapter_config.json").string();
      if (c.r != index_.rank || !c.rank_pattern.empty())
        throw StoreError(cfg, what + " has rank " + std::to_string(c.r) + (c.rank_pattern.empty() ? "" : " with a rank_pattern") +
                                  " but index.json gives rank " + std::to_string(index_.rank));
      if (c.lora_alpha != index_.lora_alpha || !c.alpha_pattern.empty())
        throw StoreError(cfg, what + " has lora_alpha " + std::to_string(c.lora_alpha) + " but index.json gives " +
                                  std::to_string(index_.lora_alpha));
      if (c.target_modules != index_.target_modules)
        throw StoreError(cfg, what + " targets " + nlohmann::json(c.target_modules).dump() + " but index.json gives " +
                                  nlohmann::json(index_.target_modules).dump());
    });
  }

  std::filesystem::path dir_;
  models::LinearShapes base_;
  StoreIndex index_;
  Tensor<float, DynShape<2>> centroids_;
};

}  // namespace ttmoe::ttmm
